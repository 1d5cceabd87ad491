"""Foreign work on the host over a case's measured window (``BenchRecord.host_load``) and the rule that calls it
contended.

What is modelled: the differences of two readings of the host taken at the start and the end of the measured
rounds (``runners.incase.host_load``): the host's busy CPU time (``/proc/stat``), the case's process tree's, the
runner's own, and steal time; foreign CPU = host busy - case - runner. ``is_contended`` is the one rule, used by
the case process when it records ``contended`` and by this model's validator when it reads it back; the limits
it applied travel with the record, so a record stays valid whatever the defaults become.

Why these limits (``CONTENDED_CORES``, ``CONTENDED_STEAL``): a case of the CPU default runs one GEMM thread and
its engine core (about one core) on a host with few cores, so a quarter core of other work on average can claim a
measurable share of the core it runs on for its whole window; a quiet host reads 0.000-0.004 foreign cores
over a case's window, other work beside it 0.79-1.10, which cost the default's baselines 9-25% of their
throughput (``docs/measurements/host-load-2026-12-04.md``). Foreign CPU time is a proxy: a spin
loop on the other core may cost the case nothing where test suites cost it a quarter of its throughput, and the
record cannot tell which, so the verdicts resting on it are withheld rather than called. Steal above 5% of the
host's CPU time is a hypervisor giving the vCPUs to others for a twentieth of the window.

What is deliberately not modelled: contention without CPU time (memory bandwidth, another process's DMA) and
which process the foreign work came from.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from results_schema.records.base import NonNegFloat, StrictModel, rel_close

__all__ = ["CONTENDED_CORES", "CONTENDED_STEAL", "HostLoad", "is_contended"]

CONTENDED_CORES = 0.25
"""Foreign work above this many cores on average over the window makes a case ``contended``."""
CONTENDED_STEAL = 0.05
"""Steal above this fraction of the host's CPU time over the window makes a case ``contended``."""


def is_contended(foreign_cores: float, steal_fraction: float, *, cores_limit: float = CONTENDED_CORES,
                 steal_limit: float = CONTENDED_STEAL) -> bool:
    """True when foreign work exceeded ``cores_limit`` cores on average or steal exceeded ``steal_limit``.

    Args:
        foreign_cores: foreign CPU seconds / window wall seconds (cores).
        steal_fraction: steal CPU seconds / host CPU seconds (busy + idle + iowait) in the window (0..1).
        cores_limit, steal_limit: the limits (defaults: ``CONTENDED_CORES``, ``CONTENDED_STEAL``).
    """
    return foreign_cores > cores_limit or steal_fraction > steal_limit


class HostLoad(StrictModel):
    """The host's load over one case's measured window (CPU seconds are summed over all cores)."""

    wall_s: NonNegFloat = Field(description="Wall seconds between the two readings (monotonic clock).")
    host_busy_cpu_s: NonNegFloat = Field(
        description="CPU seconds the host spent busy (/proc/stat user+nice+system+irq+softirq+steal) in the window.")
    case_cpu_s: NonNegFloat = Field(
        description="CPU seconds (user + system) of the case process and its live descendants in the window.")
    runner_cpu_s: NonNegFloat = Field(
        description="CPU seconds of the case's parent (the runner or executor worker) itself, in the window.")
    foreign_cpu_s: NonNegFloat = Field(
        description="host_busy_cpu_s - case_cpu_s - runner_cpu_s, at least 0: other work's CPU seconds.")
    foreign_cores: NonNegFloat = Field(description="foreign_cpu_s / wall_s: other work's average busy cores.")
    steal_cpu_s: NonNegFloat = Field(description="/proc/stat steal seconds in the window (0 where not reported).")
    steal_fraction: NonNegFloat = Field(
        description="steal_cpu_s over the host's CPU seconds (busy + idle + iowait) in the window (0..1).")
    host_cores: int = Field(ge=1, description="Logical CPUs of the host (os.cpu_count).")
    contended_cores_limit: NonNegFloat = Field(description="The foreign_cores limit applied (cores).")
    contended_steal_limit: NonNegFloat = Field(description="The steal_fraction limit applied (fraction).")
    contended: bool = Field(description="foreign_cores > contended_cores_limit or steal_fraction > "
                                        "contended_steal_limit (is_contended).")

    @model_validator(mode="after")
    def _check_derived(self) -> "HostLoad":
        want = max(0.0, self.host_busy_cpu_s - self.case_cpu_s - self.runner_cpu_s)
        if not rel_close(self.foreign_cpu_s, want):
            raise ValueError(f"foreign_cpu_s ({self.foreign_cpu_s}) != max(0, host_busy_cpu_s - case_cpu_s - "
                             f"runner_cpu_s) ({want})")
        cores = self.foreign_cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        if not rel_close(self.foreign_cores, cores):
            raise ValueError(f"foreign_cores ({self.foreign_cores}) != foreign_cpu_s / wall_s ({cores})")
        if self.steal_fraction > 1.0:
            raise ValueError(f"steal_fraction ({self.steal_fraction}) > 1")
        want_c = is_contended(self.foreign_cores, self.steal_fraction, cores_limit=self.contended_cores_limit,
                              steal_limit=self.contended_steal_limit)
        if self.contended != want_c:
            raise ValueError(f"contended ({self.contended}) contradicts foreign_cores {self.foreign_cores:.3f} / "
                             f"steal_fraction {self.steal_fraction:.3f} vs limits {self.contended_cores_limit} / "
                             f"{self.contended_steal_limit}")
        return self
