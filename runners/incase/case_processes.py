"""Find and end the processes of a case, wherever they went: token, runner id, pid files.

What is modelled: every process of a case carries a per-case token in its environment
(``OFFLOAD_CASE_TOKEN``, a fresh UUID4 hex), inherited by every descendant, even one that
called ``setsid`` and was re-parented, and the launching runner's id
(``OFFLOAD_CASE_RUNNER=<pid>:<boot id>:<start ticks>``, unique even across pid reuse and
immune to wall-clock steps, see :func:`runner_id`). From these:
``end_case_processes`` (one case's token), ``end_orphaned_cases`` (cases whose runner is
dead, e.g. after ``kill -9``), ``end_recorded_cases`` (the pid files a run keeps under
``processes/``, read at ``resume=``); ``end_processes`` SIGKILLs, waits and reaps.

What is deliberately not modelled: launching and waiting (``runners.incase.process_group``). A
descendant that clears its environment *and* leaves the tree while the runner is
SIGKILLed is beyond reach (documented limit).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

import psutil

CASE_TOKEN_ENV = "OFFLOAD_CASE_TOKEN"
"""Environment variable holding the per-case token (a fresh UUID4 hex) in every process of a case."""
CASE_RUNNER_ENV = "OFFLOAD_CASE_RUNNER"
"""Environment variable naming the launching runner (``runner_id``)."""

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _start_ticks(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (``starttime``: clock ticks since boot; proc(5)).

    Raises:
        psutil.NoSuchProcess: no process ``pid`` (or its stat file could not be read).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    return stat.rsplit(")", 1)[1].split()[19]  # after "pid (comm)": field 3 is index 0, so 22 is index 19


def runner_id(pid: int | None = None) -> str:
    """``"<pid>:<boot id>:<start ticks>"`` of a process (default: this one), from ``/proc`` (Linux).

    Unique even across pid reuse (the kernel's start time of the process, in clock ticks since boot,
    and the boot's UUID). Not ``psutil.Process.create_time()``: that adds the boot time read from
    ``/proc/stat``'s ``btime``, which moves when the wall clock is stepped (NTP, a VM snapshot or
    fork). Seen here: after a step ("random: crng reseeded due to virtual machine fork" in the kernel
    log) a later runner read another live runner's id differently, took it for dead and SIGKILLed
    its case (``end_orphaned_cases``). Where ``/proc`` has no boot id (not Linux), the psutil start
    time stands in (2 decimals), with that weakness.

    Raises:
        psutil.NoSuchProcess: no process ``pid``.
    """
    pid = os.getpid() if pid is None else pid
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return f"{pid}:{psutil.Process(pid).create_time():.2f}"
    return f"{pid}:{boot}:{_start_ticks(pid)}"


def _runner_alive(rid: str) -> bool:
    pid_text = rid.partition(":")[0]
    try:
        return runner_id(int(pid_text)) == rid
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def case_environment(env: Mapping[str, str], token: str | None = None) -> dict[str, str]:
    """``env`` plus the case token and this runner's id (``CASE_TOKEN_ENV``, ``CASE_RUNNER_ENV``)."""
    out = dict(env)
    out[CASE_TOKEN_ENV] = token or uuid.uuid4().hex
    out[CASE_RUNNER_ENV] = runner_id()
    return out


def _env_of(proc: psutil.Process) -> dict[str, str] | None:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def processes_where(pred: Any) -> list[psutil.Process]:
    """Live processes of this user (not this one) whose environment satisfies ``pred(env)``."""
    me = os.getpid()
    out = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        env = _env_of(proc)
        if env is not None and pred(env):
            out.append(proc)
    return out


def end_processes(procs: Iterable[psutil.Process], *, wait_s: float = 5.0) -> list[int]:
    """SIGKILL every process, wait until all are gone, reap those that are our children.

    Returns:
        PIDs that were alive and got the signal.
    """
    killed, procs = [], list(procs)
    for p in procs:
        if alive(p):
            try:
                p.kill()
                killed.append(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    wait_gone(procs, timeout_s=wait_s)
    reap_children([p.pid for p in procs])
    return killed


def reap_children(pids: Iterable[int]) -> None:
    """``waitpid(WNOHANG)`` each pid that is a dead child of this process (adopted orphans left as zombies)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def end_case_processes(token: str) -> list[int]:
    """End every process whose environment carries ``OFFLOAD_CASE_TOKEN=token``; returns their PIDs."""
    return end_processes(processes_where(lambda env: env.get(CASE_TOKEN_ENV) == token))


def end_orphaned_cases() -> list[int]:
    """End every case process (any run) whose launching runner is no longer alive; returns their PIDs.

    A case process carries ``OFFLOAD_CASE_RUNNER`` (:func:`runner_id`); when no process
    with that pid and start time exists, the runner died (``kill -9``) and the case
    process is a leftover.
    """
    return end_processes(processes_where(
        lambda env: CASE_TOKEN_ENV in env and not _runner_alive(env.get(CASE_RUNNER_ENV, ""))))


def end_recorded_cases(directory: Path) -> list[int]:
    """End what the pid files under ``directory`` (``<run>/processes``) name, then delete the files.

    Every process carrying a recorded token is killed, unless its recorded runner
    (``runner``: its :func:`runner_id`) is still alive: a live runner's case is never
    ended (its pid file is left too). A recorded process group is signalled only while
    its leader still carries the token (a reused pgid is left alone).

    Returns:
        PIDs that were ended.
    """
    ended: list[int] = []
    for pid_file in sorted(Path(directory).rglob("*.json")) if Path(directory).is_dir() else []:
        try:
            rec = json.loads(pid_file.read_text())
            token = str(rec["token"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _runner_alive(str(rec.get("runner", ""))):
            continue
        ended += end_processes(processes_where(
            lambda env, t=token: env.get(CASE_TOKEN_ENV) == t and not _runner_alive(env.get(CASE_RUNNER_ENV, ""))))
        pid_file.unlink(missing_ok=True)
    return ended



def alive(p: psutil.Process) -> bool:
    """Running and not a zombie (a killed orphan is a zombie until init reaps it: it holds nothing)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(procs: list[psutil.Process], timeout_s: float, poll_s: float = 0.02) -> None:
    """Wait until every process has exited (zombies count as exited), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = [p for p in left if alive(p)]
