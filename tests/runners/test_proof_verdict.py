"""A failed proof is never "ok"; kernels and worker signals are named (fake bench at the process boundary)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.manifest import EnvironmentManifest
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun
from runners.errors import EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_INVALID, EXIT_OK, RunnerError
from tests.shared_runs import run_matrix
from runners.identity.numerics import parse_cpuinfo
from tests.runners.helpers import RUNNER, compose_cfg, fake_overrides, run_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _behave(**modes: str) -> str:
    return "+runtime.env.FAKE_BEHAVIOUR=\"" + ",".join(f"{k}={v}" for k, v in modes.items()) + "\""


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def _last_line(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


@pytest.mark.heavy(seconds=17)  # 8 s CPU
def test_invalid_run_exits_6_and_validate_and_report_exit_nonzero_naming_the_case(tmp_path: Path) -> None:
    """Tokens of one offload case differ (tampered round digest): runner 6, validate 1, report 1."""
    overrides = fake_overrides(tmp_path, ONE_POINT, _behave(current_g4_n1="digest"), run_id="bad")
    overrides[overrides.index("analyze=false")] = "analyze=true"
    proc = subprocess.run([*RUNNER, *overrides], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == EXIT_INVALID, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = _last_line(proc.stdout)
    assert last.startswith("validation: INVALID: failing checks: token_digest") and last.endswith("exit 6"), last
    assert "same_runtime/current_g4_n1-r0" in last
    # the case is never printed or counted as "ok": its progress line and the done line say why
    assert "done: 1 ok, 1 with tokens differing from the baseline," in proc.stdout, proc.stdout[-3000:]
    assert "TOKENS DIFFER from the same_runtime baseline" in proc.stdout
    assert "same_runtime/current_g4_n1-r0: TOKENS DIFFER" in proc.stdout
    run_dir = tmp_path / "default" / "bad"
    v = _cli("analysis", "validate", str(run_dir))
    assert v.returncode == 1
    assert _last_line(v.stdout).startswith("validation: INVALID: failing checks: token_digest")
    assert "same_runtime/current_g4_n1-r0" in _last_line(v.stdout)
    r = _cli("analysis", "report", str(run_dir), "--out", str(tmp_path / "rep"))
    assert r.returncode == 1 and "INVALID" in _last_line(r.stdout) and "current_g4_n1" in _last_line(r.stdout)
    r2 = _cli("analysis", "report", str(run_dir), "--out", str(tmp_path / "rep2"), "--allow-invalid")
    assert r2.returncode == 0 and "INVALID" in _last_line(r2.stdout) and "--allow-invalid" in _last_line(r2.stdout)


@pytest.mark.heavy(seconds=10)  # 4 s CPU
def test_valid_fake_run_ends_with_a_valid_verdict_and_records_plain_kernels(tmp_path: Path) -> None:
    overrides = fake_overrides(tmp_path, ONE_POINT, run_id="good")
    overrides[overrides.index("analyze=false")] = "analyze=true"
    proc = subprocess.run([*RUNNER, *overrides], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:]
    assert _last_line(proc.stdout).startswith("validation: VALID")
    assert "tokens identical to baseline" in proc.stdout and "done: 2 ok, 0 expected" in proc.stdout
    run_dir = tmp_path / "default" / "good"
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert {r.cpu_kernels.path for r in runs} == {"plain"}  # type: ignore[union-attr]
    manifest = read_json(run_dir / "environment-manifest.json", EnvironmentManifest)
    (num,) = manifest.numerics
    assert num.cpu_kernel_path == "plain" and num.device == "cpu" and num.thread_env.get("OMP_NUM_THREADS") == "2"
    assert num.torch_version and num.cpu_model


@pytest.mark.heavy
def test_offload_cases_without_a_baseline_are_analysed_and_the_run_is_valid(tmp_path: Path) -> None:
    """``baseline=false`` (``tests/offload/test_overlay_engine.py`` runs a fixed ring rule so and compares its digest
    with another run's baseline itself): no token check has a baseline to fail against, the analysis runs, the run
    ends valid (exit 0)."""
    overrides = fake_overrides(tmp_path, ONE_POINT, "phases.same_runtime.baseline=false", run_id="nobase")
    overrides[overrides.index("analyze=false")] = "analyze=true"
    assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_OK
    run_dir = tmp_path / "default" / "nobase"
    assert [r.record.label for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)] == ["current_g4_n1"]
    assert json.loads((run_dir / "summary" / "validation.json").read_text())["valid"] is True
    assert (run_dir / "summary" / "retention.png").is_file()  # drawn without a point: no baseline, no retention


@pytest.mark.heavy  # measured 2.5 s in the fast tier (its budget is 2 minutes)
def test_worker_killed_by_sigill_is_named_with_prompt_length_and_cpu_flags(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT, _behave(current_g4_n1="sigill"))
    assert code == EXIT_CASE_FAILURES
    (f,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert f.failure_type == "worker_signal" and f.signal == 4 and f.exit_code == 1
    assert "worker died: SIGILL (illegal instruction)" in f.error_message
    assert "prompt length 32 tokens" in f.error_message and "CPU flags:" in f.error_message


@pytest.mark.heavy  # measured 2.5 s in the fast tier (its budget is 2 minutes)
def test_case_whose_kernels_differ_from_the_path_is_a_kernel_mismatch(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT, _behave(current_g4_n1="packedkernel"))
    assert code == EXIT_CASE_FAILURES
    (f,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert f.failure_type == "kernel_mismatch" and "31 of 32" in f.error_message


@pytest.mark.parametrize("override, needle", [
    ("runtime.cpu_kernel_path=packed", "cpu_kernel_path='packed' with an offload case"),
    # an unknown path (fast) is refused when the config is composed (conf.choices.CpuKernelPath):
    # tests/conf/test_strict_config.py::test_bad_choice_is_refused_naming_the_value_and_the_allowed_ones
])
@pytest.mark.heavy  # measured 1.1 s in the fast tier (its budget is 2 minutes)
def test_bad_kernel_path_is_refused_before_any_process(tmp_path: Path, override: str, needle: str) -> None:
    overrides = fake_overrides(tmp_path, override)
    with pytest.raises(RunnerError) as exc:
        from runners.orchestration.stages import run_stages

        run_stages(compose_cfg(*overrides), overrides, console=None)
    assert exc.value.exit_code == EXIT_CONFIG and needle in str(exc.value)
    assert not (tmp_path / "default").exists()
    assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_CONFIG


def test_packed_path_runs_baseline_only_matrices(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "runtime.cpu_kernel_path=packed", "phases.same_runtime.points=[]")
    assert code == EXIT_OK
    (run,) = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert run.cpu_kernels is not None and run.cpu_kernels.path == "packed"


AMX = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu avx avx2 fma f16c avx512f avx512_bf16 amx_bf16 amx_tile amx_int8 sse4_2\n"
AVX512 = "model name\t: AMD EPYC 9654\nflags\t\t: fpu avx avx2 fma avx512f avx512_bf16 avx512_vnni\n"
AVX2 = "model name\t: Intel(R) Core(TM) i7-8700\nflags\t\t: fpu avx avx2 fma f16c sse4_2\n"


@pytest.mark.parametrize("text, model, flags", [
    (AMX, "Intel(R) Xeon(R) Platinum 8480+",
     ("amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "f16c", "fma")),
    (AVX512, "AMD EPYC 9654", ("avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma")),
    (AVX2, "Intel(R) Core(TM) i7-8700", ("avx", "avx2", "f16c", "fma")),
])
def test_cpuinfo_isa_flags(text: str, model: str, flags: tuple[str, ...]) -> None:
    assert parse_cpuinfo(text) == (model, flags)
