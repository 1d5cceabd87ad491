"""The API server of one serving case: launch in its own process group, readiness, teardown.

What is modelled:
* ``free_port``: a loopback port nobody listens on (bind to port 0, read it, close).
* ``start_server``: ``runners.incase.process_group.CaseProcess`` (the case launcher: fresh session /
  process group, die-with-parent, log header with argv and environment, descendant
  tracking), so the server and everything it forks (vLLM's engine core and workers)
  share one process group led by the server's PID.
* ``wait_healthy``: poll ``GET /health`` until 200, bounded by a timeout; stop early when the
  server process exits (vLLM's benchmark does not probe readiness by default).
* ``stop_tree``: SIGTERM to the group (and to any tracked descendant that left it), wait up
  to a grace period for *every* process of the tree, then SIGKILL what is left; report who
  was still alive after SIGTERM (a server that "leaves a child behind"), who survived
  SIGKILL, and whether the port can be bound again. SIGKILL of the API server alone frees
  the port but leaves the engine core holding memory, so the whole tree is always stopped.

What is deliberately not modelled: the benchmark (``runners.incase.serving.driver``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Mapping, Sequence

import psutil

from runners.incase.case_processes import alive
from runners.incase.process_group import CaseProcess

HOST: Final = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that is free now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = HOST) -> bool:
    """True when ``host:port`` can be bound (``SO_REUSEADDR``: TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_server(argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> CaseProcess:
    """Launch the server as the leader of a new process group; stdout+stderr to ``log_path`` (new file).

    Raises:
        FileExistsError: ``log_path`` exists (a log is never overwritten).
        OSError: the command cannot be started.
    """
    cp = CaseProcess(argv, env, log_path, cwd)
    cp.__enter__()
    return cp


def track(cp: CaseProcess) -> None:
    """Remember every current descendant of the server (found again at teardown even if re-parented)."""
    cp._track()


@dataclass(frozen=True)
class Health:
    """Outcome of ``wait_healthy``.

    Attributes:
        healthy: GET /health answered 200.
        after_s: seconds from the call to the 200 (or to giving up).
        polls: attempts made.
        exit_code: the server's return code when it exited while waiting (<0: signal), else None.
    """

    healthy: bool
    after_s: float
    polls: int
    exit_code: int | None


def wait_healthy(cp: CaseProcess, port: int, *, timeout_s: float, poll_s: float, host: str = HOST) -> Health:
    """Poll ``http://host:port/health`` every ``poll_s`` until 200, the server exits, or ``timeout_s`` passes."""
    t0 = time.monotonic()
    polls = 0
    url = f"http://{host}:{port}/health"
    while True:
        track(cp)
        rc = _proc(cp).poll()
        if rc is not None:
            return Health(False, time.monotonic() - t0, polls, rc)
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            return Health(False, time.monotonic() - t0, polls, None)
        polls += 1
        try:
            with urllib.request.urlopen(url, timeout=max(0.1, min(2.0, left))) as resp:
                if resp.status == 200:
                    return Health(True, time.monotonic() - t0, polls, None)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(min(poll_s, max(0.0, timeout_s - (time.monotonic() - t0))))


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} {p.name()}"
    except psutil.Error:
        return f"{p.pid} ?"


def _group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


@dataclass(frozen=True)
class StopReport:
    """What ``stop_tree`` saw (fields of ``results_schema.records.serving.Teardown``)."""

    processes_seen: int
    server_exited_before_stop: bool
    sigterm_sent: bool
    escalated_to_sigkill: bool
    left_after_sigterm: tuple[str, ...]
    left_after_kill: tuple[str, ...]
    port_free: bool
    teardown_s: float


def _proc(cp: CaseProcess) -> subprocess.Popen[bytes]:
    """The started server's ``Popen`` (raises ``RuntimeError`` when ``cp`` was never started)."""
    if cp.proc is None:
        raise RuntimeError(f"the server {list(cp.argv)} was never started")
    return cp.proc


def _tree(cp: CaseProcess, pgid: int) -> dict[int, psutil.Process]:
    """Every process of the server's tree known now: tracked descendants, group members, the leader."""
    procs: dict[int, psutil.Process] = dict(cp._seen)
    for p in _group_members(pgid):
        procs.setdefault(p.pid, p)
    try:
        procs.setdefault(cp.pid, psutil.Process(cp.pid))
    except psutil.NoSuchProcess:
        pass
    return procs


def _sigterm(cp: CaseProcess, pgid: int, procs: dict[int, psutil.Process], grace_s: float, poll_s: float) -> None:
    """SIGTERM the group and every descendant that left it; wait up to ``grace_s`` for all to be gone."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs.values():  # descendants that left the group (setsid) get the signal too
        try:
            if p.pid != cp.pid and os.getpgid(p.pid) != pgid:
                p.terminate()
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _proc(cp).poll()  # reap the leader (a zombie counts as gone)
        for p in _group_members(pgid):
            procs.setdefault(p.pid, p)
        if not any(alive(p) for p in procs.values()):
            break
        time.sleep(poll_s)


def _sigkill(cp: CaseProcess, pgid: int, procs: dict[int, psutil.Process], kill_wait_s: float,
             poll_s: float) -> None:
    """SIGKILL the group and every known process; wait up to ``kill_wait_s`` for them to vanish."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs.values():
        try:
            p.kill()
        except psutil.Error:
            pass
    end = time.monotonic() + kill_wait_s
    while time.monotonic() < end and any(alive(p) for p in procs.values()):
        _proc(cp).poll()
        time.sleep(poll_s)


def stop_tree(cp: CaseProcess, port: int | None, *, grace_s: float, kill_wait_s: float = 5.0,
              poll_s: float = 0.05) -> StopReport:
    """Stop the server's whole tree: SIGTERM group, wait ``grace_s``, SIGKILL what is left, verify.

    Args:
        cp: the started server.
        port: its port (checked free at the end); None = not checked (reported free).
        grace_s: seconds every process gets after SIGTERM.
        kill_wait_s: seconds to wait for SIGKILLed processes to vanish.

    Returns:
        The ``StopReport``; ``left_after_kill`` lists survivors (never expected).
    """
    t0 = time.monotonic()
    pgid = cp.pid
    proc = _proc(cp)
    track(cp)
    exited_before = proc.poll() is not None
    procs = _tree(cp, pgid)
    _sigterm(cp, pgid, procs, grace_s, poll_s)
    proc.poll()
    left_term = tuple(sorted(_describe(p) for p in procs.values() if alive(p)))
    escalated = bool(left_term)
    if escalated:
        _sigkill(cp, pgid, procs, kill_wait_s, poll_s)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    left_kill = tuple(sorted(_describe(p) for p in procs.values() if alive(p)))
    cp.__exit__(None, None, None)  # closes the log; kills anything it still tracks
    free = True if port is None else port_is_free(port)
    return StopReport(processes_seen=len(procs), server_exited_before_stop=exited_before, sigterm_sent=True,
                      escalated_to_sigkill=escalated, left_after_sigterm=left_term, left_after_kill=left_kill,
                      port_free=free, teardown_s=time.monotonic() - t0)
