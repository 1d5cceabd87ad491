"""One rule for which settings exist and what they release: the offloader, the recommender, the choose run.

For every setting ``(G, N, prefetch_step)`` of 8 and of 28 layers (G in 1..L, N in 1..G, steps 1..3) the real
``offload.prefetch.CurrentPrefetchOffloader`` is built in-process without vLLM's engine (``wrap_modules`` +
``post_init`` over ``offload_tools.synthetic_stack`` layers at a small width, on CPU, as the GPU check does), and
its own accounting (slots allocated, static buffer bytes, released bytes, from ``evidence_state``) must equal

* the choose run's (``offload_tools.choice``: ``num_slots``, ``slot_bytes`` from the layer's parameter bytes,
  ``released_bytes``), and
* the recommender's (``analysis.model.predict.predict_unmeasured``), fed the offloader's evidence of one measured
  setting as a run's summary row would carry it (every layer at step 3, or one layer at step 3: the case where a
  prefetch step larger than the offloaded layer count once made both its per-slot size and its released bytes wrong).

Every setting's ``(offloaded layers, slots)`` is one of ``offload_tools.choice.distinct_settings`` and every
distinct one is predicted by the recommender unless measured.

Cost (docs/measurements/test-stage-speed-2026-12-05.md): each test builds its stack of ``L`` layers once and hands
every offloader the same layers, put back as built after each one (``Stack``: every parameter's original storage,
no instance ``forward``; checked before every build), and runs with one intra-op torch thread: the slot and
packing copies are a few kB each, and torch's two-thread copies of them cost 4x the CPU (more on a loaded host).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd
import pytest
import torch

from analysis.model.predict import predict_unmeasured, slot_from_evidence
from offload.prefetch import CurrentPrefetchOffloader
from offload.ring import num_slots
from offload.selection import select_offload_layers
from offload_tools.choice import Setting, distinct_settings, released_bytes, setting_key, slot_bytes
from offload_tools.synthetic_stack import DecoderLayer, Shapes
from offload_tools.transfer_model import TransferModel

WIDTH_DIVISOR = 128  # hidden 28, intermediate 148: a few kB per layer, 512-byte key alignment still visible
STEPS = (1, 2, 3)


class Stack:
    """``shapes.layers`` decoder layers built once and handed to one offloader after another.

    An offloader on CPU changes a wrapped layer in two ways only (``offload.prefetch``): each offloaded parameter's
    ``.data`` becomes a view of a slot arena (``_pack``) and the layer gets an instance ``forward`` (``_hook``).
    ``fresh()`` undoes both and checks that every parameter is back on the storage it was built with, so every
    offloader sees the layers as built (layers a setting does not select are real layers, left untouched).
    """

    def __init__(self, shapes: Shapes) -> None:
        self.layers = [DecoderLayer(shapes) for _ in range(shapes.layers)]
        self.built = [[(p, p.data, p.data_ptr()) for p in layer.parameters()] for layer in self.layers]

    def fresh(self) -> list[DecoderLayer]:
        for layer, params in zip(self.layers, self.built, strict=True):
            layer.__dict__.pop("forward", None)
            for p, data, ptr in params:
                if p.data_ptr() != ptr:
                    p.data = data
                    assert p.data_ptr() == ptr
        return self.layers


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op torch thread for the test (restored after): its copies are a few kB each."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _evidence(stack: Stack, g: int, n: int, k: int) -> dict:
    """The offloader's own accounting of one setting: evidence fields plus the slots it allocated."""
    off = CurrentPrefetchOffloader(g, n, k)
    try:
        off.wrap_modules(iter(stack.fresh()))
        off.post_init()
        ev = dict(off.evidence_state())
        ev["slots"] = off.buffer_pool.num_slots if off.buffer_pool is not None else 0
        ev["slot_arena_bytes"] = off.buffer_pool.total_bytes // ev["slots"] if ev["slots"] else 0
        return ev
    finally:
        off.shutdown()


def _summary_row(g: int, n: int, k: int, ev: dict) -> dict:
    """A measured setting as ``analysis.aggregate`` carries it (the evidence fields the recommender reads)."""
    return {"implementation": "current", "group_size": g, "num_in_group": n, "prefetch_step": k,
            "wrapped_count": ev["wrapped_count"], "static_buffer_bytes": ev["static_buffer_bytes"],
            "offloaded_bytes": ev["offloaded_bytes"]}


def _recommender(num_layers: int, layer: int, measured: tuple[int, int, int], ev: dict) -> dict:
    """The recommender's released bytes per setting key, fed one measured setting's evidence."""
    model = TransferModel(baseline_tok_s=100.0, num_prompts=4, num_layers=num_layers,
                          bytes_per_layer=ev["offloaded_bytes"] / ev["wrapped_count"],
                          bandwidth_bytes_s=1e9, mode="serial")
    assert model.bytes_per_layer == layer
    ph = pd.DataFrame([_summary_row(*measured, ev)])
    preds = predict_unmeasured(model, ph, "current", need=-math.inf)
    return {setting_key(num_layers, p["group_size"], p["num_in_group"], p["prefetch_step"]): p["predicted_released_bytes"]
            for p in preds}


@pytest.mark.heavy  # 1,326 offloaders built: 0.5 CPU-s at 8 layers, 7-10 at 28 on this host (Python per wrapped layer)
@pytest.mark.parametrize("num_layers", [8, 28])
def test_offloader_recommender_and_choose_run_account_every_setting_alike(num_layers, one_thread):
    shapes = Shapes.qwen25_7b(layers=num_layers, width_divisor=WIDTH_DIVISOR)
    stack = Stack(shapes)
    params = [p.numel() * p.element_size() for p in DecoderLayer(shapes).parameters()]
    layer, slot = sum(params), slot_bytes(params)  # the choose run's sizes (runners.planning.choose_plan.model_sizes)
    assert slot > layer  # the alignment is visible at this width: a slot is not a layer's bytes
    layer_bytes = dict.fromkeys(range(num_layers), layer)
    one = (num_layers, 1, 3)  # one offloaded layer at prefetch step 3
    assert len(select_offload_layers(num_layers, one[0], one[1])) == 1
    every = (1, 1, 3)
    rec_every = _recommender(num_layers, layer, every, _evidence(stack, *every))
    rec_one = _recommender(num_layers, layer, one, _evidence(stack, *one))
    distinct = {setting_key(num_layers, s.group_size, s.num_in_group, s.prefetch_step)
                for s in distinct_settings(num_layers)}
    seen = set()
    for g in range(1, num_layers + 1):
        for n in range(1, g + 1):
            for k in STEPS:
                ev = _evidence(stack, g, n, k)
                key = setting_key(num_layers, g, n, k)
                wrapped = len(key[0])
                assert ev["wrapped_layers"] == key[0]
                assert ev["slots"] == num_slots(wrapped, k) == key[1], (g, n, k)
                assert ev["static_buffer_bytes"] == ev["slots"] * slot, (g, n, k)
                if ev["slots"]:
                    assert ev["slot_arena_bytes"] == slot
                assert ev["offloaded_bytes"] == wrapped * layer
                choose = released_bytes(Setting(g, n, k), layer_bytes, slot, num_layers)
                assert ev["released_bytes"] == choose, (g, n, k)
                if wrapped:
                    seen.add(key)
                for rec in (rec_every, rec_one):
                    if key in rec:
                        assert rec[key] == ev["released_bytes"], (g, n, k)
    assert seen == distinct
    assert set(rec_every) == distinct - {setting_key(num_layers, *every)}
    assert set(rec_one) == distinct - {setting_key(num_layers, *one)}


def test_one_offloaded_layer_at_prefetch_three_releases_a_layer_minus_one_slot(one_thread):
    shapes = Shapes.qwen25_7b(layers=8, width_divisor=WIDTH_DIVISOR)
    stack = Stack(shapes)
    params = [p.numel() * p.element_size() for p in DecoderLayer(shapes).parameters()]
    ev = _evidence(stack, 8, 1, 3)
    assert ev["slots"] == 1 and ev["released_bytes"] == sum(params) - slot_bytes(params)
    rec = _recommender(8, sum(params), (1, 1, 3), _evidence(stack, 1, 1, 3))
    assert rec[setting_key(8, 8, 1, 3)] == ev["released_bytes"]
    # the per-slot size read from the one-layer evidence is one slot, not a third of it
    ph = pd.DataFrame([_summary_row(8, 1, 3, ev)])
    assert slot_from_evidence(ph, default=0) == slot_bytes(params)
