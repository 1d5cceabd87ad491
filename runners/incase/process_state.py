"""Read ``results_schema.records.process_state.ProcessState`` around a bench process's measured rounds (Linux).

What is modelled: ``ProcessStateReader.start()`` at the start of the measured window (page-fault counters),
``finish()`` after it (fault difference, ``/proc/self/smaps_rollup``, affinities, THP mode). Missing files
(not Linux) give ``None`` fields or, without ``/proc/self``, no state at all (``finish`` returns None).

What is deliberately not modelled: the engine-core child's state (its own process), judging anything.
"""

from __future__ import annotations

import os
import resource
from collections import Counter
from pathlib import Path

from results_schema.records.process_state import ProcessState

PROC_SELF = Path("/proc/self")
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def cpu_list(cpus: set[int] | list[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``'0-2,5'`` (the kernel's list format)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def smaps_kib(text: str, key: str) -> int | None:
    """The ``key:  N kB`` value of an smaps(_rollup) text in bytes, None when absent."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    return None


def thp_mode(text: str) -> str | None:
    """The bracketed word of ``/sys/kernel/mm/transparent_hugepage/enabled`` (``always [madvise] never``)."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]") and word[1:-1] in ("always", "madvise", "never"):
            return word[1:-1]
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _thread_cpus() -> dict[str, int]:
    seen: Counter[str] = Counter()
    for status in sorted((PROC_SELF / "task").glob("*/status")):
        for line in _read(status).splitlines():
            if line.startswith("Cpus_allowed_list:"):
                seen[line.split(":", 1)[1].strip()] += 1
    return dict(seen)


class ProcessStateReader:
    """Page faults over the measured window, then the memory and placement state after it."""

    def __init__(self) -> None:
        self._faults: tuple[int, int] | None = None

    def start(self) -> None:
        """Take the fault counters at the start of the measured window."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self._faults = (ru.ru_minflt, ru.ru_majflt)

    def finish(self) -> ProcessState | None:
        """The state after the measured window; None without ``/proc/self`` or without ``start``."""
        if self._faults is None or not PROC_SELF.is_dir():
            return None
        ru = resource.getrusage(resource.RUSAGE_SELF)
        rollup = _read(PROC_SELF / "smaps_rollup")
        return ProcessState(
            anon_huge_pages_bytes=smaps_kib(rollup, "AnonHugePages"), anon_bytes=smaps_kib(rollup, "Anonymous"),
            minor_faults=max(0, ru.ru_minflt - self._faults[0]), major_faults=max(0, ru.ru_majflt - self._faults[1]),
            cpus_allowed=cpu_list(os.sched_getaffinity(0)), thread_cpus_allowed=_thread_cpus(),
            thp_enabled=thp_mode(_read(THP_ENABLED)))  # type: ignore[arg-type]
