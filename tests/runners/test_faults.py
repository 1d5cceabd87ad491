"""Faults survived with real processes (the fake bench stands in for vLLM)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun
from runners.incase.process_group import run_case_process
from runners.errors import EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_FORMAL_STOP, EXIT_HEALTH, EXIT_IDENTITY
from tests.shared_runs import run_matrix
from runners.identity.probe import sha256_file
from tests.runners.helpers import RUNNER, compose_cfg, fake_overrides, run_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _behave(**modes: str) -> str:
    return "+runtime.env.FAKE_BEHAVIOUR=\"" + ",".join(f"{k}={v}" for k, v in modes.items()) + "\""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.exclusive  # the baseline case must finish within the 8 s case timeout: not on a loaded machine
@pytest.mark.heavy  # 11 s (an 8 s case timeout), 2 s CPU
def test_case_sleeping_past_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT, _behave(current_g4_n1="sleep"),
                             "phases.same_runtime.case_timeout_s=8", "phases.same_runtime.kill_grace_s=1")
    assert code == EXIT_CASE_FAILURES
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert failure.failure_type == "timeout" and failure.label == "current_g4_n1"
    pids = [int(p) for p in (run_dir / "records" / "same_runtime" / "current_g4_n1-r0.pids").read_text().split()]
    assert len(pids) == 2 and all(_gone(p) for p in pids)
    assert len(read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)) == 1  # the baseline


@pytest.mark.heavy  # 3 s
def test_child_that_leaves_the_process_group_is_still_reaped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)'], start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(1000)\n")
    out = run_case_process([sys.executable, "-c", script], dict(os.environ), tmp_path / "case.log", tmp_path,
                           timeout_s=2.5, kill_grace_s=0.5)
    assert out.timed_out and out.exit_code is None and out.signal in (signal.SIGTERM, signal.SIGKILL)
    assert _gone(int(pid_file.read_text()))


@pytest.mark.heavy  # 3 s CPU
def test_sigkilled_case_is_a_failure_record_and_the_matrix_continues(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, _behave(current_g8_n1="sigkill"))
    assert code == EXIT_CASE_FAILURES
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert (failure.failure_type, failure.signal, failure.exit_code) == ("signal", signal.SIGKILL, None)
    assert (run_dir / failure.log_path).is_file()
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert sorted(r.record.label for r in runs) == ["baseline", "current_g2_n1", "current_g4_n1", "current_g4_n2"]


@pytest.mark.heavy  # 4 s CPU
def test_disagreements_become_typed_failures(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, _behave(current_g8_n1="dup", current_g4_n1="noevidence",
                                               current_g4_n2="nooffload", current_g2_n1="mismatch"))
    assert code == EXIT_CASE_FAILURES
    kinds = {f.label: f.failure_type for f in read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)}
    assert kinds == {"current_g8_n1": "duplicate_result", "current_g4_n1": "missing_evidence",
                     "current_g4_n2": "no_offload_evidence", "current_g2_n1": "evidence_mismatch"}
    (run,) = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert run.record.label == "baseline" and run.kv_cache.kv_cache_tokens == 524288


@pytest.mark.heavy  # 3 s CPU
def test_formal_run_stops_at_first_failure_keeping_completed_evidence(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "formal=true", _behave(current_g4_n1="sigkill"))
    assert code == EXIT_FORMAL_STOP
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert [r.record.label for r in runs] == ["baseline", "current_g8_n1"]
    assert len(read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)) == 1
    assert not (run_dir / "logs" / "same_runtime" / "current_g4_n2-r0.log").exists()


@pytest.mark.heavy  # 3 s CPU
def test_expected_upstream_assertion_is_a_failure_record_and_the_rest_completes(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "+experiment=official_cpu", _behave(official_g4_n1="crash"))
    assert code == 0
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert (failure.label, failure.error_type, failure.failure_type) == ("official_g4_n1", "AssertionError",
                                                                         "nonzero_exit")
    assert "Module parameters should not already be on CPU" in failure.error_message
    assert len(read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)) == 2


@pytest.mark.heavy  # measured 2.4 s in the fast tier (its budget is 2 minutes)
def test_tampered_pinned_file_stops_the_run_before_any_case(tmp_path: Path) -> None:
    pinned = tmp_path / "toolkit-version.cfg"
    pinned.write_text("toolkit 8.0\n")
    digest = sha256_file(pinned)
    pinned.write_text("toolkit 8.1\n")
    overrides = fake_overrides(tmp_path / "results")
    cfg = compose_cfg(*overrides)
    cfg.runtime.pins.files = {str(pinned): digest}
    assert run_matrix(cfg, overrides) == EXIT_IDENTITY
    assert not (tmp_path / "results").exists()


@pytest.mark.heavy  # 3 s CPU
def test_pinned_file_changed_during_a_phase_stops_before_the_next_phase(tmp_path: Path) -> None:
    pinned = tmp_path / "driver-version.info"
    pinned.write_text("driver 1\n")
    overrides = fake_overrides(tmp_path / "results", ONE_POINT, _behave(baseline="tamper"),
                               f"+runtime.env.FAKE_TAMPER_PATH={pinned}")
    cfg = compose_cfg(*overrides)
    cfg.runtime.pins.files = {str(pinned): sha256_file(pinned)}
    cfg.phases["second"] = dataclasses.replace(cfg.phases["same_runtime"], order=99)
    assert run_matrix(cfg, overrides) == EXIT_IDENTITY
    run_dir = tmp_path / "results" / "default" / "t"
    assert len(read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)) == 2  # completed evidence kept
    assert not (run_dir / "second-runs.jsonl").exists() and not (run_dir / "logs" / "second").exists()


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_existing_run_directory_is_refused(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT)
    assert code == 0
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    code2, _ = run_fake(tmp_path, ONE_POINT)
    assert code2 == EXIT_CONFIG
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before


@pytest.mark.heavy  # measured 5.7 s in the fast tier (its budget is 2 minutes)
def test_failing_health_gate_stops_with_exit_42_and_keeps_its_output(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT, "runtime.health_command=[sh,-c,'echo NPU unhealthy; exit 3']")
    assert code == EXIT_HEALTH
    (health,) = (run_dir / "health").iterdir()
    assert "NPU unhealthy" in health.read_text()
    assert not (run_dir / "logs").exists()


@pytest.mark.heavy  # a fake-bench matrix with analysis (4 s CPU)
def test_health_gate_failing_after_the_last_phase_exits_42_and_never_ends_valid(tmp_path: Path, capsys) -> None:
    """Published rule: the device is healthy after the last phase too; healthy before, then not."""
    script = tmp_path / "health.sh"
    script.write_text('n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n+1)) > "$0.count"\n'
                      'if [ "$n" -ge 1 ]; then echo "Health Status : Warning"; exit 0; fi\n'
                      'echo "Health Status : OK"\n')
    code, run_dir = run_fake(tmp_path, ONE_POINT, "analyze=true", f"runtime.health_command=[sh,{script}]",
                             "runtime.health_expect='Health Status\\s*:\\s*OK'")
    out = capsys.readouterr().out
    assert code == EXIT_HEALTH, out
    assert (run_dir / "logs").exists()  # the cases ran: the gate before the phase passed
    (after,) = (run_dir / "health").glob("after-last-phase-*.txt")
    assert "Warning" in after.read_text()
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    assert last.startswith("FAILED: the health gate after the last phase failed; validation: ") and \
        last.endswith(f"exit {EXIT_HEALTH}"), last


def test_dry_run_launches_nothing(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, "dry_run=true")
    assert code == 0 and not tmp_path.joinpath("default").exists()


@pytest.mark.heavy  # measured 2.5 s in the fast tier (its budget is 2 minutes)
def test_run_directory_layout_manifest_without_secrets_and_checksums(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MY_SERVICE_API_TOKEN", "s3cr3t-value")
    code, run_dir = run_fake(tmp_path, ONE_POINT)
    assert code == 0
    for rel in ("config.yaml", "overrides.yaml", "environment-manifest.json", "reproduction/config.yaml",
                "same_runtime-runs.jsonl", "logs/same_runtime/baseline-r0.log",
                "evidence/same_runtime/current_g4_n1-r0.json", "records/same_runtime/current_g4_n1-r0.json"):
        assert (run_dir / rel).is_file(), rel
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert b"s3cr3t-value" not in p.read_bytes(), p
    manifest = json.loads((run_dir / "environment-manifest.json").read_text())
    assert "MY_SERVICE_API_TOKEN" not in manifest["environment"]
    assert manifest["git"]["revision"] and isinstance(manifest["git"]["dirty"], bool)
    sums = dict(reversed(line.split("  ", 1)) for line in (run_dir / "SHA256SUMS").read_text().splitlines())
    assert "environment-manifest.json" in sums
    assert all(sha256_file(run_dir / rel) == digest for rel, digest in sums.items())


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.heavy(seconds=28)  # two fake-bench matrices, one interrupted and resumed (10 s CPU)
def test_resume_after_interrupt_yields_the_same_records_as_an_uninterrupted_run(tmp_path: Path) -> None:
    base = fake_overrides(tmp_path, "phases.same_runtime.repeats=2", run_id="interrupted")
    env = dict(os.environ, FAKE_BENCH_SLEEP_S="0.7")
    proc = subprocess.Popen([*RUNNER, *base], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = tmp_path / "default" / "interrupted"
    runs = run_dir / "same_runtime-runs.jsonl"
    deadline = time.monotonic() + 60
    while _lines(runs) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, out
    last = [ln for ln in out.splitlines() if ln.strip()][-1]  # the verdict of an interrupted run, and how to resume
    assert last.startswith("validation: INTERRUPTED: incomplete run, no verdict (") and last.endswith("exit 130"), out
    assert f"resume with `python -m runners.matrix resume={run_dir}`" in last
    n_before = _lines(runs)
    assert 3 <= n_before < 10
    resumed = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    code, full_dir = run_fake(tmp_path, "phases.same_runtime.repeats=2", run_id="full")
    assert code == 0

    def keys(d: Path) -> list[tuple[str, int]]:
        return sorted((r.record.label, r.record.repeat) for r in read_jsonl(d / "same_runtime-runs.jsonl", CaseRun))

    assert keys(run_dir) == keys(full_dir) and len(keys(run_dir)) == 10
    assert not (run_dir / "same_runtime-failures.jsonl").exists()
    assert (run_dir / "SHA256SUMS").is_file()


@pytest.mark.heavy(seconds=14)  # a fake-bench matrix, then its resume with analysis (6 s CPU)
def test_resumed_case_whose_tokens_differ_from_an_earlier_baseline_is_never_ok(tmp_path: Path) -> None:
    """The live token check also holds after a resume: the baseline ran before the interruption."""
    code, run_dir = run_fake(tmp_path, ONE_POINT, _behave(current_g4_n1="digest"))
    assert code == 0
    runs = run_dir / "same_runtime-runs.jsonl"  # as if interrupted after the baseline: its line only
    runs.write_text("".join(ln + "\n" for ln in runs.read_text().splitlines() if '"current_g4_n1"' not in ln))
    r = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 6, r.stdout[-3000:] + r.stderr[-3000:]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("[2/2] same_runtime/current_g4_n1-r0:")]
    assert "TOKENS DIFFER from the same_runtime baseline" in line and ": ok" not in line, line
    assert "done: 0 ok, 1 with tokens differing from the baseline," in r.stdout, r.stdout[-3000:]


@pytest.mark.heavy  # measured 1.5 s in the fast tier (its budget is 2 minutes)
def test_resume_quarantines_partial_leftovers_and_a_torn_line(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT)
    assert code == 0
    runs = run_dir / "same_runtime-runs.jsonl"
    lines = runs.read_bytes().splitlines(keepends=True)
    runs.write_bytes(lines[0] + lines[1][:40])  # a crash mid-append of the second case
    leftover = run_dir / "logs" / "same_runtime" / "current_g4_n1-r0.log"
    assert leftover.exists()
    overrides = fake_overrides(tmp_path, f"resume={run_dir}")
    assert run_matrix(compose_cfg(*overrides), overrides) == 0
    assert len(read_jsonl(runs, CaseRun)) == 2
    quarantined = [p.relative_to(run_dir).as_posix() for p in (run_dir / "quarantine").rglob("*") if p.is_file()]
    assert any(q.endswith("same_runtime-runs.jsonl.torn-line") for q in quarantined)
    assert any(q.endswith("logs/same_runtime/current_g4_n1-r0.log") for q in quarantined)
