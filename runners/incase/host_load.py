"""Foreign work on the host while a case measures: CPU time used outside the case and the runner.

What is modelled: at the start and the end of a case's measured window, one reading of

* the host's busy CPU time: ``/proc/stat``'s aggregate ``cpu`` line, every field but ``idle`` and
  ``iowait`` (``user nice system irq softirq steal``; ``guest`` / ``guest_nice`` are already inside
  ``user`` / ``nice``, proc(5)), in clock ticks (``SC_CLK_TCK``), and its ``steal`` field alone
  (time a hypervisor gave this VM's vCPUs to others);
* the case's own CPU time: its process and every live descendant (``psutil``: user + system), so the
  engine core, whether in the case process or a child, counts as the case;
* the runner's own CPU time: the case's parent process (the runner, or the executor's worker that
  started it), itself only: its other children are other cases, which are foreign work.

``foreign_cpu_s`` = host busy - case - runner over the window (clamped at 0: the readings are not one
atomic snapshot, so a quiet host can read a few ticks below zero); ``foreign_cores`` = that over the
window's wall time: how many cores' worth of other work shared the host on average.

A case is ``contended`` when ``foreign_cores`` or the steal fraction exceeds its limit
(``results_schema.records.host_load.is_contended``: the rule, its limits and why they are what they are).

What is deliberately not modelled: memory bandwidth or cache contention without CPU time (another
process's DMA), and which process the foreign work came from; hosts without ``/proc/stat`` record
nothing (``read_host`` returns None) rather than a guess.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from results_schema.records.host_load import CONTENDED_CORES, CONTENDED_STEAL, HostLoad, is_contended

__all__ = ["CONTENDED_CORES", "CONTENDED_STEAL", "HostReading", "WindowLoad", "read_host", "window_load"]

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class HostReading:
    """One reading: monotonic time (s), host busy and steal CPU (s), the case tree's and the runner's CPU (s)."""

    wall_s: float
    host_busy_s: float
    host_total_s: float
    steal_s: float
    case_s: float
    runner_s: float


@dataclass(frozen=True)
class WindowLoad:
    """The host's load over a measured window (differences of two ``HostReading``; all seconds of CPU time)."""

    wall_s: float
    host_busy_cpu_s: float
    case_cpu_s: float
    runner_cpu_s: float
    foreign_cpu_s: float
    steal_cpu_s: float
    host_cpu_s: float
    cores: int

    @property
    def foreign_cores(self) -> float:
        """Foreign CPU time over wall time: other work's average number of busy cores."""
        return self.foreign_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steal_fraction(self) -> float:
        """Steal over the host's total CPU time in the window (0 when none elapsed)."""
        return self.steal_cpu_s / self.host_cpu_s if self.host_cpu_s > 0 else 0.0

    @property
    def contended(self) -> bool:
        """Foreign work above ``CONTENDED_CORES`` or steal above ``CONTENDED_STEAL`` (``is_contended``)."""
        return is_contended(self.foreign_cores, self.steal_fraction)

    def record(self) -> HostLoad:
        """The ``BenchRecord.host_load`` of this window (CPU seconds clamped at 0, limits recorded)."""
        return HostLoad(wall_s=max(0.0, self.wall_s), host_busy_cpu_s=max(0.0, self.host_busy_cpu_s),
                        case_cpu_s=max(0.0, self.case_cpu_s), runner_cpu_s=max(0.0, self.runner_cpu_s),
                        foreign_cpu_s=self.foreign_cpu_s, foreign_cores=self.foreign_cores,
                        steal_cpu_s=max(0.0, self.steal_cpu_s), steal_fraction=min(1.0, self.steal_fraction),
                        host_cores=self.cores, contended_cores_limit=CONTENDED_CORES,
                        contended_steal_limit=CONTENDED_STEAL, contended=self.contended)


def _proc_stat(text: str, tick_s: float) -> tuple[float, float, float]:
    """``(busy, total, steal)`` seconds from ``/proc/stat``'s text.

    Raises:
        ValueError: no aggregate ``cpu`` line with at least 4 fields.
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            fields = [int(x) for x in parts[1:]]
            if len(fields) < 4:
                break
            fields += [0] * (8 - len(fields))
            user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
            busy = user + nice + system + irq + softirq + steal
            return busy * tick_s, (busy + idle + iowait) * tick_s, steal * tick_s
    raise ValueError("/proc/stat has no aggregate 'cpu' line with user, nice, system and idle fields")


def _tree_cpu_s(pid: int) -> float:
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # exited between listing and reading: its time is gone with it
            continue
        total += t.user + t.system
    return total


def _own_cpu_s(pid: int) -> float:
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


def read_host(case_pid: int | None = None, runner_pid: int | None = None,
              proc_stat: Path = PROC_STAT) -> HostReading | None:
    """One reading for the case ``case_pid`` (default: this process) and its runner (default: its parent).

    Returns None where ``proc_stat`` does not exist (not Linux).
    """
    if not proc_stat.is_file():
        return None
    case_pid = os.getpid() if case_pid is None else case_pid
    runner_pid = os.getppid() if runner_pid is None else runner_pid
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    wall = time.monotonic()
    busy, total, steal = _proc_stat(proc_stat.read_text(), tick_s)
    return HostReading(wall_s=wall, host_busy_s=busy, host_total_s=total, steal_s=steal,
                       case_s=_tree_cpu_s(case_pid), runner_s=_own_cpu_s(runner_pid))


def window_load(start: HostReading | None, end: HostReading | None, cores: int | None = None) -> WindowLoad | None:
    """The load between two readings (None when either is missing)."""
    if start is None or end is None:
        return None
    busy = end.host_busy_s - start.host_busy_s
    case = end.case_s - start.case_s
    runner = end.runner_s - start.runner_s
    return WindowLoad(wall_s=end.wall_s - start.wall_s, host_busy_cpu_s=busy, case_cpu_s=case, runner_cpu_s=runner,
                      foreign_cpu_s=max(0.0, busy - case - runner), steal_cpu_s=end.steal_s - start.steal_s,
                      host_cpu_s=end.host_total_s - start.host_total_s, cores=cores or os.cpu_count() or 1)
