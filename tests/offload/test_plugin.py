"""The vllm.general_plugins plugin: inert unless asked; installs our factory where runners look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

from offload import plugin
from offload.prefetch import CurrentPrefetchOffloader

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _run(code: str, env_extra: dict[str, str], pythonpath: list[Path] = ()) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in pythonpath), str(REPO)])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_entry_point_is_registered_in_the_vllm_general_plugins_group():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.value == "offload.plugin:register"]
    assert eps, "pyproject must declare [project.entry-points.'vllm.general_plugins']"


@pytest.mark.parametrize("impl", [None, "", "baseline", "official", "bogus"])
def test_register_is_inert_unless_offload_impl_is_current_or_sync(impl):
    code = (
        "import sys, offload.plugin, offload.import_hooks as h; offload.plugin.register();"
        "print(len(h._pending), h._finder in sys.meta_path, 'vllm' in sys.modules, 'torch' in sys.modules)"
    )
    out = _run(code, {} if impl is None else {"OFFLOAD_IMPL": impl})
    assert out.split() == ["0", "False", "False", "False"]


@pytest.mark.slow
def test_register_patches_the_runner_factories_and_load_model_when_vllm_imports_them():
    code = (
        "import offload.plugin; offload.plugin.register();"
        "import vllm.v1.worker.gpu_model_runner as g, vllm.v1.worker.cpu_model_runner as c;"
        "import vllm.v1.worker.gpu.model_runner as g2;"
        "print(g.create_offloader._offload_impl, g2.create_offloader._offload_impl,"
        " c.CPUModelRunner.load_model._offload_plugin_patched,"
        " g.GPUModelRunner.load_model._offload_plugin_patched,"
        " g2.GPUModelRunner.load_model._offload_plugin_patched)"
    )
    assert _run(code, {"OFFLOAD_IMPL": "sync"}).split()[-5:] == ["sync", "sync", "True", "True", "True"]


@pytest.mark.slow
def test_plugin_replaces_the_npu_prefetch_offloader_of_the_ascend_runner_and_runs_post_init():
    out = _run("import runpy; runpy.run_path('tests/offload/ascend_check.py', run_name='__main__')",
               {"OFFLOAD_IMPL": "current"}, [HERE / "fake_ascend"])
    line = next(ln for ln in out.splitlines() if ln.startswith("ASCEND_CHECK "))
    r = json.loads(line.split(" ", 1)[1])
    assert r["class_after_init"] == "CurrentPrefetchOffloader"
    assert r["post_init_called"] and r["load_model_patched"]
    assert r["backend"] == "npu" and r["backend_ns_is_fake_npu"]
    assert r["wrapped_layers"] == [3, 7]
    assert r["output"] == r["expected"]
    assert {"stream.new", "stream.wait_event", "event.record", "stream.enter"} <= set(r["npu_calls"])
    assert r["class_when_disabled"] == "NoopOffloader"


def _fake_runner_module(create):
    mod = ModuleType("fake_runner_mod")
    mod.create_offloader = create

    class Runner:
        def load_model(self):
            return "loaded"

    mod.Runner = Runner
    return mod


def test_patch_factory_module_is_idempotent_and_keeps_the_runner_factory_for_uva():
    own = object()
    mod = _fake_runner_module(lambda cfg: own)
    plugin.patch_factory_module(mod, "current")
    first = mod.create_offloader
    plugin.patch_factory_module(mod, "current")
    assert mod.create_offloader is first
    uva = SimpleNamespace(offload_backend="uva", prefetch=SimpleNamespace(offload_group_size=0, offload_num_in_group=1,
                                                                           offload_prefetch_step=1, offload_params=set()))
    assert mod.create_offloader(uva) is own


def test_load_model_wrapper_runs_post_init_of_our_offloader_when_nobody_did(monkeypatch):
    from vllm.model_executor.offloader import base

    off = CurrentPrefetchOffloader(2, 1, 1)
    off.wrap_modules(torch.nn.Linear(4, 4) for _ in range(4))
    monkeypatch.setattr(base, "_instance", off)
    mod = _fake_runner_module(None)
    plugin.patch_load_model(mod, "Runner")
    plugin.patch_load_model(mod, "Runner")
    assert mod.Runner().load_model() == "loaded"
    assert off.post_init_called and len(off.wrapped) == 2


def test_cpu_wrapped_linear_layers_keep_plain_weights():
    """vLLM's CPU Linear packing is skipped for layers whose weights we offload."""

    class Linear(torch.nn.Linear):
        quant_method = object()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Linear(4, 4)
            self.mlp = Linear(4, 4)

    off = CurrentPrefetchOffloader(2, 1, 1, {"mlp"})
    layers = off.wrap_modules(Layer() for _ in range(2))
    assert not hasattr(layers[0].mlp, "_cpu_skip_gemm_dispatch")
    assert layers[1].mlp._cpu_skip_gemm_dispatch is True
    assert not hasattr(layers[1].attn, "_cpu_skip_gemm_dispatch")


def test_newer_ascend_runner_module_factory_is_replaced_and_not_doubled(monkeypatch):
    """Newer vLLM-Ascend: ``model_runner_v1`` imports ``create_offloader`` at module level."""
    from vllm.model_executor.offloader import base

    from offload.factory import read_offload_config

    monkeypatch.setattr(base, "_instance", base.NoopOffloader())
    monkeypatch.setenv("OFFLOAD_IMPL", "current")
    made = []
    mod = ModuleType("fake_vllm_ascend_model_runner_v1")

    def ascend_create_offloader(cfg):  # vllm_ascend.model_executor.offloader.base.create_offloader
        made.append("ascend")
        return base.NoopOffloader()

    mod.create_offloader = ascend_create_offloader

    class NPUModelRunner:
        def __init__(self, vllm_config, device):
            base.set_offloader(mod.create_offloader(vllm_config.offload_config))

    mod.NPUModelRunner = NPUModelRunner
    plugin.patch_ascend_runner(mod, "current")
    cfg = SimpleNamespace(offload_backend="prefetch", prefetch=SimpleNamespace(
        offload_group_size=4, offload_num_in_group=1, offload_prefetch_step=1, offload_params=set()))
    assert read_offload_config(cfg).enabled
    mod.NPUModelRunner(SimpleNamespace(offload_config=cfg), "npu:0")
    assert isinstance(base.get_offloader(), CurrentPrefetchOffloader) and made == []
    uva = SimpleNamespace(offload_backend="uva", prefetch=cfg.prefetch)
    mod.NPUModelRunner(SimpleNamespace(offload_config=uva), "npu:0")
    assert made == ["ascend"] and type(base.get_offloader()).__name__ == "NoopOffloader"
