"""Where a serving case's processes run: the model worker's CPUs alone, the front end and the client beside it.

What is modelled: vLLM's CPU build binds its model worker (``VLLM::Worker``, the process that runs the
forward passes) to some CPUs and reserves the others for the front end (server log: ``OpenMP thread binding
info: ... core ids=[0] ... reserved_cpus=[1]`` on the 2-core host: ``VLLM_CPU_OMP_THREADS_BIND=auto``,
``VLLM_CPU_NUM_OF_RESERVED_CPU``), but it leaves the front-end processes (the API server, the engine core that
waits on the worker) and our benchmark client free to run anywhere. Sampled on that host
with ``ps -eLo psr`` every 0.5 s over 4 baseline servers: the worker ran on CPU 0; the engine core used
about 52% of a CPU on CPU 1; the API server was seen running on CPU 0 in 34 of 95 samples and the client in 18 of
86, where each preempts the pinned worker mid-step (the worker cannot move). A serving benchmark measures
the server, not its client: ``pin_front_end`` moves every thread of every front-end process of the server's
tree, and of this client process, onto the CPUs the worker does not use, once the server is healthy (the
worker is bound by then). The same placement applies to every case, baseline or offload.

The worker is recognised by its binding, not by its name: a process of the tree whose main thread's allowed
CPUs are a strict subset of the client's. Nothing is moved (``Placement.pinned`` False, with the reason)
when no process is bound, or when the worker's CPUs leave none free.

What is deliberately not modelled: NUMA nodes; a worker that binds after the server reports healthy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Placement:
    """The outcome of ``pin_front_end``.

    Attributes:
        pinned: whether the front end and the client were moved.
        worker_pids: processes recognised as the bound model worker.
        worker_cpus: the CPUs they are bound to (sorted).
        front_end_cpus: the CPUs the front end and the client were moved to (empty when not pinned).
        front_end_pids: server-tree processes moved (the worker's excluded), then this client.
        reason: why nothing was moved ("" when pinned).
    """

    pinned: bool
    worker_pids: tuple[int, ...]
    worker_cpus: tuple[int, ...]
    front_end_cpus: tuple[int, ...]
    front_end_pids: tuple[int, ...]
    reason: str = ""

    def line(self) -> str:
        """The case-log line (``SERVING placement: ...``)."""
        if not self.pinned:
            return f"SERVING placement: not pinned ({self.reason})"
        return (f"SERVING placement: model worker pid(s) {list(self.worker_pids)} on CPU(s) {list(self.worker_cpus)}; "
                f"front end pid(s) {list(self.front_end_pids)} (API server, engine core, this client) moved to "
                f"CPU(s) {list(self.front_end_cpus)}")


def _set_all_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (``sched_setaffinity`` acts on one thread; a gone thread is skipped)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended between listing and setting
            pass


def pin_front_end(server_pid: int) -> Placement:
    """Move the server's front end and this client off the model worker's CPUs (module docstring).

    Args:
        server_pid: the API server's PID (its descendants are the engine core and the worker).

    Returns:
        ``Placement`` (never raises for a process that ends meanwhile; such a process is skipped).
    """
    allowed = set(os.sched_getaffinity(0))
    try:
        tree = [psutil.Process(server_pid), *psutil.Process(server_pid).children(recursive=True)]
    except psutil.Error as exc:
        return Placement(False, (), (), (), (), reason=f"server process tree unreadable: {type(exc).__name__}")
    workers: dict[int, set[int]] = {}
    front: list[int] = []
    for p in tree:
        try:
            cpus = set(os.sched_getaffinity(p.pid))
        except OSError:
            continue
        if cpus < allowed:
            workers[p.pid] = cpus
        else:
            front.append(p.pid)
    worker_cpus = set().union(*workers.values()) if workers else set()
    free = allowed - worker_cpus
    if not workers:
        return Placement(False, (), (), (), (), reason=f"no process of the server's tree is bound to a subset of "
                         f"CPUs {sorted(allowed)}")
    if not free:
        return Placement(False, tuple(workers), tuple(sorted(worker_cpus)), (), (),
                         reason=f"the worker's CPUs {sorted(worker_cpus)} leave none free")
    for pid in [*front, os.getpid()]:
        _set_all_threads(pid, free)
    return Placement(True, tuple(workers), tuple(sorted(worker_cpus)), tuple(sorted(free)),
                     (*front, os.getpid()))
