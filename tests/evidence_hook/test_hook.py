"""Evidence hook: inert unless asked, observes without changing behaviour, publishes once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

import runners.incase.evidence_hook.offload_evidence_hook as hook
from results_schema.records.models import RuntimeEvidence

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "runners" / "incase" / "evidence_hook"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(hook, "_state", hook._State())
    path = tmp_path / "evidence" / "case-r0.json"
    monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(path))
    monkeypatch.delenv("OFFLOAD_IMPL", raising=False)
    return path


def layers(n: int = 8, width: int = 16):
    return (torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.LayerNorm(width)) for _ in range(n))


def published(capsys, path: Path) -> RuntimeEvidence:
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("OFFLOAD_EVIDENCE ")]
    assert len(lines) == 1, lines
    text = path.read_text()
    assert lines[0] == f"OFFLOAD_EVIDENCE {text}"
    return RuntimeEvidence.model_validate_json(text)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH")}
    env.update(extra)
    env["PYTHONPATH"] = f"{HOOK_DIR}{os.pathsep}{REPO}"
    return env


def test_sitecustomize_is_inert_without_the_evidence_path():
    code = ("import sys; print(sys.modules['sitecustomize'].__file__, 'offload_evidence_hook' in sys.modules,"
            " 'vllm' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env({}), check=True)
    site, *flags = out.stdout.split()
    assert Path(site) == HOOK_DIR / "sitecustomize.py"
    assert flags == ["False", "False", "False"]


def test_sitecustomize_activates_lazily_without_importing_vllm(tmp_path):
    code = ("import sys, offload.import_hooks as h; print('offload_evidence_hook' in sys.modules,"
            " 'vllm.model_executor.offloader.base' in h._pending, 'vllm' in sys.modules)")
    env = _env({"OFFLOAD_EVIDENCE_PATH": str(tmp_path / "e.json")})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["True", "True", "False"]


def test_our_offloader_publishes_its_evidence_state_after_post_init(fresh, capsys, monkeypatch):
    from offload.prefetch import CurrentPrefetchOffloader

    monkeypatch.setenv("OFFLOAD_IMPL", "current")
    off = CurrentPrefetchOffloader(4, 1, 2)
    hook.observe(off)
    mods = off.wrap_modules(layers())
    assert len(mods) == 8 and not fresh.exists()
    off.post_init()
    ev = published(capsys, fresh)
    assert ev.implementation == "current" and ev.offloader_class == "offload.prefetch.CurrentPrefetchOffloader"
    assert ev.wrapped_layers == (3, 7) and ev.selected_layers == (3, 7) and ev.num_layers == 8
    assert ev.offloaded_bytes == 2 * (16 * 16 + 16 + 16 + 16) * 4
    assert ev.static_buffer_bytes == off.buffer_pool.total_bytes and ev.post_init_called
    assert ev.pid == os.getpid()
    off.post_init()
    assert hook.publish(off) is False  # once per process


def test_noop_offloader_publishes_explicit_empty_evidence_at_wrap_time(fresh, capsys, monkeypatch):
    from vllm.model_executor.offloader.base import NoopOffloader

    monkeypatch.setenv("OFFLOAD_IMPL", "baseline")
    off = NoopOffloader()
    hook.observe(off)
    assert len(off.wrap_modules(layers(5))) == 5
    ev = published(capsys, fresh)
    assert ev.offloader_class.endswith("NoopOffloader") and ev.implementation == "baseline"
    assert (ev.num_layers, ev.wrapped_count, ev.offloaded_bytes, ev.selected_layers) == (5, 0, 0, ())


@pytest.mark.heavy  # imports vLLM's offloaders (3 s CPU)
def test_upstream_prefetch_offloader_fails_on_cpu_with_its_assertion_and_publishes_nothing(fresh, capsys):
    import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's torch.cuda Event/Stream placeholders)
    from vllm.model_executor.offloader.prefetch import PrefetchOffloader
    from vllm.v1.worker.cpu_model_runner import _torch_cuda_wrapper

    with _torch_cuda_wrapper():  # as CPUModelRunner.__init__ builds it
        off = PrefetchOffloader(group_size=4, num_in_group=1, prefetch_step=1)
    hook.observe(off)
    with pytest.raises(AssertionError, match="Module parameters should not already be on CPU"):
        off.wrap_modules(layers())
    assert not fresh.exists()
    assert "OFFLOAD_EVIDENCE" not in capsys.readouterr().out


def _upstream_like(cls_name: str, base):
    """An upstream offloader whose wrap/post_init fill the internals real CUDA runs fill."""

    class Fake(base):
        def __init__(self):
            self.group_size, self.num_in_group, self.prefetch_step = 4, 2, 2
            self.offload_params = {"0"}
            self.module_offloaders = []
            self.buffer_pool = None
            self.total_offloaded_bytes = 0

        def wrap_modules(self, gen, prefix=""):
            mods = list(gen)
            for i, m in enumerate(mods):
                if i % 4 >= 2 and i != 6:  # layer 6: no matching param -> not wrapped (as upstream)
                    storage = {n: SimpleNamespace(_cpu_storage=p.data.clone()) for n, p in m.named_parameters()
                               if n.startswith("0.")}
                    self.module_offloaders.append(SimpleNamespace(module=m, device=torch.device("cuda", 0),
                                                                  _param_offloaders=storage))
            return mods

        def post_init(self):
            self.buffer_pool = SimpleNamespace(total_bytes=1000)

    Fake.__name__ = Fake.__qualname__ = cls_name
    return Fake()


def test_upstream_prefetch_adapter_reads_wrapped_layers_and_bytes_from_internals(fresh, capsys, monkeypatch):
    from vllm.model_executor.offloader.base import BaseOffloader

    monkeypatch.setenv("OFFLOAD_IMPL", "official")
    off = _upstream_like("PrefetchOffloader", BaseOffloader)
    hook.observe(off)
    off.wrap_modules(layers())
    off.post_init()
    ev = published(capsys, fresh)
    assert ev.implementation == "official"
    assert ev.selected_layers == (2, 3, 6, 7) and ev.wrapped_layers == (2, 3, 7)
    assert ev.offloaded_bytes == 3 * (16 * 16 + 16) * 4
    assert ev.static_buffer_bytes == 1000 and ev.released_bytes == ev.offloaded_bytes - 1000
    assert (ev.offload_group_size, ev.offload_num_in_group, ev.offload_prefetch_step) == (4, 2, 2)
    assert ev.device == "cuda" and ev.offload_params == ("0",)


def test_uva_adapter_reports_layers_with_uva_offloaded_parameters(fresh, capsys):
    from vllm.model_executor.offloader.uva import UVAOffloader

    class FakeUVA(UVAOffloader):
        def wrap_modules(self, gen, prefix=""):
            mods = list(gen)
            for m in mods[:2]:
                for p in m.parameters():
                    p._vllm_is_uva_offloaded = True
                    self.cpu_offload_bytes += p.numel() * p.element_size()
            return mods

    off = FakeUVA(cpu_offload_max_bytes=10**9)
    hook.observe(off)
    off.wrap_modules(layers(4))
    off.post_init()
    ev = published(capsys, fresh)
    assert ev.wrapped_layers == (0, 1) and ev.offloaded_bytes == 2 * (16 * 16 + 48) * 4
    assert ev.implementation == "official" and ev.static_buffer_bytes == 0


def test_set_offloader_patch_observes_every_installed_offloader(fresh):
    base = ModuleType("fake_base")
    base._instance = None
    base.get_offloader = lambda: base._instance
    base.set_offloader = lambda inst=None: setattr(base, "_instance", inst)
    hook._patch_base(base)
    off = SimpleNamespace(wrap_modules=lambda g, prefix="": list(g), post_init=lambda: None)
    base.set_offloader(off)
    assert getattr(off, hook._MARK) is True
    assert base.set_offloader.__wrapped__ is not None


def test_wrap_modules_passes_every_module_through_unchanged(fresh):
    from offload.prefetch import CurrentPrefetchOffloader

    off = CurrentPrefetchOffloader(2, 1, 1)
    hook.observe(off)
    mods = list(layers(4))
    assert off.wrap_modules(iter(mods)) == mods


def test_publication_failure_is_reported_not_raised(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(hook, "_state", hook._State())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(blocker / "sub" / "e.json"))
    from vllm.model_executor.offloader.base import NoopOffloader

    off = NoopOffloader()
    hook.observe(off)
    off.wrap_modules(layers(2))
    err = capsys.readouterr().err
    assert "OFFLOAD_EVIDENCE_ERROR" in err


# The hook inside a real vLLM engine (one OFFLOAD_EVIDENCE line equal to the sidecar, printed by the
# engine-core child; the upstream offloader's CPU assertion publishes nothing) is asserted on the real
# main job's cases: tests/e2e/test_main_job.py.


# ----------------------------------------------------------------- independent cross-check
def _lying(**overrides):
    """Our offloader whose ``evidence_state`` over-reports the given fields (no vLLM engine)."""
    from offload.prefetch import CurrentPrefetchOffloader

    class Lying(CurrentPrefetchOffloader):
        def evidence_state(self):
            d = super().evidence_state()
            for k, f in overrides.items():
                d[k] = f(d)
            return d

    return Lying(4, 1, 2)


def _refused(capsys, path: Path) -> str:
    out = capsys.readouterr()
    assert not path.exists()
    assert not [ln for ln in out.out.splitlines() if ln.startswith("OFFLOAD_EVIDENCE ")]
    errs = [ln for ln in out.err.splitlines() if ln.startswith("OFFLOAD_EVIDENCE_ERROR ")]
    assert len(errs) == 1, out.err
    return errs[0]


@pytest.mark.parametrize(
    ("overrides", "claim", "expected", "actual"),
    [
        ({"offloaded_bytes": lambda d: d["offloaded_bytes"] + 4}, "offloaded_bytes", "2432", "2436"),
        ({"offloaded_bytes": lambda d: 2 * d["offloaded_bytes"]}, "offloaded_bytes", "2432", "4864"),
        ({"wrapped_layers": lambda d: (1, 3, 7), "wrapped_count": lambda d: 3}, "wrapped_layers", "[3, 7]", "[1, 3, 7]"),
        ({"wrapped_layers": lambda d: (3, 7, 11), "wrapped_count": lambda d: 3}, "wrapped_layers", "[0, 8)", "[3, 7, 11]"),
        ({"wrapped_count": lambda d: 3}, "wrapped_count", "2", "3"),
        ({"selected_layers": lambda d: (1, 3, 5, 7)}, "selected_layers", "[3, 7]", "[1, 3, 5, 7]"),
        ({"num_layers": lambda d: 12}, "num_layers", "8", "12"),
    ],
)
def test_over_reporting_offloader_is_refused_and_nothing_is_published(fresh, capsys, overrides, claim, expected, actual):
    off = _lying(**overrides)
    hook.observe(off)
    off.wrap_modules(layers())
    off.post_init()  # must not raise into the caller
    err = _refused(capsys, fresh)
    assert err.startswith("OFFLOAD_EVIDENCE_ERROR evidence cross-check failed: ")
    assert f"{claim}: expected" in err and expected in err and actual in err, err
    assert hook.publish(off) is False  # no retry at exit either


def test_offloaded_bytes_are_checked_against_offload_params_and_prefix(fresh, capsys):
    from offload.prefetch import CurrentPrefetchOffloader

    off = CurrentPrefetchOffloader(4, 1, 1, offload_params=["0"])  # Linear only: (16*16+16)*4 per layer
    hook.observe(off)
    off.wrap_modules(layers(), prefix="")
    off.post_init()
    ev = published(capsys, fresh)
    assert ev.offloaded_bytes == 2 * (16 * 16 + 16) * 4


def test_cross_check_accepts_what_weight_processing_leaves_observable(fresh, capsys):
    """A parameter deleted after wrapping (e.g. a scale) is legitimately no longer offloaded."""
    from offload.prefetch import CurrentPrefetchOffloader

    off = CurrentPrefetchOffloader(4, 1, 1)
    hook.observe(off)
    mods = off.wrap_modules(layers())
    for i in (3, 7):
        del mods[i][1].bias  # LayerNorm bias gone before post_init
        mods[i][1].bias = None
    off.post_init()
    ev = published(capsys, fresh)
    assert ev.offloaded_bytes == 2 * (16 * 16 + 16 + 16) * 4


def test_upstream_adapter_over_reporting_bytes_is_refused(fresh, capsys):
    from vllm.model_executor.offloader.base import BaseOffloader

    off = _upstream_like("PrefetchOffloader", BaseOffloader)
    hook.observe(off)
    off.wrap_modules(layers())
    off.module_offloaders[0]._param_offloaders["0.extra"] = SimpleNamespace(_cpu_storage=torch.zeros(10))
    off.post_init()
    err = _refused(capsys, fresh)
    assert "offloaded_bytes: expected 3264" in err and "actual 3304" in err, err


def test_uva_adapter_over_reporting_bytes_is_refused(fresh, capsys):
    from vllm.model_executor.offloader.uva import UVAOffloader

    class FakeUVA(UVAOffloader):
        def wrap_modules(self, gen, prefix=""):
            mods = list(gen)
            for p in mods[0].parameters():
                p._vllm_is_uva_offloaded = True
            self.cpu_offload_bytes += 10**6  # claims far more than layer 0 holds
            return mods

    off = FakeUVA(cpu_offload_max_bytes=10**9)
    hook.observe(off)
    off.wrap_modules(layers(4))
    off.post_init()
    assert "offloaded_bytes: expected 1216" in _refused(capsys, fresh)


def test_pre_wrap_observation_sees_parameters_before_the_offloader_moves_them(fresh):
    from offload.prefetch import CurrentPrefetchOffloader

    off = CurrentPrefetchOffloader(2, 1, 1)
    hook.observe(off)
    off.wrap_modules(layers(4))
    obs = hook._state.observed[id(off)]
    assert len(obs) == 4 and [n for n, _ in obs[1]] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert sum(b for _, b in obs[1]) == (16 * 16 + 48) * 4
