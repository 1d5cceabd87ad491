"""Small experiments end to end through the runner with the fake bench, and CLI error paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conf.schema import ConfigError
from results_schema.codec.io import read_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun
from runners.errors import EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_IDENTITY
from tests.runners.helpers import RUNNER, run_fake

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy  # measured 1.9 s in the fast tier (its budget is 2 minutes)
def test_smoke_invalid_case_ends_in_the_expected_clear_error(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "+experiment=smoke")
    assert code == 0
    runs = read_jsonl(run_dir / "smoke-runs.jsonl", CaseRun)
    assert sorted(r.record.label for r in runs) == ["baseline", "current_g4_n1", "sync_g4_n1"]
    failure, engine = read_jsonl(run_dir / "smoke-failures.jsonl", CaseFailure)
    assert (failure.label, failure.error_type, failure.exit_code) == ("invalid_g2_n3", "ValueError", 2)
    assert "offload_num_in_group (3) must be <= offload_group_size (2)" in failure.error_message
    # the same setting on the engine path (fake bench: vLLM 0.32.0's recorded rejection)
    assert (engine.label, engine.implementation, engine.failure_type) == ("engine_invalid_g2_n3", "official",
                                                                          "engine_rejected")
    assert "component vllm" in engine.error_message and "OffloadConfig" in engine.error_message


@pytest.mark.heavy  # 2.5 s CPU
def test_stability_requires_output_in_every_round(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "+experiment=stability", '+runtime.env.FAKE_BEHAVIOUR="current_g4_n1=empty"')
    assert code == EXIT_CASE_FAILURES
    (run,) = read_jsonl(run_dir / "stability-runs.jsonl", CaseRun)
    assert run.record.label == "baseline" and len(run.record.rounds) == 100
    assert run.record.workload.num_prompts == 1
    (failure,) = read_jsonl(run_dir / "stability-failures.jsonl", CaseFailure)
    assert failure.failure_type == "invalid_record" and "rounds [1] produced no output token" in failure.error_message


@pytest.mark.heavy  # measured 1.5 s in the fast tier (its budget is 2 minutes)
def test_ttft_cases_request_one_token(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "+experiment=ttft")
    assert code == 0
    runs = read_jsonl(run_dir / "ttft-runs.jsonl", CaseRun)
    assert len(runs) == 4 and {r.record.workload.max_tokens for r in runs} == {1}


def _cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RUNNER, f"results_root={tmp_path}", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.heavy  # measured 1.3 s in the fast tier (its budget is 2 minutes)
def test_qwen7b_on_this_machine_stops_naming_the_missing_full_datasets(tmp_path: Path) -> None:
    """The published accuracy phase needs the full splits: checked (exit 2) before the identity gate."""
    r = _cli("+experiment=qwen7b", tmp_path=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_CONFIG, out
    assert "accuracy_manifest='eval_datasets/full/manifest.json'" in out and "does not exist" in out
    assert "Traceback" not in out and not any(tmp_path.iterdir())


@pytest.mark.heavy  # measured 5.0 s in the fast tier (its budget is 2 minutes)
def test_qwen7b_on_this_machine_stops_naming_the_first_missing_tool(tmp_path: Path) -> None:
    r = _cli("+experiment=qwen7b", "phases.accuracy.accuracy_manifest=eval_datasets/fixtures/manifest.json",
             tmp_path=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_IDENTITY, out
    assert "identity gate" in out and "required tool 'npu-smi' is not on PATH" in out
    assert "Traceback" not in out
    assert not any(tmp_path.iterdir())


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_invalid_offload_in_config_stops_before_any_process(tmp_path: Path) -> None:
    r = _cli("phases.same_runtime.points=[{g: 2, n: 3}]", tmp_path=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_CONFIG, out
    assert "offload_num_in_group (3) must be <= offload_group_size (2)" in out and "Traceback" not in out
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("override, message", [
    ("workload.num_prompts=-1", "workload.num_prompts=-1: must be a whole number >= 1"),
    ("workload.max_tokens=-5", "workload.max_tokens=-5: must be a whole number >= 1"),
    ("workload.measured_rounds=-1", "workload.measured_rounds=-1: must be a whole number >= 1"),
    ("workload.gpu_memory_utilization=-0.5",
     "workload.gpu_memory_utilization=-0.5: must be a number in (0, 1]"),
    ("workload.input_len=0", "workload.input_len=0: must be a whole number >= 1"),
])
@pytest.mark.heavy  # measured 0.7 s over 5 cases in the fast tier (its budget is 2 minutes)
def test_invalid_workload_stops_before_any_run_dir_or_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str], override: str,
                                                             message: str) -> None:
    import runners.incase.process_group

    def no_launch(*a: object, **k: object) -> None:
        raise AssertionError("a case process was started")

    monkeypatch.setattr(runners.incase.process_group.CaseProcess, "__enter__", no_launch)
    # the range check runs where the config is typed (conf.typed.typed_config), before the runner sees it; the
    # command line turns this ConfigError into one line and exit 2 (the next test)
    with pytest.raises(ConfigError) as exc:
        run_fake(tmp_path, override)
    assert str(exc.value) == message
    assert not any(tmp_path.iterdir())


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_invalid_workload_on_the_cli_exits_2_naming_the_field(tmp_path: Path) -> None:
    r = _cli("workload.num_prompts=-1", tmp_path=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_CONFIG, out
    assert "workload.num_prompts=-1: must be a whole number >= 1" in out and "Traceback" not in out
    assert not any(tmp_path.iterdir())


@pytest.mark.heavy  # 4 s CPU
def test_reproduction_run_sh_is_executable_and_uses_the_run_interpreter(tmp_path: Path) -> None:
    import os
    import shlex
    import stat

    code, run_dir = run_fake(tmp_path / "results", "phases.same_runtime.points=[{g: 4, n: 1}]")
    assert code == 0
    run_sh = run_dir / "reproduction" / "run.sh"
    assert stat.S_IMODE(run_sh.stat().st_mode) == 0o755
    text = run_sh.read_text()
    assert f"exec {shlex.quote(sys.executable)} -m runners.matrix " in text and "exec python " not in text
    # PATH without the interpreter's directory (a bare `python` there has no hydra, or is absent)
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    r = subprocess.run([str(run_sh)], env={**os.environ, "PATH": path or "/usr/bin:/bin"}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len([d for d in run_dir.parent.iterdir() if d.is_dir()]) == 2  # the re-run went to a new directory
