"""Implementation ``overlay``: loading the class from its source root, constructing it as upstream does,
installing it where vLLM creates its offloader, and the emulated published ring rule (no engine)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from offload import overlay
from offload.factory import create_offloader

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "overlay_src"
STALE = "overlay_emulation.prefetch:StaleRingOffloader"
CORRECT = "overlay_emulation.prefetch:CorrectRingOffloader"


@pytest.fixture
def overlay_root(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv(overlay.OVERLAY_ROOT_ENV, str(ROOT))
    return ROOT


def nested(backend="auto", g=8, n=3, step=2, params=()):
    return SimpleNamespace(offload_backend=backend,
                           prefetch=SimpleNamespace(offload_group_size=g, offload_num_in_group=n,
                                                    offload_prefetch_step=step, offload_params=set(params)),
                           uva=SimpleNamespace(cpu_offload_gb=0, cpu_offload_params=set()))


@pytest.mark.parametrize("pattern", ["x.y:Z", "vllm_ascend.model_executor.offloader.prefetch:AscendPrefetchOffloader"])
def test_class_pattern_accepts_module_colon_class(pattern):
    assert overlay.check_class_pattern(pattern) == pattern


@pytest.mark.parametrize("pattern", [None, "", "x.y.Z", "x.y:", ":Z", "x y:Z", "x.y:Z:W", "1x:Z"])
def test_class_pattern_refuses_anything_else_naming_the_value(pattern):
    with pytest.raises(ValueError, match=r"overlay_class .* must be 'module.path:ClassName'"):
        overlay.check_class_pattern(pattern)


def test_factory_creates_the_overlay_class_with_upstreams_keywords(overlay_root, monkeypatch):
    monkeypatch.setenv(overlay.OVERLAY_CLASS_ENV, STALE)
    off = create_offloader(nested(g=8, n=3, step=2, params={"mlp"}), lambda c: None, "overlay")
    assert type(off).__name__ == "StaleRingOffloader" and type(off).__module__ == "overlay_emulation.prefetch"
    assert (off.group_size, off.num_in_group, off.prefetch_step, off.offload_params, off.mode) == (8, 3, 2, {"mlp"}, "cpu")
    assert overlay.is_overlay(off)


def test_factory_keeps_the_runners_offloader_for_uva_as_for_current(overlay_root, monkeypatch):
    own = object()
    monkeypatch.setenv(overlay.OVERLAY_CLASS_ENV, STALE)
    assert create_offloader(nested("uva"), lambda c: own, "overlay") is own


def test_a_class_from_outside_the_source_root_is_refused(overlay_root):
    with pytest.raises(ValueError, match=r"was loaded from .*offload/prefetch.py.*not from the overlay source root"):
        overlay.load_overlay_class("offload.prefetch:CurrentPrefetchOffloader", str(ROOT))


def test_missing_module_or_class_or_pattern_is_a_clear_error(overlay_root, monkeypatch):
    with pytest.raises(ValueError, match="module 'overlay_emulation.nothing' cannot be imported"):
        overlay.load_overlay_class("overlay_emulation.nothing:X", str(ROOT))
    with pytest.raises(ValueError, match="has no class 'Nope'"):
        overlay.load_overlay_class("overlay_emulation.prefetch:Nope", str(ROOT))
    monkeypatch.delenv(overlay.OVERLAY_CLASS_ENV, raising=False)
    with pytest.raises(ValueError, match="OFFLOAD_IMPL=overlay needs OFFLOAD_OVERLAY_CLASS"):
        overlay.create_overlay(8, 3, 2, ())


class NeedsDevice:
    def __init__(self, group_size, num_in_group, prefetch_step, offload_params, device):
        pass


class NoParams:
    def __init__(self, group_size, num_in_group, prefetch_step=1):
        pass


class Kwargs:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


SETTINGS = {"group_size": 8, "num_in_group": 3, "prefetch_step": 2, "offload_params": set()}


def test_constructor_needing_an_argument_no_field_provides_fails_naming_class_and_argument():
    with pytest.raises(ValueError, match=r"overlay class .*NeedsDevice: constructor argument 'device' is required"):
        overlay.constructor_kwargs(NeedsDevice, SETTINGS)


def test_constructor_without_offload_params_is_fine_until_params_are_asked_for():
    assert overlay.constructor_kwargs(NoParams, SETTINGS) == {"group_size": 8, "num_in_group": 3, "prefetch_step": 2}
    with pytest.raises(ValueError, match=r"NoParams: its constructor takes no argument 'offload_params'"):
        overlay.constructor_kwargs(NoParams, {**SETTINGS, "offload_params": {"mlp"}})


def test_constructor_with_kwargs_gets_every_field():
    assert overlay.constructor_kwargs(Kwargs, SETTINGS) == SETTINGS


def _passes(pattern: str, g: int, n: int, step: int, passes: int = 3) -> list[list[int]]:
    """Per forward pass, the layers whose weight, when they run, is not their own (emulated ring, 8 Linear layers)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4, bias=False) for _ in range(8)]
    own = [m.weight.detach().clone() for m in layers]
    off = overlay.create_overlay(g, n, step, (), pattern=pattern, source_root=str(ROOT))
    mods = off.wrap_modules(iter(layers))
    off.post_init()
    x = torch.randn(1, 4)
    out = []
    for _ in range(passes):
        wrong = []
        for i, m in enumerate(mods):
            if not torch.equal(m.weight, own[i]):
                wrong.append(i)
            m(x)
        out.append(wrong)
    return out


def test_emulated_published_ring_runs_modules_on_stale_weights_when_m_is_not_a_multiple_of_step(overlay_root):
    # G=8, N=3 on 8 layers: M = 3 wrapped layers (5, 6, 7), step 2. First pass right, then 5 and 6 swap weights.
    assert _passes(STALE, 8, 3, 2) == [[], [5, 6], [5, 6]]
    assert _passes(CORRECT, 8, 3, 2) == [[], [], []]
    assert _passes(STALE, 2, 1, 2) == [[], [], []]  # M = 4, a multiple of step: the published rule is right


def test_load_model_wrapper_runs_post_init_of_the_overlay_once(overlay_root, monkeypatch):
    from vllm.model_executor.offloader import base

    from offload import plugin

    off = overlay.create_overlay(8, 3, 2, (), pattern=CORRECT, source_root=str(ROOT))
    off.wrap_modules(torch.nn.Linear(4, 4) for _ in range(8))
    monkeypatch.setattr(base, "_instance", off)
    calls = []
    original = off.post_init
    off.post_init = lambda: (calls.append(1), original())[1]
    plugin.ensure_post_init()
    plugin.ensure_post_init()
    assert calls == [1] and off.buffer_pool is not None


ASCEND_OVERLAY = """
import json, torch
from types import SimpleNamespace
import offload.plugin
offload.plugin.register()
import vllm_ascend
import vllm_ascend.worker.model_runner_v1 as mr
from vllm.config import OffloadConfig
from vllm.config.offload import PrefetchOffloadConfig
from vllm.model_executor.offloader.base import get_offloader
from tests.offload.fakes import ProbeLayer
cfg = OffloadConfig(prefetch=PrefetchOffloadConfig(offload_group_size=8, offload_num_in_group=3, offload_prefetch_step=2))
runner = mr.NPUModelRunner(SimpleNamespace(offload_config=cfg), "npu:0")
off = get_offloader()
log = []
runner.load_model(build_layer=lambda i: ProbeLayer(i, log))
x = torch.zeros(())
for _ in range(3):
    for layer in runner.layers:
        x = layer(x)
print("R " + json.dumps({"cls": type(off).__module__ + "." + type(off).__name__,
                         "post_init": getattr(off, "_offload_overlay_post_init_ran", None),
                         "wrapped": [mo.index for mo in off.module_offloaders],
                         "ran_with": [[e[1], e[3]] for e in log if e[0] == "forward" and e[1] >= 5]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("cls", "second_pass"), [("StaleRingOffloader", [[5, 7.0], [6, 6.0], [7, 8.0]]),
                                                   ("CorrectRingOffloader", [[5, 6.0], [6, 7.0], [7, 8.0]])])
def test_plugin_replaces_the_npu_offloader_with_the_overlay_and_runs_its_post_init(cls, second_pass):
    """Fake vLLM-Ascend v0.23 runner (tests/offload/fake_ascend): its NPUPrefetchOffloader is replaced by the
    overlay class, whose post_init the plugin runs after load_model; layer i's weight is i + 1."""
    import json
    import os
    import subprocess
    import sys

    repo = ROOT.parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env.update({"OFFLOAD_IMPL": "overlay", overlay.OVERLAY_CLASS_ENV: f"overlay_emulation.prefetch:{cls}",
                overlay.OVERLAY_ROOT_ENV: str(ROOT),
                "PYTHONPATH": os.pathsep.join([str(repo / "tests" / "offload" / "fake_ascend"), str(repo), str(ROOT)])})
    out = subprocess.run([sys.executable, "-c", ASCEND_OVERLAY], capture_output=True, text=True, env=env, cwd=repo,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("R "))[2:])
    assert r["cls"] == f"overlay_emulation.prefetch.{cls}" and r["post_init"] is True and r["wrapped"] == [5, 6, 7]
    assert r["ran_with"][:3] == [[5, 6.0], [6, 7.0], [7, 8.0]]  # first pass: every layer on its own weights
    assert r["ran_with"][3:6] == second_pass == r["ran_with"][6:9]
