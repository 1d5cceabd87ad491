"""The cases a plan holds and how one of them is launched: ``PhaseCase``, ``ScheduledCase``, ``LaunchSpec``.

What is modelled: plain, frozen data. A ``PhaseCase`` is one case of one phase (its offload
parameters, effective workload and runtime, process limits); a ``ScheduledCase`` is one process
to launch (a case, its repeat, its position); a ``LaunchSpec`` is everything needed to start that
process (argv, environment, files, limits; picklable, it travels to Ray workers). Every runner
package but ``incase`` reads these classes (a module beside the layered packages, so that
``planning``, which knows the case kinds, can sit above the ``outcome`` and ``launching`` they use).

What is deliberately not modelled: building them (``runners.planning.plan`` expands and schedules
the cases with the fields of each case's kind, ``runners.kinds``; the kind builds the argv,
``runners.launching.case_command`` the environment) or running them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from conf.schema_matrix import ServingConfig
from conf.schema_stack import RuntimeConfig, WorkloadConfig
from results_schema.records.base import Implementation, OffloadBackend
from results_schema.records.inprocess import InProcessDesign


@dataclass(frozen=True)
class PhaseCase:
    """One case of one phase (all repeats share it).

    Attributes:
        phase: phase name (key of ``phases``).
        label: unique within the phase; names log/evidence/record files.
        implementation: ``baseline``, ``current``, ``official``, ``sync``, ``overlay``.
        group_size, num_in_group, prefetch_step, params, backend: offload parameters.
        kind: phase kind, the name of a registered case kind (``runners.kinds.registry``: ``throughput``, ``ttft``,
            ``stability``, ``accuracy``, ``serving``); ``runners.kinds.registry.kind_of`` gives its object.
        repeats: how many times the case runs.
        expect_error: regex the case's failure must match (expected failure), or None.
        engine_validates: the bench process skips its offload pre-check (``runners.incase.engine_path``).
        workload: the phase's effective workload (the run's, with the phase's overrides).
        runtime: the phase's effective runtime (its own, else the run's).
        timeout_s, kill_grace_s, cooldown_s: process limits of the phase.
        accuracy_tasks: tasks for accuracy phases (one process evaluates all of them).
        accuracy_limit: first N rows per task (smoke accuracy runs), None = all rows.
        accuracy_manifest: dataset manifest of accuracy phases (as configured; resolved by the runner).
        accuracy_protocol: registered accuracy protocol of accuracy phases (None for other kinds).
        accuracy_model: accuracy phases: model directory loaded instead of the run's (as configured), None = the run's.
        fault: negative-control fault applied in the case process (``offload.faults``), None = none.
        step_delay_ms: speed control (``offload.controls``; serving and throughput phases): ms slept before
            every forward of a baseline's model; 0.0 = none.
        max_accuracy_drop: accuracy phases: tolerance of the verifier's drop rule (fraction of accuracy, [0, 1]).
        serving: the phase's ``serving`` settings for ``kind=serving``, else None.
        in_process: the in-process design (``abba``, ``aa``, ``bb``: ``offload.inprocess``), None = a plain case.
        timed: the case's timings are its result (placement kind ``performance``: under Ray's ``per_node``
            sharing one such case per node at a time); False for accuracy cases (outputs, not timings).
    """

    phase: str
    label: str
    implementation: Implementation
    group_size: int
    num_in_group: int
    prefetch_step: int
    params: tuple[str, ...]
    backend: OffloadBackend
    kind: str
    repeats: int
    expect_error: str | None
    workload: WorkloadConfig = field(hash=False, compare=False)
    runtime: RuntimeConfig = field(hash=False, compare=False)
    timeout_s: float
    kill_grace_s: float
    cooldown_s: float
    accuracy_tasks: tuple[str, ...] = ()
    accuracy_limit: int | None = None
    accuracy_manifest: str | None = None
    accuracy_protocol: str | None = None
    max_accuracy_drop: float = 0.0
    serving: ServingConfig | None = field(default=None, hash=False, compare=False)
    engine_validates: bool = False
    accuracy_model: str | None = None
    fault: str | None = None
    step_delay_ms: float = 0.0
    timed: bool = True
    in_process: InProcessDesign | None = None

    @property
    def offload_requested(self) -> bool:
        """True when the case asks an offloader to move at least one layer."""
        return self.implementation != "baseline" and self.group_size > 0 and self.num_in_group > 0

    @property
    def runtime_name(self) -> str:
        return self.runtime.name


@dataclass(frozen=True)
class ScheduledCase:
    """One process to launch: a case and its repeat, at a position in the run."""

    index: int
    case: PhaseCase
    repeat: int

    @property
    def key(self) -> tuple[str, str, int]:
        """``(phase, label, repeat)``: the identity used by resume."""
        return (self.case.phase, self.case.label, self.repeat)

    @property
    def stem(self) -> str:
        """File stem of this process's log / evidence / record: ``<label>-r<repeat>``."""
        return f"{self.case.label}-r{self.repeat}"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one case process (picklable: travels to Ray workers)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: str
    evidence_path: str
    record_path: str
    timeout_s: float
    kill_grace_s: float
    cooldown_s: float
    accelerator: str | None
    pid_file: str | None = None
    """Kept while the case runs (``runners.incase.case_processes.end_recorded_cases`` ends leftovers at resume)."""
    record_env: tuple[str, ...] = ()
    """The runtime's declared env names, recorded in the case log header besides the allow-list."""
