"""Real-host rehearsal: the qwen7b / qwen7b_cuda experiments on a fake Ascend / CUDA host.

The commands are the ones docs/real-host.md gives a user (``runners.identity.model_manifest``,
``runners.pins``, ``runners.matrix +experiment=... +pins=...``), run as subprocesses.
Only the device boundary is faked (``tests/runners/fake_host.py``: device tools,
vendor environments with fake distributions, CANN files); cases are
``tests/runners/fake_bench.py`` started by each runtime's own interpreter, and the
matrix is trimmed (1 repeat, 2 same_runtime points) to keep the test fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from tests.runners.fake_host import ascend_host, cuda_host

REPO = Path(__file__).resolve().parents[2]
TRIM = ["phases.same_runtime.points=[{g:28,n:1},{g:14,n:1}]", "phases.same_runtime.repeats=1",
        "phases.same_runtime.cooldown_s=0", "phases.long_window.repeats=1", "phases.long_window.cooldown_s=0",
        "~phases.serving"]  # serving phases are rehearsed by tests/runners/test_serving.py


def _run(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _model(root: Path, env: dict[str, str]) -> Path:
    d = root / "Qwen2.5-7B-Instruct"
    r = _run(["-m", "runners.models.tiny_model", "--out", str(d), "--num-layers", "28"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    (d / "SHA256SUMS").unlink()  # as downloaded: no manifest yet
    r = _run(["-m", "runners.identity.model_manifest", str(d), "--revision", "a09a35458c702b33eeacc393d103063234e8bc28"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "model.sha256sums_sha256=" in r.stdout
    return d


def _logs(run_dir: Path, phase: str) -> list[str]:
    return [p.read_text() for p in sorted((run_dir / "logs" / phase).glob("*.log"))]


def _check_phase(run_dir: Path, phase: str, python: Path, stack: Mapping[str, str | None], n_cases: int) -> None:
    runs = (run_dir / f"{phase}-runs.jsonl").read_text().splitlines()
    assert len(runs) == n_cases, phase
    assert not (run_dir / f"{phase}-failures.jsonl").exists()
    logs = _logs(run_dir, phase)
    assert len(logs) == n_cases
    for log in logs:
        assert f"FAKE_BENCH_PYTHON {python}\n" in log, (phase, log[:2000])
        line = next(ln for ln in log.splitlines() if ln.startswith("FAKE_BENCH_STACK "))
        assert json.loads(line.split(" ", 1)[1]) == stack, phase
        plugins = next(ln for ln in log.splitlines() if ln.startswith("FAKE_BENCH_PLUGINS "))
        # the plugin entry point reaches the runtime through PYTHONPATH, not an install
        assert "offload_evidence=offload.plugin:register@offload-evidence-plugin" in plugins


@pytest.mark.slow
def test_qwen7b_rehearsal_on_a_fake_ascend_host(tmp_path: Path) -> None:
    host, p = ascend_host(tmp_path / "host")
    model = _model(tmp_path, host.env)
    # "~phases.accuracy": qwen7b's published accuracy phase is rehearsed by test_accuracy_phase.py
    setup = ["+experiment=qwen7b", f"model.path={model}", *TRIM, "~phases.accuracy", "phases.native.repeats=1",
             "phases.native.cooldown_s=0",
             f"runtime.python={p['latest']}", f"++runtime.path_map={{/usr/local/Ascend:{p['ascend']}}}",
             f"phases.native.runtime.python={p['v018']}",
             f"++phases.native.runtime.path_map={{/usr/local/Ascend:{p['ascend']},/opt/vllm-ascend-v0.18.0:{p['src']}}}"]
    # without pins: the gate refuses, listing every unprovided pin with what it observed
    r = _run(["-m", "tests.runners.matrix_entry", *setup, f"results_root={tmp_path / 'results'}", "run_id=nopins"], host.env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "[ascend_native_v018] pin source_commit '/opt/vllm-ascend-v0.18.0' is declared but has no value" in r.stdout
    assert "[ascend_latest] pin package 'torch-npu' is declared but has no value (???); observed '2.7.1'" in r.stdout
    assert "pin model_revision 'model' is declared but has no value (???); observed 'a09a3545" in r.stdout
    assert "pin offload_tree 'offload' is declared but has no value" in r.stdout

    pins = tmp_path / "pins.yaml"
    r = _run(["-m", "runners.pins", *setup, "--out", str(pins)], host.env)
    assert r.returncode == 0, r.stdout + r.stderr
    data = yaml.safe_load(pins.read_text())
    assert data["not_found"] == [] and data["mismatched"] == []
    ov = data["overrides"]
    assert "runtime.pins.packages.vllm-ascend='0.23.1'" in ov
    assert "phases.native.runtime.pins.packages.vllm-ascend='0.18.0'" in ov
    assert "phases.native.runtime.pins.packages.torch-npu='2.5.1'" in ov
    assert any(o.startswith("runtime.pins.files={/usr/local/Ascend/driver/version.info:'") for o in ov)
    assert any(o.startswith("phases.native.runtime.pins.source_commits={/opt/vllm-ascend-v0.18.0:'") for o in ov)
    assert any(o.startswith("model.sha256sums_sha256='") for o in ov)
    assert "model.revision='a09a35458c702b33eeacc393d103063234e8bc28'" in ov
    assert any(o.startswith("offload_tree_sha256='") for o in ov)

    # dry run, then the run
    r = _run(["-m", "tests.runners.matrix_entry", *setup, f"+pins={pins}", "dry_run=true"], host.env)
    assert r.returncode == 0 and "total=14" in r.stdout, r.stdout + r.stderr
    run = ["-m", "tests.runners.matrix_entry", *setup, f"+pins={pins}", f"results_root={tmp_path / 'results'}", "run_id=r",
           "bench_module=tests.runners.fake_bench", "progress=false", "analyze=false"]
    r = _run(run, host.env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    run_dir = tmp_path / "results" / "qwen7b" / "r"
    latest = {"vllm": "0.11.0", "vllm-ascend": "0.23.1", "torch-npu": "2.7.1"}
    _check_phase(run_dir, "same_runtime", p["latest"], latest, 5)
    _check_phase(run_dir, "long_window", p["latest"], latest, 5)
    _check_phase(run_dir, "native", p["v018"], {"vllm": "0.9.1", "vllm-ascend": "0.18.0", "torch-npu": "2.5.1"}, 4)
    # published health gate: the case NPU and chip, before every phase and after the last
    health = sorted((run_dir / "health").glob("*.txt"))
    assert [h.name.split("-")[0] for h in health].count("after") == 1 and len(health) == 4
    assert all(h.read_text().startswith("$ npu-smi info -t health -i 0 -c 0\n# exit 0\n") for h in health)
    manifest = json.loads((run_dir / "environment-manifest.json").read_text())
    pins_ok = [(c["runtime"], c["kind"], c["name"]) for c in manifest["pins"] if c["ok"]]
    assert all(c["ok"] for c in manifest["pins"])
    assert ("ascend_native_v018", "source_commit", "/opt/vllm-ascend-v0.18.0") in pins_ok
    assert ("ascend_latest", "package_tree", "vllm-ascend") in pins_ok
    assert len([c for c in manifest["pins"] if c["kind"] == "model_sha256sums"]) == 1
    # report packages are read inside each runtime, not in the runner's environment
    assert manifest["packages"]["ascend_latest/vllm-ascend"] == "0.23.1"
    assert manifest["packages"]["ascend_native_v018/vllm-ascend"] == "0.18.0"

    # the wrong interpreter for the native phase is caught before any case, naming the pin
    r = _run(["-m", "tests.runners.matrix_entry", *setup, f"+pins={pins}", f"phases.native.runtime.python={p['latest']}",
              f"results_root={tmp_path / 'results'}", "run_id=wrong"], host.env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "[ascend_native_v018] pin package 'vllm-ascend': expected '0.18.0', observed '0.23.1'" in r.stdout
    assert not (tmp_path / "results" / "qwen7b" / "wrong").exists()


@pytest.mark.slow
def test_qwen7b_cuda_rehearsal_on_a_fake_gpu_host(tmp_path: Path) -> None:
    host, p = cuda_host(tmp_path / "host")
    model = _model(tmp_path, host.env)
    setup = ["+experiment=qwen7b_cuda", f"model.path={model}", *TRIM, f"runtime.python={p['cuda']}"]
    pins = tmp_path / "pins.yaml"
    r = _run(["-m", "runners.pins", *setup, "--out", str(pins)], host.env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runtime.pins.packages.vllm='0.11.0'" in yaml.safe_load(pins.read_text())["overrides"]
    r = _run(["-m", "tests.runners.matrix_entry", *setup, f"+pins={pins}", f"results_root={tmp_path / 'results'}", "run_id=r",
              "bench_module=tests.runners.fake_bench", "progress=false", "analyze=false"], host.env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    run_dir = tmp_path / "results" / "qwen7b_cuda" / "r"
    stack = {"vllm": "0.11.0", "vllm-ascend": None, "torch-npu": None}
    _check_phase(run_dir, "same_runtime", p["cuda"], stack, 5)
    _check_phase(run_dir, "long_window", p["cuda"], stack, 5)
    assert (run_dir / "health").is_dir()
