"""What one case process's memory and threads looked like while it measured: candidates of process-level noise.

What is modelled (``ProcessState``, ``BenchRecord.process_state``): read by ``runners.incase.process_state`` in the
bench process around its measured rounds: the transparent-huge-page share of its anonymous memory
(``AnonHugePages`` of ``/proc/self/smaps_rollup``, after the rounds), its minor and major page faults during the
rounds (``resource.getrusage(RUSAGE_SELF)``, difference over the window), the CPUs it and each of its threads may
run on (``os.sched_getaffinity`` and ``Cpus_allowed_list`` of ``/proc/self/task/*/status``), and the host's THP
mode (``/sys/kernel/mm/transparent_hugepage/enabled``). On a runtime whose engine core runs in a child process
(``VLLM_ENABLE_V1_MULTIPROCESSING`` not ``0``) these describe the bench process only, not the engine's.

Why: a process is one sample of memory layout and placement (Mytkowicz et al., ASPLOS 2009); recording these per
process lets an experiment that varies them on purpose name which one moves the between-process variance.

What is deliberately not modelled: the offloader's buffer addresses and alignment (its evidence, not this
record), cache-set conflicts, and any judgement (analysis).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from results_schema.records.base import NonNegInt, StrictModel


class ProcessState(StrictModel):
    """Memory and thread placement of one bench process over its measured rounds (see the module docstring)."""

    anon_huge_pages_bytes: NonNegInt | None = Field(
        description="AnonHugePages of /proc/self/smaps_rollup after the measured rounds (bytes); null where unreadable.")
    anon_bytes: NonNegInt | None = Field(
        description="Anonymous of /proc/self/smaps_rollup after the measured rounds (bytes); null where unreadable.")
    minor_faults: NonNegInt = Field(description="Minor page faults of this process during the measured rounds.")
    major_faults: NonNegInt = Field(description="Major page faults of this process during the measured rounds.")
    cpus_allowed: str = Field(description="CPUs the process may run on (os.sched_getaffinity), as a list '0-1'.")
    thread_cpus_allowed: dict[str, NonNegInt] = Field(
        description="Cpus_allowed_list of each thread of the process after the rounds -> how many threads have it.")
    thp_enabled: Literal["always", "madvise", "never"] | None = Field(
        description="The host's transparent huge page mode (the bracketed word of "
                    "/sys/kernel/mm/transparent_hugepage/enabled); null where absent.")
