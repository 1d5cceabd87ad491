"""The crossing protocol and upstream's, proven on a happens-before fake (tests/offload/graph_fakes.py).

For every (G, N, prefetch_step) point of the H200 table (28 layers, steps 1..3) and for M = 1..29
wrapped modules (steps 1..3), driven in vLLM's order (eager warm-up, ``sync_prev_onload`` then a
capture with ``join_after_forward`` inside it, two graphs of two batch sizes, replays each after
``sync_prev_onload``, eager steps between replays):

* every read of an offloaded slot happens after the copy of its own module, with no copy into
  that memory unordered with it (every consumer waits on the refill of its own module; no slot
  is overwritten before its last reader);
* a replay whose owed refill was not issued is counted by the stale-read guard;
* a slot serving one module is copied once;
* the capture rules hold (no unjoined stream, no isolation error) for both protocols.
"""

from __future__ import annotations

import pytest
import torch

from offload import ring
from offload.crossing import Crossing
from offload.prefetch import CurrentPrefetchOffloader
from offload.selection import select_offload_layers
from offload_tools.upstream_protocol import UpstreamProtocolOffloader, upstream_next_refill
from tests.offload.fakes import FakeBackend, ProbeLayer
from tests.offload.graph_fakes import HbBackend, HbLayer, analyse

H200_POINTS = [(28, 1), (14, 1), (28, 2), (8, 1), (7, 1), (14, 2), (8, 2), (4, 1), (2, 1), (4, 2)]
CASES = [(28, g, n, k) for g, n in H200_POINTS for k in (1, 2, 3)] + \
        [(m, 1, 1, k) for m in range(1, 30) for k in (1, 2, 3)]
IDS = [f"L{c[0]}-G{c[1]}-N{c[2]}-step{c[3]}" for c in CASES]


def build(num_layers, g, n, step, cls=CurrentPrefetchOffloader, **kw):
    b = HbBackend(**kw)
    off = cls(g, n, step, backend_factory=lambda device: b)
    layers = off.wrap_modules(HbLayer(i, b) for i in range(num_layers))
    off.post_init()
    return b, off, layers


def drive(b, off, layers, replays=6):
    """vLLM's order: eager warm-up, capture two graphs, replays with eager steps in between."""
    def fwd():
        x = torch.zeros(())
        for layer in layers:
            x = layer(x)
        return x

    def captured():
        out = fwd()
        off.join_after_forward()
        return out

    fwd()
    fwd()
    off.sync_prev_onload()
    g1, _ = b.capture(captured)
    off.sync_prev_onload()
    g2, _ = b.capture(captured)  # another batch size: same events
    for r in range(replays):
        off.sync_prev_onload()
        b.replay(g1 if r % 2 == 0 else g2)
        if r == 2:
            fwd()  # an eager step (e.g. a prefill) between replays
    fwd()


def single_module_ranges(off):
    return [(dst.data_ptr(), dst.data_ptr() + dst.numel() * dst.element_size())
            for w in off.wrapped if w.next_index == w.index for dst, _ in w.runs]


@pytest.mark.parametrize(("layers", "g", "n", "step"), CASES, ids=IDS)
@pytest.mark.heavy  # measured 8.3 s over 48 cases in the fast tier (its budget is 2 minutes)
def test_crossing_protocol_every_read_sees_its_own_module_and_resident_slots_are_copied_once(layers, g, n, step):
    b, off, mods = build(layers, g, n, step)
    assert isinstance(off.protocol, Crossing) and off.evidence_state()["copy_protocol"] == "crossing"
    drive(b, off, mods)
    rep = analyse(b, off)
    m = len(select_offload_layers(layers, g, n))
    assert rep.reads >= 2 * m * 8  # every offloaded layer read in every step
    assert rep.races == [] and rep.wrong == [] and rep.stale_tags == 0
    for rng in single_module_ranges(off):
        assert rep.writes_per_range[rng] == 1, "a slot serving one module was copied again"
    assert off.fallback_loads == 0


@pytest.mark.parametrize(("layers", "g", "n", "step"), [c for c in CASES if len(select_offload_layers(*c[:3])) > c[3]],
                         ids=[i for c, i in zip(CASES, IDS) if len(select_offload_layers(*c[:3])) > c[3]])
@pytest.mark.heavy  # measured 10.4 s over 48 cases in the fast tier (its budget is 2 minutes)
def test_a_replay_whose_owed_refill_was_not_issued_is_counted_by_the_guard(layers, g, n, step, monkeypatch):
    b, off, mods = build(layers, g, n, step)
    issue, replay = Crossing._issue_crossing, b.replay
    calls = {"replays": 0, "skipped": 0}

    def skip_one(self, s, j, fork):
        if not fork and calls["replays"] and not calls["skipped"]:  # the first refill owed by a replay
            calls["skipped"] += 1
            return  # not issued: the next replay must not pass silently
        issue(self, s, j, fork)

    def counting_replay(graph):
        calls["replays"] += 1
        replay(graph)

    monkeypatch.setattr(Crossing, "_issue_crossing", skip_one)
    b.replay = counting_replay
    drive(b, off, mods)
    rep = analyse(b, off)
    assert calls["skipped"] == 1
    assert rep.stale_tags >= 1, "the skipped refill was not detected"
    assert rep.wrong  # and a layer did read another module's bytes: what the guard reports


@pytest.mark.parametrize(("layers", "g", "n", "step"), [c for c in CASES if c[3] == 1], ids=[
    i for c, i in zip(CASES, IDS) if c[3] == 1])
@pytest.mark.heavy  # measured 5.4 s over 21 cases in the fast tier (its budget is 2 minutes)
def test_upstream_protocol_is_correct_at_prefetch_step_one_and_copies_every_module_every_step(layers, g, n, step):
    b, off, mods = build(layers, g, n, step, cls=UpstreamProtocolOffloader)
    assert off.evidence_state()["copy_protocol"] == "captured_join"
    drive(b, off, mods)
    rep = analyse(b, off)
    assert rep.races == [] and rep.wrong == []
    m = len(off.wrapped)
    writes = sum(rep.writes_per_range[(d.data_ptr(), d.data_ptr() + d.numel() * d.element_size())]
                 for w in off.wrapped for d, _ in w.runs)
    assert writes >= m * 5  # one copy per module per eager step and per capture, none skipped


def test_upstream_ring_matches_its_documented_rule():
    assert [upstream_next_refill(i, 3, 2) for i in range(3)] == [2, 1, 0]  # target kept only in its slot
    assert [upstream_next_refill(i, 4, 2) for i in range(4)] == [2, 3, 0, 1]
    assert upstream_next_refill(0, 1, 1) == 0 and upstream_next_refill(0, 2, 3) == 1
    assert [ring.next_refill(i, 4, 2) for i in range(4)] == [2, 3, 0, 1]


def test_without_external_events_the_offloader_falls_back_to_the_captured_join_and_says_so():
    b, off, mods = build(6, 2, 1, 1, external=False)
    assert off.evidence_state()["copy_protocol"] == "captured_join"
    drive(b, off, mods)
    rep = analyse(b, off)
    assert rep.races == [] and rep.wrong == []


def test_captured_join_puts_the_boundary_refill_in_the_graph_and_crossing_does_not():
    for protocol, in_graph in (("captured_join", True), ("crossing", False)):
        b = HbBackend()
        off = CurrentPrefetchOffloader(2, 1, 1, backend_factory=lambda d: b, copy_protocol=protocol)
        mods = off.wrap_modules(HbLayer(i, b) for i in range(4))
        off.post_init()
        drive(b, off, mods, replays=0)
        g, _ = b.capture(lambda: [m(torch.zeros(())) for m in mods] and off.join_after_forward())
        last_read = max(i for i, t in enumerate(g.nodes) if t.kind == "read" and t.info[1] == ("layer", 3))
        writes_after = [t for t in g.nodes[last_read:] if t.kind == "write"]
        assert bool(writes_after) is in_graph


def test_the_guard_counts_on_real_tensors_when_an_owed_refill_is_skipped(monkeypatch):
    """Lazy copies on real tensors (tests/offload/fakes.py): the device counter itself, not the analysis."""
    log: list = []
    off, step = _lazy_three_layer_step(log)

    step(False)
    off.sync_prev_onload()
    step(True)  # "capture": the boundary refill becomes owed
    for _ in range(3):  # "replays" (the fake re-runs the hooks under capture, as tests/offload/fake_ascend)
        off.sync_prev_onload()
        step(True)
    assert off.stale_reads == 0 and all(w == layer + 1 for _, layer, _, w, _ in log)
    monkeypatch.setattr(Crossing, "_issue_crossing", lambda self, s, j, fork: None)
    off.sync_prev_onload()
    log.clear()
    step(True)
    assert off.stale_reads == 1
    assert log[0][1] == 0 and log[0][3] == 3.0  # module 0 ran on module 2's weights, and it was counted


def test_the_gpu_checks_skip_refill_control_skips_one_owed_refill_after_the_first_replay():
    from offload_tools.gpu_check_torch import _skip_one_owed_refill

    log: list = []
    off, step = _lazy_three_layer_step(log)
    _skip_one_owed_refill(off)

    step(False)  # warm-up
    off.sync_prev_onload()  # 1: before capture
    step(True)  # capture
    off.sync_prev_onload()  # 2: before the first replay
    step(True)
    assert off.stale_reads == 0
    for _ in range(3):  # 3: the first refill owed by a replay is skipped
        off.sync_prev_onload()
        step(True)
    assert off.stale_reads == 1


@pytest.mark.parametrize(("layers", "g", "n", "step"), [(28, 14, 1, 1), (28, 28, 2, 1), (28, 7, 1, 2)])
def test_fifty_replays_with_the_host_running_ahead_read_every_slots_own_module(layers, g, n, step):
    """No host synchronisation anywhere: only the recorded stream/event dependencies order the work."""
    b, off, mods = build(layers, g, n, step)
    drive(b, off, mods, replays=50)
    rep = analyse(b, off)
    assert rep.reads >= 50 * 2 * len(off.wrapped)
    assert rep.races == [] and rep.wrong == [] and rep.stale_tags == 0


def _lazy_three_layer_step(log: list):
    """One slot over three probe layers on a lazy fake with external events; ``step(capturing)`` runs them once."""
    fake = FakeBackend("lazy", external=True)
    off = CurrentPrefetchOffloader(1, 1, 1, backend_factory=lambda d: fake)
    layers = off.wrap_modules(ProbeLayer(i, log) for i in range(3))
    off.post_init()

    def step(capturing):
        fake.is_capturing = lambda: capturing  # type: ignore[method-assign]
        x = torch.zeros(())
        for layer in layers:
            x = layer(x)
        fake.is_capturing = lambda: False  # type: ignore[method-assign]

    return off, step
