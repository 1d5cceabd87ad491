"""Our offloader behind a fake ``CUDAGraphWrapper`` that calls the hooks in vLLM 0.32's order.

The fake follows ``vllm/compilation/cuda_graph.py`` (``CUDAGraphWrapper.__call__``): no forward
context or a runtime mode that is NONE / not the wrapper's -> run eagerly; first call per batch
descriptor -> ``sync_prev_onload()``, capture ``{runnable; join_after_forward()}`` (l. 309-325);
later calls -> ``sync_prev_onload()``, replay (l. 358-361). Devices are the happens-before fake
(tests/offload/graph_fakes.py), the offloader comes from the plugin's factory contract
(``offload.factory.create_offloader``) with the fake backend.

Claims: FULL graphs (one wrapper around the forward, two batch sizes) and PIECEWISE graphs (one
wrapper per piece, a piece per decoder layer, eager steps in between) read every slot's own
module with the plugin's wrapper patch; without the patch PIECEWISE re-issues owed refills
before every piece and races with in-step copies (the reason for the patch), FULL does not.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import pytest
import torch

from offload import plugin
from offload.prefetch import CurrentPrefetchOffloader
from tests.offload.graph_fakes import HbBackend, HbLayer, analyse


def _fake_cuda_graph_module(backend: HbBackend) -> ModuleType:
    from vllm.config import CUDAGraphMode
    from vllm.model_executor.offloader.base import get_offloader

    mod = ModuleType("fake_cuda_graph")
    mod.CONTEXT = None

    def is_forward_context_available():
        return mod.CONTEXT is not None

    def get_forward_context():
        return mod.CONTEXT

    class CUDAGraphWrapper:
        def __init__(self, runnable, runtime_mode):
            self.runnable = runnable
            self.runtime_mode = runtime_mode
            self.concrete_cudagraph_entries = {}

        def __call__(self, *args):
            if not is_forward_context_available():
                return self.runnable(*args)
            ctx = get_forward_context()
            mode = ctx.cudagraph_runtime_mode
            if mode == CUDAGraphMode.NONE or mode != self.runtime_mode:
                return self.runnable(*args)
            entry = self.concrete_cudagraph_entries.setdefault(ctx.batch_descriptor, SimpleNamespace(graph=None))
            if entry.graph is None:
                get_offloader().sync_prev_onload()

                def body():
                    out = self.runnable(*args)
                    get_offloader().join_after_forward()
                    return out

                entry.graph, entry.output = backend.capture(body)
                return entry.output
            get_offloader().sync_prev_onload()
            backend.replay(entry.graph)
            return entry.output

    mod.CUDAGraphWrapper = CUDAGraphWrapper
    mod.get_forward_context = get_forward_context
    mod.is_forward_context_available = is_forward_context_available
    return mod


def _offloader(backend: HbBackend, layers: int, g: int, n: int, step: int):
    from offload.factory import create_offloader

    cfg = SimpleNamespace(offload_backend="auto", prefetch=SimpleNamespace(
        offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=step, offload_params=set()))
    off = create_offloader(cfg, None, "current")
    assert type(off) is CurrentPrefetchOffloader
    off._backend_factory = lambda device: backend
    mods = off.wrap_modules(HbLayer(i, backend) for i in range(layers))
    off.post_init()
    return off, mods


def _run(monkeypatch, graph_mode: str, patched: bool, layers=6, g=2, n=1, step=1):
    from vllm.config import CUDAGraphMode
    from vllm.model_executor.offloader import base

    b = HbBackend()
    mod = _fake_cuda_graph_module(b)
    if patched:
        plugin.patch_cuda_graph_wrapper(mod)
        plugin.patch_cuda_graph_wrapper(mod)  # idempotent
    off, mods = _offloader(b, layers, g, n, step)
    monkeypatch.setattr(base, "_instance", off)
    mode = getattr(CUDAGraphMode, graph_mode)
    if graph_mode == "FULL":
        def run_layers(x):
            for m in mods:
                x = m(x)
            return x

        full = mod.CUDAGraphWrapper(run_layers, mode)

        def forward(x):
            return full(x)
    else:
        pieces = [mod.CUDAGraphWrapper(m, mode) for m in mods]

        def forward(x):
            for p in pieces:
                x = p(x)  # attention would run eagerly between pieces
            return x

    def step_(runtime_mode, bs):
        mod.CONTEXT = SimpleNamespace(cudagraph_runtime_mode=runtime_mode, batch_descriptor=bs)
        return forward(torch.zeros(()))

    step_(CUDAGraphMode.NONE, None)  # profile / warm-up
    for bs in ("bs=1", "bs=2"):
        step_(mode, bs)  # capture
    for r in range(6):
        step_(mode, "bs=1" if r % 2 else "bs=2")
        if r == 3:
            step_(CUDAGraphMode.NONE, None)  # an eager step between replays
    return analyse(b, off), off


@pytest.mark.parametrize("graph_mode", ["FULL", "PIECEWISE"])
@pytest.mark.parametrize(("layers", "g", "n", "step"), [(6, 2, 1, 1), (8, 4, 2, 1), (9, 3, 1, 2), (4, 4, 1, 1)])
def test_crossing_protocol_under_vllm_graph_wrappers_reads_every_slots_own_module(monkeypatch, graph_mode,
                                                                                 layers, g, n, step):
    rep, off = _run(monkeypatch, graph_mode, True, layers, g, n, step)
    assert off.evidence_state()["copy_protocol"] == "crossing"
    assert rep.reads > 0 and rep.races == [] and rep.wrong == [] and rep.stale_tags == 0
    assert off.fallback_loads == 0


def test_full_graphs_need_no_patch(monkeypatch):
    rep, _ = _run(monkeypatch, "FULL", False)
    assert rep.races == [] and rep.wrong == []


def test_piecewise_without_the_patch_races_which_is_why_the_plugin_names_the_graph(monkeypatch):
    rep, _ = _run(monkeypatch, "PIECEWISE", False)
    assert rep.races or rep.wrong


def test_graph_key_only_for_a_capture_or_replay_of_the_wrappers_own_mode():
    from vllm.config import CUDAGraphMode

    mod = _fake_cuda_graph_module(HbBackend())
    w = mod.CUDAGraphWrapper(lambda x: x, CUDAGraphMode.PIECEWISE)
    assert plugin._graph_key(mod, w) is None  # no forward context
    for mode, want in ((CUDAGraphMode.NONE, None), (CUDAGraphMode.FULL, None),
                       (CUDAGraphMode.PIECEWISE, (id(w), "bs=4"))):
        mod.CONTEXT = SimpleNamespace(cudagraph_runtime_mode=mode, batch_descriptor="bs=4")
        assert plugin._graph_key(mod, w) == want
