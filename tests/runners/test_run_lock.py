"""One writer per run directory: a second runner is refused naming the holder, a dead holder is taken
over, and a resume never ends a live runner's case."""

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

from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.run_owner import HISTORY_FILE, HOLDER_FILE, LOCK_FILE, RunnerHolder
from runners.errors import EXIT_CONFIG, RunnerError
from runners.incase.case_processes import (CASE_RUNNER_ENV, CASE_TOKEN_ENV, end_orphaned_cases, end_recorded_cases,
                                           runner_id)
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.run_lock import RunLock
from tests.runners.helpers import RUNNER, fake_overrides

REPO_ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_second_lock_on_a_held_run_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = RunLock()
    holder = first.acquire(tmp_path, "created")
    assert holder.pid == os.getpid() and holder.acquisition == "created" and holder.previous is None
    with pytest.raises(RunnerError, match=f"in use by runner pid {os.getpid()} on host ") as exc:
        RunLock().acquire(tmp_path, "resumed")
    assert exc.value.exit_code == EXIT_CONFIG
    with pytest.raises(RunnerError, match="in use by runner pid"):
        RunLock().check_free(tmp_path)
    first.release()
    assert not (tmp_path / HOLDER_FILE).exists() and (tmp_path / LOCK_FILE).exists()
    RunLock().check_free(tmp_path)  # free now
    second = RunLock()
    assert second.acquire(tmp_path, "resumed").acquisition == "resumed"  # the first released cleanly
    second.release()
    assert [h.acquisition for h in read_jsonl(tmp_path / HISTORY_FILE, RunnerHolder)] == ["created", "resumed"]


def test_a_dead_holder_is_taken_over_and_the_takeover_is_recorded(tmp_path: Path) -> None:
    dead = RunnerHolder(host=os.uname().nodename, pid=_dead_pid(), process_start_time_s=1.0, command=("python", "x"),
                        acquired_at="2026-01-01T00:00:00+00:00", acquisition="created")
    (tmp_path / HOLDER_FILE).write_text(dead.model_dump_json())  # left behind by a runner killed holding the lock
    lock = RunLock()
    holder = lock.acquire(tmp_path, "resumed")
    assert holder.acquisition == "took_over" and holder.previous is not None and holder.previous.pid == dead.pid
    assert read_json(tmp_path / HOLDER_FILE, RunnerHolder) == holder
    (line,) = read_jsonl(tmp_path / HISTORY_FILE, RunnerHolder)
    assert line == holder
    lock.release()


def test_a_free_lock_beside_a_live_holder_is_refused(tmp_path: Path) -> None:
    live = subprocess.Popen(["sleep", "60"])
    try:
        h = RunnerHolder(host=os.uname().nodename, pid=live.pid,
                         process_start_time_s=round(psutil.Process(live.pid).create_time(), 2),
                         command=("python", "-m", "runners.matrix"), acquired_at="2026-01-01T00:00:00+00:00",
                         acquisition="created")
        (tmp_path / HOLDER_FILE).write_text(h.model_dump_json())
        with pytest.raises(RunnerError, match=f"names the live runner pid {live.pid}"):
            RunLock().acquire(tmp_path, "resumed")
    finally:
        live.kill()
        live.wait()


def test_checksums_leave_out_the_lock_and_the_live_holder_but_cover_the_history(tmp_path: Path) -> None:
    lock = RunLock()
    lock.acquire(tmp_path, "created")
    (tmp_path / "config.yaml").write_text("x: 1\n")
    names = {ln.split("  ", 1)[1] for ln in write_sha256sums(tmp_path).read_text().splitlines()}
    lock.release()
    assert names == {"config.yaml", HISTORY_FILE}


def test_a_resume_never_ends_a_case_of_a_live_runner(tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    env = dict(os.environ, **{CASE_TOKEN_ENV: token, CASE_RUNNER_ENV: runner_id()})  # this test: a live runner
    case = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    rec = tmp_path / "processes" / "ph" / "x-r0.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(f'{{"token": "{token}", "pid": {case.pid}, "pgid": {case.pid}, "runner": "{runner_id()}"}}\n')
    try:
        time.sleep(0.2)
        assert end_recorded_cases(tmp_path / "processes") == []
        assert case.poll() is None and rec.exists()
    finally:
        case.kill()
        case.wait()



@pytest.mark.skipif(not Path("/proc/sys/kernel/random/boot_id").is_file(), reason="needs Linux /proc")
def test_a_wall_clock_step_never_makes_a_live_runner_look_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner id is the kernel's start time (clock ticks since boot) and the boot id; psutil's
    ``create_time`` adds ``/proc/stat`` ``btime``, which a wall-clock step moves (psutil's docs say so)."""
    import psutil._pslinux as pslinux

    token = uuid.uuid4().hex
    env = dict(os.environ, **{CASE_TOKEN_ENV: token, CASE_RUNNER_ENV: runner_id()})  # this test: the live runner
    case = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    try:
        stat = Path(f"/proc/{case.pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert runner_id(case.pid) == f"{case.pid}:{boot}:{stat[19]}"
        before = psutil.Process(os.getpid()).create_time()
        stepped = pslinux.boot_time() + 3600.0
        monkeypatch.setattr(pslinux, "boot_time", lambda: stepped)  # what a clock step one hour ahead does to btime
        assert psutil.Process(os.getpid()).create_time() == pytest.approx(before + 3600.0)  # the hazard is real
        assert env[CASE_RUNNER_ENV] == runner_id()
        assert end_orphaned_cases() == [] and case.poll() is None  # this live runner's case is left alone
    finally:
        case.kill()
        case.wait()

# ----------------------------------------------------------------------------- real runners (fake bench)


def _start(overrides: list[str], sleep_s: str, wait_for: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, FAKE_BENCH_SLEEP_S=sleep_s)
    if wait_for is not None:  # every case waits until the test creates this file
        env["FAKE_BENCH_WAIT_FOR"] = str(wait_for)
    return subprocess.Popen([*RUNNER, *overrides], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_mid_case(run_dir: Path, runner: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until a case process of ``runner`` is running (its pid file exists)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and runner.poll() is None:
        if list((run_dir / "processes").rglob("*.json")):
            return
        time.sleep(0.1)
    raise AssertionError(f"no case started in {run_dir} (runner rc={runner.poll()})")


def _last_line(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


def _valid_run(run_dir: Path) -> None:
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert sorted(r.record.label for r in runs) == ["baseline", "current_g4_n1"]
    assert not (run_dir / "same_runtime-failures.jsonl").exists()
    assert (run_dir / "SHA256SUMS").is_file() and not (run_dir / HOLDER_FILE).exists()
    assert not list((run_dir / "processes").rglob("*.json"))


@pytest.mark.heavy(seconds=16)  # two fake-bench runners with analysis, a refused resume, a SIGKILL and a resume (20 s CPU)
def test_second_runner_is_refused_mid_case_then_a_killed_runner_is_taken_over(tmp_path: Path) -> None:
    # 1. A live runner mid-case: a resume of its run exits 2 naming its pid and ends nothing.
    live = fake_overrides(tmp_path, ONE_POINT, "phases.same_runtime.case_timeout_s=60", run_id="live")
    live[live.index("analyze=false")] = "analyze=true"
    go = tmp_path / "go"  # the live case runs until the refused resume has been checked, however loaded the machine
    first = _start(live, "0", wait_for=go)
    try:
        run_dir = tmp_path / "default" / "live"
        _wait_mid_case(run_dir, first)
        case_pids = {p.pid for p in psutil.Process(first.pid).children(recursive=True)}
        second = subprocess.run([*RUNNER, f"resume={run_dir}", "progress=false"],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        out = second.stdout + second.stderr
        assert second.returncode == EXIT_CONFIG, out
        assert f"in use by runner pid {first.pid} on host" in out and "Traceback" not in out
        assert len([ln for ln in out.splitlines() if ln.strip()]) == 1, out
        assert case_pids and all(psutil.pid_exists(p) for p in case_pids)  # the live case was not ended
        go.touch()
        text = first.communicate(timeout=300)[0]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == 0, text[-3000:]
    assert _last_line(text).startswith("validation: VALID"), text[-3000:]
    _valid_run(run_dir)
    assert [h.acquisition for h in read_jsonl(run_dir / HISTORY_FILE, RunnerHolder)] == ["created"]

    # 2. A runner killed mid-case (SIGKILL: its lock dies with it): a resume takes the lock over and completes.
    killed = fake_overrides(tmp_path, ONE_POINT, "phases.same_runtime.case_timeout_s=60", run_id="killed")
    killed[killed.index("analyze=false")] = "analyze=true"
    victim = _start(killed, "30")
    run_dir = tmp_path / "default" / "killed"
    try:
        _wait_mid_case(run_dir, victim)
        assert read_json(run_dir / HOLDER_FILE, RunnerHolder).pid == victim.pid
    finally:
        victim.kill()
        victim.communicate(timeout=30)
    resumed = subprocess.run([*RUNNER, f"resume={run_dir}"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=300)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-3000:]
    assert f"took over {run_dir} from runner pid {victim.pid}" in " ".join(out.split()), out[-3000:]
    assert _last_line(resumed.stdout).startswith("validation: VALID"), out[-3000:]
    _valid_run(run_dir)
    history = read_jsonl(run_dir / HISTORY_FILE, RunnerHolder)
    assert [h.acquisition for h in history] == ["created", "took_over"]
    assert history[0].pid == victim.pid and history[1].previous is not None and history[1].previous.pid == victim.pid
