"""Accelerator-path defects, each caught at the mocked device boundary.

* ACL graph replay (item 5): vLLM-Ascend 0.23's ``ACLGraphWrapper`` syncs the offloader
  before capture only; after an eager pass, a replay reads module 0's slot while its refill
  is still queued (lazy fake copies). The plugin's patch syncs before replay.
* Ascend switch (item 6): the patched ``NPUModelRunner.__init__`` honours ``OFFLOAD_IMPL``
  at construction (official keeps vLLM-Ascend's offloader).
* Official ring (item 7): vLLM-Ascend 0.23 refills ``(i + step) % M``; with M=3, step=2 a
  slot is refilled before its owner ran, the owner reads another module's weights, and the
  same-runtime summary reports ``official_tokens_differ`` instead of averaging the point in.
* Arena views (item 9): every parameter view starts at a 512-byte aligned arena offset
  (the caching allocators' block alignment) with its own dtype, shape and stride.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

from offload import plugin, ring
from offload_tools import gpu_compare
from offload.factory import make_factory
from offload.arena import ALIGN_BYTES, ParamKey, StaticBufferPool
from offload.prefetch import CurrentPrefetchOffloader, SyncOffloader
from tests.offload.fakes import FakeBackend, ProbeLayer

HERE = Path(__file__).resolve().parent
ACL_GRAPH_SRC = HERE / "fake_ascend" / "vllm_ascend" / "compilation" / "acl_graph.py"


# ----------------------------------------------------------------------------- item 5
def _fake_acl_graph_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fake_acl_graph_{id(object())}", ACL_GRAPH_SRC)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def _graph_scenario(monkeypatch, patched: bool, cls=CurrentPrefetchOffloader):
    from vllm.config import CUDAGraphMode
    from vllm.model_executor.offloader import base

    g = _fake_acl_graph_module()
    if patched:
        plugin.patch_acl_graph_wrapper(g)
        plugin.patch_acl_graph_wrapper(g)  # idempotent
    fake = FakeBackend("lazy")
    g.BACKEND = fake
    log: list = []
    off = cls(1, 1, 1, backend_factory=lambda device: fake)
    layers = off.wrap_modules(ProbeLayer(i, log) for i in range(3))
    off.post_init()
    monkeypatch.setattr(base, "_instance", off)

    def forward(x):
        for layer in layers:
            x = layer(x)
        return x

    wrapper = g.ACLGraphWrapper(forward, CUDAGraphMode.FULL)
    x = torch.zeros(())

    def step(mode):
        g.FORWARD_CONTEXT = SimpleNamespace(batch_descriptor="bs=1", cudagraph_runtime_mode=mode)
        return wrapper(x)

    step(CUDAGraphMode.NONE)  # warm-up (eager)
    step(CUDAGraphMode.FULL)  # capture
    step(CUDAGraphMode.NONE)  # eager pass (e.g. a prefill): module 0's refill left queued
    log.clear()
    step(CUDAGraphMode.FULL)  # replay
    assert len(g.REPLAYS) == 1
    return [(layer, w) for _, layer, _, w, _ in log if w != layer + 1]


@pytest.mark.heavy  # measured 1.0 s in the fast tier (its budget is 2 minutes)
def test_acl_graph_replay_after_an_eager_pass_reads_a_stale_slot_without_the_plugin_patch(monkeypatch):
    """The fake boundary really exhibits the defect of vLLM-Ascend 0.23's wrapper."""
    stale = _graph_scenario(monkeypatch, patched=False)
    assert stale == [(0, 3.0)]  # layer 0 ran on module 2's weights


@pytest.mark.heavy  # measured 3.2 s in the fast tier (its budget is 2 minutes)
def test_acl_graph_replay_syncs_before_replay_with_the_plugin_patch(monkeypatch):
    assert _graph_scenario(monkeypatch, patched=True) == []


def test_acl_graph_patch_leaves_other_offloaders_alone(monkeypatch):
    from vllm.config import CUDAGraphMode
    from vllm.model_executor.offloader import base

    g = _fake_acl_graph_module()
    plugin.patch_acl_graph_wrapper(g)
    calls = []

    class Other(base.NoopOffloader):
        def sync_prev_onload(self):
            calls.append("sync")

    monkeypatch.setattr(base, "_instance", Other())
    g.BACKEND = FakeBackend("lazy")
    wrapper = g.ACLGraphWrapper(lambda x: x, CUDAGraphMode.FULL)
    g.FORWARD_CONTEXT = SimpleNamespace(batch_descriptor="b", cudagraph_runtime_mode=CUDAGraphMode.FULL)
    wrapper(torch.zeros(()))  # capture: vLLM-Ascend's own sync
    wrapper(torch.zeros(()))  # replay: no extra sync for an offloader that is not ours
    assert calls == ["sync"]


# ----------------------------------------------------------------------------- item 6
def _ascend_v023_runner_module(base):
    """vLLM-Ascend 0.23 ``NPUModelRunner.__init__``: parent factory, then NPUPrefetchOffloader."""
    mod = ModuleType("fake_model_runner_v1_v023")

    class NPUPrefetchOffloader(base.NoopOffloader):
        def __init__(self, group_size, num_in_group, prefetch_step, offload_params=None, mode="cpu"):
            self.group_size = group_size

    gpu_namespace_factory = make_factory(lambda cfg: base.NoopOffloader(), "current")

    class NPUModelRunner:
        def __init__(self, vllm_config, device):
            base.set_offloader(gpu_namespace_factory(vllm_config.offload_config))
            pre = vllm_config.offload_config.prefetch
            if pre.offload_group_size > 0:
                base.set_offloader(NPUPrefetchOffloader(pre.offload_group_size, pre.offload_num_in_group,
                                                        pre.offload_prefetch_step, pre.offload_params))

    mod.NPUModelRunner = NPUModelRunner
    mod.NPUPrefetchOffloader = NPUPrefetchOffloader
    return mod


@pytest.mark.parametrize("impl", ["official", "current", "sync", "baseline"])
def test_ascend_runner_installs_the_implementation_asked_for_when_it_is_built(monkeypatch, impl):
    from vllm.model_executor.offloader import base

    monkeypatch.setattr(base, "_instance", base.NoopOffloader())
    mod = _ascend_v023_runner_module(base)
    plugin.patch_ascend_runner(mod, "current")  # the plugin registered with current
    cfg = SimpleNamespace(offload_backend="auto", prefetch=SimpleNamespace(
        offload_group_size=4, offload_num_in_group=1, offload_prefetch_step=1, offload_params=set()))
    monkeypatch.setenv("OFFLOAD_IMPL", impl)
    mod.NPUModelRunner(SimpleNamespace(offload_config=cfg), "npu:0")
    want = {"official": mod.NPUPrefetchOffloader, "baseline": mod.NPUPrefetchOffloader,
            "current": CurrentPrefetchOffloader, "sync": SyncOffloader}[impl]
    assert type(base.get_offloader()) is want


# ----------------------------------------------------------------------------- item 7
@pytest.mark.parametrize("m", range(1, 10))
@pytest.mark.parametrize("step", range(1, 5))
def test_official_ascend_ring_is_safe_when_module_count_is_a_multiple_of_step(m, step):
    v = ring.official_ascend_violations(m, step)
    if m % step == 0:
        assert v == []
    for after, refilled, evicted in v:
        assert refilled % step == evicted % step and evicted != refilled


def test_official_ascend_ring_with_three_modules_and_step_two_evicts_an_unrun_module():
    assert ring.official_ascend_violations(3, 2) == [(1, 0, 2)]


class _OfficialAscendRing(CurrentPrefetchOffloader):
    """Our protocol with vLLM-Ascend 0.23's ring and without our ownership check (as official)."""

    def post_init(self):
        saved = ring.next_refill
        ring.next_refill = ring.official_ascend_next_refill
        try:
            super().post_init()
        finally:
            ring.next_refill = saved

    def _wait_for_layer(self, layer_idx):
        self._slot_owner[self.wrapped[layer_idx].slot] = layer_idx  # official never checks
        super()._wait_for_layer(layer_idx)


def _digest(cls, passes=3):
    log: list = []
    fake = FakeBackend("eager")  # copies run as early as a device could run them
    kwargs = {} if cls is None else {"backend_factory": lambda device: fake}
    layers = [ProbeLayer(i, log) for i in range(3)]
    if cls is not None:
        off = cls(1, 1, 2, **kwargs)
        layers = off.wrap_modules(iter(layers))
        off.post_init()
    h = hashlib.sha256()
    for _ in range(passes):
        x = torch.zeros(())
        for layer in layers:
            x = layer(x)
        h.update(repr(float(x)).encode())
    return h.hexdigest(), log


def test_same_runtime_summary_reports_official_tokens_differing_instead_of_averaging_them_in():
    base, _ = _digest(None)
    cur, _ = _digest(CurrentPrefetchOffloader)
    off, log = _digest(_OfficialAscendRing)
    assert cur == base
    assert off != base
    assert any(layer == 2 and w == 1.0 for _, layer, _, w, _ in log)  # module 2 read module 0's weights
    recs = [{"implementation": "baseline", "token_digest": base, "group_size": 0, "num_in_group": 0}]
    for r in range(3):  # official looks faster: it must not win the point
        recs.append({"implementation": "current", "group_size": 1, "num_in_group": 1,
                     "throughput_tok_s": 100.0 + r, "token_digest": cur})
        recs.append({"implementation": "official", "group_size": 1, "num_in_group": 1,
                     "throughput_tok_s": 150.0 + r, "token_digest": off})
    (row,) = gpu_compare.summarize(recs)
    assert row["verdict"] == "official_tokens_differ" and row["ok"] is False
    assert row["tokens"] == {"current": "identical", "official": "differs"}


# ----------------------------------------------------------------------------- item 9
ALLOCATOR_ALIGN = 512  # kMinBlockSize of torch's CUDA and torch-npu's NPU caching allocators


def test_alignment_constant_is_the_caching_allocators_block_size():
    assert ALIGN_BYTES == ALLOCATOR_ALIGN


def test_every_arena_view_is_512_byte_aligned_with_its_own_dtype_shape_and_stride():
    keys = [
        ParamKey("bias3", (3,), (1,), torch.float32),  # 12 bytes: the next key would sit at 256 before
        ParamKey("w", (5, 7), (7, 1), torch.bfloat16),
        ParamKey("wt", (7, 5), (1, 7), torch.float16),  # transposed stride
        ParamKey("q", (33, 3), (3, 1), torch.int8),
        ParamKey("scale", (1,), (1,), torch.float32),
        ParamKey("e", (0, 4), (4, 1), torch.bfloat16),
    ]
    pool = StaticBufferPool(keys, 2, torch.device("cpu"))
    assert pool.arena_bytes % ALLOCATOR_ALIGN == 0
    for slot in range(2):
        arena = pool.arenas[slot]
        for key in keys:
            v = pool.view(slot, key)
            assert (v.dtype, tuple(v.shape), tuple(v.stride())) == (key.dtype, key.shape, key.stride)
            if key.span_bytes:
                off = v.data_ptr() - arena.data_ptr()
                assert off == pool.offsets[key] and off % ALLOCATOR_ALIGN == 0, (key.name, off)


def test_offloaded_layer_parameters_are_aligned_views_of_their_slot_arena():
    from offload_tools.gpu_check_torch import DecoderLayer, Shapes

    s = Shapes.qwen25_7b(4, 32)
    layers = [DecoderLayer(s).to(torch.bfloat16) for _ in range(4)]
    for layer in layers:
        for p in layer.parameters():
            p.data.normal_()
    layers[1].mlp.down_proj.weight.data = layers[1].mlp.down_proj.weight.data.float()  # a second dtype
    want = {(i, n): (p.dtype, tuple(p.shape), p.detach().clone()) for i, l in enumerate(layers)
            for n, p in l.named_parameters()}
    off = CurrentPrefetchOffloader(2, 1, 2, backend_factory=lambda d: FakeBackend("eager"))
    off.wrap_modules(iter(layers))
    off.post_init()
    seen = 0
    for w in off.wrapped:
        arena = off.buffer_pool.arenas[w.slot]
        for name, p in w.module.named_parameters():
            dtype, shape, value = want[(w.layer, name)]
            assert p.dtype == dtype and tuple(p.shape) == shape
            o = p.data_ptr() - arena.data_ptr()
            assert 0 <= o < arena.numel() and o % ALLOCATOR_ALIGN == 0, (w.layer, name, o)
            assert torch.equal(p, value)
            seen += 1
    assert seen == 2 * len(list(layers[0].parameters()))
