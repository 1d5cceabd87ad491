"""Launch one case process in a fresh process group and always end every process of the case.

What is modelled: ``subprocess.Popen(start_new_session=True)`` with stdout+stderr
to the case log (the log starts with the exact argv and the run-relevant environment
of the case, credentials redacted; see ``runners.incase.recorded_env.recordable_env``); waiting
with a wall-clock timeout; on timeout (or when the runner itself is interrupted)
SIGTERM to the process group, then SIGKILL after a grace period.

Every process of a case is found by four independent means, so none survives the case:

* its process group (``killpg``);
* the descendants seen while the case ran (``psutil`` children, polled);
* a per-case token in the environment (``OFFLOAD_CASE_TOKEN``), inherited by every
  descendant, even one that called ``setsid`` and was re-parented;
* the runner is a child subreaper (``PR_SET_CHILD_SUBREAPER``): orphans of the case
  are re-parented to it, not to init, and it kills and reaps them.

When the runner itself dies (``kill -9``): the case process has ``PR_SET_PDEATHSIG``
(set between fork and exec), and every Python process of the case sets it too (the
evidence hook's ``sitecustomize``, also after ``fork``), so the tree dies from the top
down. What escapes that (a non-Python process that left the tree) is ended by the next
runner: each case writes ``{token, pid, pgid, runner}`` to a pid file in the run
directory (``processes/``), read by ``end_recorded_cases`` at ``resume=``, and every
run calls ``end_orphaned_cases`` (processes carrying a case token whose runner is dead).

Public helpers for other launchers (API servers of the serving phase):
``become_subreaper``, ``CaseProcess``; finding and ending leftovers by token, runner id
and pid file lives in ``runners.incase.case_processes`` (``case_environment``, ``end_processes``,
``end_case_processes``, ``end_orphaned_cases``, ``end_recorded_cases``).

What is deliberately not modelled: parsing the log (``runners.outcome.bench``). A
descendant that clears its environment *and* leaves the tree while the runner is
SIGKILLed is beyond reach (documented limit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import psutil

from results_schema.codec.files import write_text_atomic
from runners.incase.case_processes import (
    CASE_RUNNER_ENV,
    CASE_TOKEN_ENV,
    alive,
    case_environment,
    end_processes,
    processes_where,
    reap_children,
    wait_gone,
)
from runners.incase.recorded_env import recordable_env

__all__ = ["CaseProcess", "ProcessOutcome", "become_subreaper", "install_interrupt_handlers", "raise_if_interrupted",
           "run_case_process"]


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
_PR_SET_CHILD_SUBREAPER = 36
_SIGKILL = int(signal.SIGKILL)


_INTERRUPT: dict[str, int | None] = {"signum": None}


def install_interrupt_handlers(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Handlers that record the signal and raise ``KeyboardInterrupt`` (main thread only).

    Recording matters: a handler that runs inside an at-fork callback (``Popen`` with
    ``preexec_fn`` runs ``os.register_at_fork`` callbacks such as logging's) has its
    exception swallowed ("Exception ignored in ..."); ``raise_if_interrupted`` raises
    it again right after the launch, so an interrupt is never lost.
    """
    def handler(signum: int, frame: Any) -> None:
        _INTERRUPT["signum"] = signum
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in signals:
        signal.signal(sig, handler)


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` when a handler of ``install_interrupt_handlers`` has run."""
    if _INTERRUPT["signum"] is not None:
        raise KeyboardInterrupt(f"signal {_INTERRUPT['signum']}")


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``); idempotent.

    Orphaned descendants (e.g. ``( setsid sleep 300 & )``) are then re-parented to this
    process instead of init, so they stay visible and can be reaped here.

    Returns:
        True when set; False where ``prctl`` is unavailable (non-Linux).
    """
    if _PRCTL is None:
        return False
    return _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _write_pid_file(path: Path, data: Mapping[str, Any]) -> None:
    """``data`` as one JSON line, written atomically (read by ``runners.incase.case_processes.end_recorded_cases``)."""
    write_text_atomic(path, json.dumps(dict(data), sort_keys=True) + "\n")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launching thread dies (Linux ``PR_SET_PDEATHSIG``).

    Covers a runner killed with SIGKILL, which cannot reap its case; vLLM's own
    engine processes exit when their parent does. Deliberately minimal: one call of a
    pre-resolved C function with pre-computed ints, no import, no allocation of note.
    Only passed to Popen when ``_PRCTL`` was resolved.
    """
    _PRCTL(_PR_SET_PDEATHSIG, _SIGKILL)


class CaseProcess:
    """Context manager around one case process; exit kills the process group and descendants."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path,
                 pid_file: Path | None = None, record_env: Sequence[str] = ()) -> None:
        """Args:
            argv, env, log_path, cwd: the command, its full environment, its new log, its directory.
            pid_file: where ``{token, pid, pgid, runner, argv}`` is kept while the case runs
                (removed once every process of the case is gone); None = not kept.
            record_env: extra variable names to write in the log header (a runtime's declared env).
        """
        self.argv = list(argv)
        self.env = case_environment(env)
        self.token = self.env[CASE_TOKEN_ENV]
        self.log_path = log_path
        self.cwd = cwd
        self.pid_file = pid_file
        self.record_env = tuple(record_env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._children_before: set[int] = set()
        self._log: BinaryIO | None = None

    def __enter__(self) -> "CaseProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self._log = open(self.log_path, "xb")  # never overwrite a case log
        header = ["# argv: " + " ".join(self.argv), "# cwd: " + str(self.cwd)]
        header += [f"# env: {k}={v}" for k, v in sorted(recordable_env(self.env, self.record_env).items())]
        log.write(("\n".join(header) + "\n").encode())
        log.flush()
        become_subreaper()
        self._children_before = {c.pid for c in psutil.Process().children()}
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env, cwd=self.cwd, start_new_session=True,
                                     preexec_fn=_die_with_parent if _PRCTL is not None else None)
        try:
            if self.pid_file is not None:
                _write_pid_file(self.pid_file, {"token": self.token, "pid": self.proc.pid, "pgid": self.proc.pid,
                                                "runner": self.env[CASE_RUNNER_ENV], "argv": self.argv})
            raise_if_interrupted()  # an interrupt swallowed during Popen's at-fork callbacks
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
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
                wait_gone(list(self._seen.values()), timeout_s=5.0)
                self._end_the_rest()
        finally:
            if self._log is not None:
                self._log.close()

    def _end_the_rest(self) -> None:
        """Kill what escaped group and tree (token carriers, orphans adopted by this subreaper); reap them."""
        victims = {p.pid: p for p in processes_where(lambda env: env.get(CASE_TOKEN_ENV) == self.token)}
        assert self.proc is not None
        try:
            for child in psutil.Process().children():
                if child.pid not in self._children_before and child.pid != self.proc.pid:
                    victims.setdefault(child.pid, child)  # adopted: re-parented to us while the case ran
        except psutil.NoSuchProcess:
            pass
        end_processes(victims.values())
        reap_children(self._seen)
        if self.pid_file is not None:
            left = [p for p in victims.values() if alive(p)]
            if not left:
                self.pid_file.unlink(missing_ok=True)


def run_case_process(argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path, *,
                     timeout_s: float, kill_grace_s: float, pid_file: Path | None = None,
                     record_env: Sequence[str] = ()) -> ProcessOutcome:
    """Run one case process to completion (or timeout) and reap its whole group.

    Args:
        argv: full command.
        env: full environment (not merged with the runner's).
        log_path: new file for stdout+stderr (refuses to overwrite).
        cwd: working directory.
        timeout_s: wall-clock limit.
        kill_grace_s: seconds between SIGTERM and SIGKILL.
        pid_file: kept while the case runs so a later runner can end leftovers (``end_recorded_cases``).
        record_env: extra variable names the log header may show (a runtime's declared env).

    Returns:
        The outcome; a process that cannot be started gives ``launch_error``.
    """
    t0 = time.monotonic()
    try:
        with CaseProcess(argv, env, log_path, cwd, pid_file=pid_file, record_env=record_env) as cp:
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
