"""One writer per run directory: the runner that creates or resumes a run holds its lock for life.

What is modelled: ``RunLock.acquire`` takes an exclusive, non-blocking ``flock`` on
``<run>/runner.lock`` (created empty once, never removed: removing a locked file would let a
second runner lock a new inode beside the first). The kernel releases the lock when its holder
exits, whatever kills it (SIGKILL included), so a free lock means no live writer. The holder
then writes ``<run>/runner.json`` (``results_schema.records.run_owner.RunnerHolder``: host, pid,
process start time, command) and appends the same record to ``runner-history.jsonl``. A
``runner.json`` found beside a free lock names a holder that died without releasing it: the
new holder records ``took_over`` with that holder as ``previous``. A clean exit removes
``runner.json`` (``release``), so the next runner records ``resumed``.

A second runner on a held run refuses with exit 2 naming the holder (``RunnerError``); a
lock whose ``runner.json`` names a live process on this host is refused as well (the
lock file was replaced under a live runner). Ray runs: the driver (the runner process) holds
the lock; Ray workers never touch the run directory's lock.

What is deliberately not modelled: locks across hosts sharing a network file system (``flock``
there is as reliable as the file system's lock support); waiting for a lock (refused at once).
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from results_schema.codec.io import append_jsonl, read_json, write_json
from results_schema.records.run_owner import (HISTORY_FILE, HOLDER_FILE, LOCK_FILE, Acquisition, PreviousHolder,
                                      RunnerHolder)
from runners.errors import EXIT_CONFIG, RunnerError


def _holder_text(h: RunnerHolder | None) -> str:
    if h is None:
        return "a runner that has not written runner.json yet"
    return (f"runner pid {h.pid} on host {h.host} (since {h.acquired_at}; command: "
            f"{' '.join(h.command)})")


def read_holder(run_dir: Path) -> RunnerHolder | None:
    """``<run>/runner.json``, or None when absent or unreadable (a holder writing it right now)."""
    try:
        return read_json(run_dir / HOLDER_FILE, RunnerHolder)
    except (OSError, ValueError):
        return None


def holder_alive(h: RunnerHolder) -> bool:
    """True when ``h`` is a process of this host that is still running (same pid and start time)."""
    if h.host != socket.gethostname():
        return False
    try:
        return abs(psutil.Process(h.pid).create_time() - h.process_start_time_s) < 0.01
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class RunLock:
    """The lock of one run directory, held by this process (``acquire`` once, ``release`` at exit)."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.run_dir: Path | None = None
        self.holder: RunnerHolder | None = None

    def acquire(self, run_dir: Path, acquisition: Acquisition, console: Any = None) -> RunnerHolder:
        """Take the lock of ``run_dir`` or refuse; record this runner as its holder.

        Args:
            run_dir: an existing run directory.
            acquisition: ``created`` (a new run) or ``resumed``; becomes ``took_over`` when a
                dead holder's ``runner.json`` is found.
            console: where the takeover is announced (None: not printed).

        Returns:
            This runner's ``RunnerHolder`` record.

        Raises:
            RunnerError: (config, exit 2) another runner holds the lock (named), the lock file
                cannot be opened (named, with the OS error), or ``runner.json`` names a live
                runner although the lock is free.
        """
        lock_path = run_dir / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RunnerError(f"config: run directory {run_dir}: cannot open its lock file {LOCK_FILE} "
                              f"({exc.strerror or exc}); a run directory must be writable", EXIT_CONFIG) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RunnerError(f"run directory {run_dir} is in use by {_holder_text(read_holder(run_dir))}; "
                              "one runner per run: wait for it to finish, or stop it and resume", EXIT_CONFIG) from None
        previous = read_holder(run_dir)
        if previous is not None and holder_alive(previous) and previous.pid != os.getpid():
            os.close(fd)
            raise RunnerError(f"run directory {run_dir}: its lock is free but runner.json names the live "
                              f"{_holder_text(previous)}; refusing to write beside it", EXIT_CONFIG)
        self.fd, self.run_dir = fd, run_dir
        if previous is not None:
            acquisition = "took_over"
        me = psutil.Process()
        holder = RunnerHolder(
            host=socket.gethostname(), pid=os.getpid(), process_start_time_s=round(me.create_time(), 2),
            command=(sys.executable, *sys.argv), acquired_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            acquisition=acquisition,
            previous=None if previous is None else PreviousHolder(
                host=previous.host, pid=previous.pid, process_start_time_s=previous.process_start_time_s,
                acquired_at=previous.acquired_at))
        write_json(run_dir / HOLDER_FILE, holder)
        append_jsonl(run_dir / HISTORY_FILE, holder)
        self.holder = holder
        if previous is not None and console is not None:
            console.print(f"run lock: took over {run_dir} from {_holder_text(previous)}, which is gone "
                          "(it died holding the lock); recorded in runner-history.jsonl", markup=False)
        return holder

    def release(self) -> None:
        """Remove ``runner.json`` (a clean exit) and unlock; a no-op when not held."""
        if self.fd is None:
            return
        assert self.run_dir is not None
        (self.run_dir / HOLDER_FILE).unlink(missing_ok=True)
        os.close(self.fd)  # closing the only descriptor releases the flock
        self.fd = None

    def check_free(self, run_dir: Path) -> None:
        """Refuse (exit 2) when another runner holds ``run_dir``'s lock, without taking it or writing anything.

        Raises:
            RunnerError: (config) the lock is held, named.
        """
        try:
            fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise RunnerError(f"config: run directory {run_dir}: cannot open {LOCK_FILE} ({exc.strerror or exc})",
                              EXIT_CONFIG) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RunnerError(f"run directory {run_dir} is in use by {_holder_text(read_holder(run_dir))}; "
                              "one runner per run: wait for it to finish, or stop it and resume", EXIT_CONFIG) from None
        finally:
            os.close(fd)
