"""Launch one case process in a fresh process group and always reap the whole group.

What is modelled: ``subprocess.Popen(start_new_session=True)`` with stdout+stderr
to the case log (the log starts with the exact argv and the environment the case
got, secrets removed); waiting with a wall-clock timeout; on timeout (or when the
runner itself is interrupted) SIGTERM to the process group, then SIGKILL after a
grace period. On every exit path the context manager kills what is left of the
group *and* every descendant seen while the case ran (a child that called
``setsid`` escapes the group but not the descendant list), so no orphan survives.

What is deliberately not modelled: parsing the log (``runners.finalize``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import psutil

from results_schema.manifest import is_secret_name


@dataclass(frozen=True)
class ProcessOutcome:
    """How a case process ended.

    Attributes:
        exit_code: ``returncode`` when it exited by itself; None when killed by a signal.
        signal: signal number that ended it (negative returncode), else None.
        timed_out: the runner killed it at its timeout.
        wall_s: seconds from launch to exit (as seen by the runner).
        pid: PID of the case process.
        launch_error: set when the process could not be started at all.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    wall_s: float
    pid: int | None
    launch_error: str | None = None


def _resolve_prctl() -> Any:
    """``prctl`` from libc, looked up once at import time (None where unavailable)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved here, in the parent at import time: the function that runs in the child
# between fork and exec must not import, resolve symbols or take any Python-level lock
# (another thread of the runner may hold the import lock or a module lock at fork time;
# the child inherits it held by a thread that does not exist there, and would block
# forever while the parent blocks in Popen waiting for the exec).
_PRCTL = _resolve_prctl()
_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launching thread dies (Linux ``PR_SET_PDEATHSIG``).

    Covers a runner killed with SIGKILL, which cannot reap its case; vLLM's own
    engine processes exit when their parent does. Deliberately minimal: one call of a
    pre-resolved C function with pre-computed ints, no import, no allocation of note.
    Only passed to Popen when ``_PRCTL`` was resolved.
    """
    _PRCTL(_PR_SET_PDEATHSIG, _SIGKILL)


def _alive(p: psutil.Process) -> bool:
    """Running and not a zombie (a killed orphan is a zombie until init reaps it: it holds nothing)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], timeout_s: float, poll_s: float = 0.02) -> None:
    """Wait until every process has exited (zombies count as exited), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = [p for p in left if _alive(p)]


class CaseProcess:
    """Context manager around one case process; exit kills the process group and descendants."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._log = None

    def __enter__(self) -> "CaseProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "xb")  # never overwrite a case log
        header = ["# argv: " + " ".join(self.argv), "# cwd: " + str(self.cwd)]
        header += [f"# env: {k}={v}" for k, v in sorted(self.env.items()) if not is_secret_name(k)]
        self._log.write(("\n".join(header) + "\n").encode())
        self._log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env, cwd=self.cwd, start_new_session=True,
                                     preexec_fn=_die_with_parent if _PRCTL is not None else None)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _track(self) -> None:
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout_s: float, grace_s: float, poll_s: float = 0.05) -> tuple[int, bool]:
        """Wait for exit; on timeout TERM the group, then KILL after ``grace_s``.

        Returns:
            ``(returncode, timed_out)``.
        """
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        next_track = 0.0
        while True:
            now = time.monotonic()
            if now >= next_track:
                self._track()
                next_track = now + 1.0
            try:
                return self.proc.wait(timeout=min(poll_s * 10, max(deadline - now, 0.001))), False
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    break
        self._track()
        self._signal_group(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=grace_s), True
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            return self.proc.wait(), True

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc is not None:
                self._track()
                if self.proc.poll() is None:
                    self._signal_group(signal.SIGTERM)
                    try:
                        self.proc.wait(timeout=2.0)
                    except subprocess.TimeoutExpired:
                        pass
                self._signal_group(signal.SIGKILL)
                for p in self._seen.values():
                    try:
                        p.kill()
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                _wait_gone(list(self._seen.values()), timeout_s=5.0)
        finally:
            if self._log is not None:
                self._log.close()


def run_case_process(argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path, *,
                     timeout_s: float, kill_grace_s: float) -> ProcessOutcome:
    """Run one case process to completion (or timeout) and reap its whole group.

    Args:
        argv: full command.
        env: full environment (not merged with the runner's).
        log_path: new file for stdout+stderr (refuses to overwrite).
        cwd: working directory.
        timeout_s: wall-clock limit.
        kill_grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
        The outcome; a process that cannot be started gives ``launch_error``.
    """
    t0 = time.monotonic()
    try:
        with CaseProcess(argv, env, log_path, cwd) as cp:
            rc, timed_out = cp.wait(timeout_s, kill_grace_s)
            wall = time.monotonic() - t0
            pid = cp.pid
    except (FileNotFoundError, PermissionError, OSError) as exc:
        if isinstance(exc, FileExistsError):
            raise
        return ProcessOutcome(exit_code=None, signal=None, timed_out=False, wall_s=time.monotonic() - t0, pid=None,
                              launch_error=f"{type(exc).__name__}: {exc}")
    if rc < 0:
        return ProcessOutcome(exit_code=None, signal=-rc, timed_out=timed_out, wall_s=wall, pid=pid)
    return ProcessOutcome(exit_code=rc, signal=None, timed_out=timed_out, wall_s=wall, pid=pid)
