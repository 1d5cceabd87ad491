"""Processes that hide: after any case, and after a runner killed with SIGKILL, no
process of the case survives; resume= ends leftovers and completes the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun, RuntimeEvidence
from runners.incase.case_processes import (CASE_RUNNER_ENV, CASE_TOKEN_ENV, end_orphaned_cases, end_recorded_cases,
                                           runner_id)
from runners.incase.process_group import run_case_process
from tests.runners.helpers import RUNNER, ONE_GEMM_THREAD, TINY_DEFAULT, evidence_lines, fake_overrides, run_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _with_marker(marker: str) -> list[psutil.Process]:
    """Live processes whose environment holds I13_MARK=marker (set by the test, inherited by every descendant)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("I13_MARK") == marker and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return out


def _wait_none(marker: str, timeout_s: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    left = _with_marker(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _with_marker(marker)
    return left


@pytest.fixture
def marker(monkeypatch):
    mark = uuid.uuid4().hex
    monkeypatch.setenv("I13_MARK", mark)
    yield mark
    for p in _with_marker(mark):  # never leave anything behind, even when a test fails
        p.kill()


@pytest.mark.heavy  # measured 2.1 s in the fast tier (its budget is 2 minutes)
def test_setsid_grandchild_of_a_timed_out_case_does_not_survive(tmp_path: Path, marker: str) -> None:
    # the case's child runs `( setsid sleep 300 & ); sleep 30` and the case times out.
    script = "import subprocess, time; subprocess.run(['/bin/sh', '-c', '( setsid sleep 300 & ); sleep 30'])"
    t0 = time.monotonic()
    out = run_case_process([sys.executable, "-c", script], dict(os.environ), tmp_path / "case.log", tmp_path,
                           timeout_s=2.0, kill_grace_s=0.5, pid_file=tmp_path / "processes" / "case.json")
    assert out.timed_out and time.monotonic() - t0 < 20
    assert _wait_none(marker, 2.0) == []
    assert not (tmp_path / "processes" / "case.json").exists()  # removed once nothing is left


def test_setsid_grandchild_of_a_case_that_exits_does_not_survive(tmp_path: Path, marker: str) -> None:
    out = run_case_process(["/bin/sh", "-c", "( setsid sleep 300 & ); exit 0"], dict(os.environ),
                           tmp_path / "case.log", tmp_path, timeout_s=30, kill_grace_s=0.5)
    assert out.exit_code == 0 and not out.timed_out
    assert _wait_none(marker, 2.0) == []


@pytest.mark.exclusive  # the baseline case must finish within the 8 s case timeout: not on a loaded machine
@pytest.mark.heavy  # 11 s (an 8 s case timeout), 2 s CPU
def test_hiding_case_in_the_matrix_is_a_timeout_and_leaves_nothing(tmp_path: Path, marker: str,
                                                                    monkeypatch) -> None:
    monkeypatch.setenv("FAKE_BEHAVIOUR", "current_g4_n1=hide")
    code, run_dir = run_fake(tmp_path, ONE_POINT,
                             "phases.same_runtime.case_timeout_s=8", "phases.same_runtime.kill_grace_s=1")
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert failure.failure_type == "timeout"
    assert _wait_none(marker, 2.0) == []


@pytest.mark.heavy  # 3 s CPU
def test_sigint_of_the_runner_still_cleans_up(tmp_path: Path, marker: str) -> None:
    base = fake_overrides(tmp_path, ONE_POINT, run_id="int")
    proc = subprocess.Popen([*RUNNER, *base], cwd=REPO_ROOT,
                            env=dict(os.environ, FAKE_BEHAVIOUR="baseline=engine"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    pids = tmp_path / "default" / "int" / "records" / "same_runtime" / "baseline-r0.pids"
    _wait_lines(pids, 2, proc)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, out
    assert _wait_none(marker, 5.0) == []


def _wait_lines(path: Path, n: int, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not get {n} lines (runner rc={proc.poll()})")


@pytest.mark.exclusive  # asserts that its resume ends the leftover: no other run may end it first
@pytest.mark.heavy  # a runner process killed and resumed (5 s CPU)
def test_sigkill_of_the_runner_mid_case_leaves_no_process_and_resume_completes(tmp_path: Path, marker: str) -> None:
    # The fake engine: a spawn child (EngineCore) with its own spawn child (worker), a fork child,
    # and a `setsid sleep 300` that left the tree (only a later runner can end that one).
    base = fake_overrides(tmp_path, ONE_POINT, run_id="killed")
    runner = subprocess.Popen([*RUNNER, *base], cwd=REPO_ROOT,
                              env=dict(os.environ, FAKE_BEHAVIOUR="baseline=engine"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = tmp_path / "default" / "killed"
    pids_file = run_dir / "records" / "same_runtime" / "baseline-r0.pids"
    _wait_lines(pids_file, 2, runner)
    recorded = list((run_dir / "processes").rglob("*.json"))
    assert len(recorded) == 1  # the case's token, pid and group are in the run directory
    case_pids = [int(x) for line in pids_file.read_text().splitlines() for x in line.split()]
    deadline = time.monotonic() + 10
    sleepers = []
    while len(sleepers) != 1 and time.monotonic() < deadline:  # setsid execs sleep a moment later
        sleepers = [p for p in _with_marker(marker) if p.name() == "sleep"]
        time.sleep(0.05)
    assert len(case_pids) == 4 and len(sleepers) == 1
    runner.kill()  # SIGKILL: the runner cleans nothing up itself
    runner.communicate(timeout=30)
    # Parent-death signals bring down every Python process of the case (bench, engine, worker, fork child).
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in case_pids) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [p for p in case_pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    # What left the tree (not Python, no parent-death signal) is ended by the resumed run.
    assert [p.name() for p in _with_marker(marker)] == ["sleep"]
    resumed = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out
    assert "ended 1 process(es) left by the interrupted run" in " ".join(out.split()), out
    assert _wait_none(marker, 5.0) == []
    assert sorted(r.record.label for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)) == [
        "baseline", "current_g4_n1"]
    assert not list((run_dir / "processes").rglob("*.json"))


@pytest.mark.heavy(seconds=12)  # 5 s CPU
def test_resume_completes_a_run_whose_runner_was_sigkilled(tmp_path: Path, marker: str) -> None:
    base = fake_overrides(tmp_path, ONE_POINT, "phases.same_runtime.case_timeout_s=20", run_id="k2")
    env = dict(os.environ, FAKE_BENCH_SLEEP_S="30")
    runner = subprocess.Popen([*RUNNER, *base], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = tmp_path / "default" / "k2"
    deadline = time.monotonic() + 90
    while not list((run_dir / "processes").rglob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    assert _with_marker(marker)  # the case is running
    runner.kill()
    runner.communicate(timeout=30)
    assert _wait_none(marker, 10.0) == []  # the fake bench (Python) died with its runner
    resumed = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert sorted(r.record.label for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)) == [
        "baseline", "current_g4_n1"]
    assert not list((run_dir / "processes").rglob("*.json"))
    assert _wait_none(marker, 2.0) == []


@pytest.mark.exclusive  # asserts that its own call ends the orphan: no other run may end it first
def test_any_later_run_ends_case_processes_of_a_dead_runner(tmp_path: Path, marker: str) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = dict(os.environ, **{CASE_TOKEN_ENV: uuid.uuid4().hex, CASE_RUNNER_ENV: f"{dead.pid}:1.00"})
    orphan = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    live_env = dict(os.environ, **{CASE_TOKEN_ENV: uuid.uuid4().hex, CASE_RUNNER_ENV: runner_id()})
    live = subprocess.Popen(["sleep", "300"], env=live_env, start_new_session=True)
    try:
        time.sleep(0.2)
        ended = end_orphaned_cases()
        assert orphan.pid in ended and live.pid not in ended
        assert orphan.wait(timeout=5) in (-signal.SIGKILL, 0)  # 0: already reaped by end_processes (our child)
        assert not psutil.pid_exists(orphan.pid)
        assert live.poll() is None  # its runner (this test) is alive: not a leftover
    finally:
        live.kill()
        live.wait()


@pytest.mark.exclusive  # its case names no live runner: another run's start would end it first
def test_recorded_case_is_ended_and_its_pid_file_removed(tmp_path: Path, marker: str) -> None:
    token = uuid.uuid4().hex
    p = subprocess.Popen(["sleep", "300"], env=dict(os.environ, **{CASE_TOKEN_ENV: token}), start_new_session=True)
    rec = tmp_path / "processes" / "ph" / "x-r0.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(f'{{"token": "{token}", "pid": {p.pid}, "pgid": {p.pid}, "runner": "1:0"}}\n')
    time.sleep(0.2)
    assert end_recorded_cases(tmp_path / "processes") == [p.pid]
    assert p.wait(timeout=5) in (-signal.SIGKILL, 0) and not psutil.pid_exists(p.pid) and not rec.exists()


def _evidence_published_once_by_the_engine_core_child(run_dir: Path, run: CaseRun) -> None:
    lines = evidence_lines((run_dir / run.log_path).read_text())
    assert len(lines) == 1 and lines[0] == (run_dir / run.evidence_path).read_text().strip(), lines
    ev = RuntimeEvidence.model_validate_json(lines[0])
    assert ev == run.evidence and ev.implementation == "baseline" and ev.num_layers == 8
    assert ev.offloader_class.endswith("NoopOffloader") and ev.wrapped_count == 0 and ev.offloaded_bytes == 0
    assert ev.pid != run.record.pid  # the engine core runs in a child of the bench process


@pytest.mark.slow
def test_sigkill_of_the_runner_during_a_real_vllm_case(tmp_path: Path, marker: str) -> None:
    """Real vLLM (CPU): bench process, EngineCore and resource tracker all die with a SIGKILLed runner.

    The resumed run completes the baseline in runtime ``cpu``'s child layout: the evidence hook
    publishes exactly one ``OFFLOAD_EVIDENCE`` line, equal to the sidecar, from the engine-core child
    that loaded the model (not the bench process).

    The baseline-only run also carries a short credential (``TORCH_FOO=ghp_abcdefSECRET7``): the real
    engine's log, the manifest and every other file of the run hold it nowhere.
    """
    base = [*TINY_DEFAULT, f"results_root={tmp_path}", "run_id=real", "analyze=false", "progress=false",
            "phases.same_runtime.points=[]", "phases.same_runtime.case_timeout_s=300", "workload.min_measured_s=0",
            ONE_GEMM_THREAD]  # engine core in a child
    env = dict(os.environ, TORCH_FOO="ghp_abcdefSECRET7")
    runner = subprocess.Popen([*RUNNER, *base], cwd=REPO_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = tmp_path / "default" / "real"
    log = run_dir / "logs" / "same_runtime" / "baseline-r0.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and runner.poll() is None:
        if log.is_file() and "EngineCore" in log.read_text(errors="replace") and \
                len(_with_marker(marker)) >= 2:
            break
        time.sleep(0.2)
    case = _with_marker(marker)
    names = sorted(p.name() for p in case)
    assert len(case) >= 2, (names, log.read_text(errors="replace")[-2000:] if log.is_file() else "no log")
    runner.kill()
    runner.communicate(timeout=30)
    left = _wait_none(marker, 20.0)
    assert left == [], [(p.pid, p.name(), p.cmdline()[:3]) for p in left]
    resumed = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=400, env=env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "run lock: took over" in resumed.stdout  # the killed runner's lock
    (run,) = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert run.record.label == "baseline"
    _evidence_published_once_by_the_engine_core_child(run_dir, run)
    assert _wait_none(marker, 5.0) == []
    assert "# env: TORCH_FOO=<redacted" in (run_dir / "logs" / "same_runtime" / "baseline-r0.log").read_text()
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and b"abcdefSECRET7" in p.read_bytes()]
    assert leaks == []
