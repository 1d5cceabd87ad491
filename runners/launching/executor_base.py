"""What every executor shares: launching a case from its ``runners.cases.LaunchSpec``, its placement record.

What is modelled: ``launch_case`` (``runners.incase.process_group.run_case_process`` of a spec),
and the ``CasePlacement`` line appended to ``<run_dir>/<phase>-placements.jsonl`` for every
attempt (node, device, start/end wall time, sharing rule, outcome).

What is deliberately not modelled: where a case runs (``runners.launching.executors``,
``runners.launching.ray_scheduling``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from conf.choices import NodeFailureAction, PerformanceSharing
from results_schema.records.base import ExecutorKind
from results_schema.codec.io import append_jsonl
from results_schema.records.placement import CasePlacement, PlacementOutcome, Sharing
from runners.incase.process_group import ProcessOutcome, run_case_process
from runners.cases import LaunchSpec, ScheduledCase

SHARING_MODES = tuple(m.value for m in PerformanceSharing)
NODE_FAILURE_ACTIONS = tuple(a.value for a in NodeFailureAction)


OnDone = Callable[[ScheduledCase, LaunchSpec, ProcessOutcome], bool]
"""Called once per finished case; returns False to stop launching further cases."""


def launch_case(spec: LaunchSpec) -> ProcessOutcome:
    """Run the case process of ``spec`` to its end (``runners.incase.process_group.run_case_process``)."""
    return run_case_process(spec.argv, spec.env, Path(spec.log_path), Path(spec.cwd), timeout_s=spec.timeout_s,
                            kill_grace_s=spec.kill_grace_s, pid_file=Path(spec.pid_file) if spec.pid_file else None,
                            record_env=spec.record_env)


def case_kind(sc: ScheduledCase) -> Literal["performance", "accuracy"]:
    """The placement kind: ``performance`` when the case's timings are its result (``PhaseCase.timed``, set by
    its case kind), else ``accuracy`` (outputs, not timings)."""
    return "performance" if sc.case.timed else "accuracy"


def append_placement(run_dir: Path | None, placement: CasePlacement) -> None:
    """Append ``placement`` to ``<run_dir>/<phase>-placements.jsonl`` (nothing when ``run_dir`` is None)."""
    if run_dir is None:
        return
    append_jsonl(run_dir / f"{placement.phase}-placements.jsonl", placement)


def placement(sc: ScheduledCase, *, attempt: int, executor: ExecutorKind, sharing: Sharing,
              info: Mapping[str, Any], outcome: PlacementOutcome = "finished",
              cause: str | None = None) -> CasePlacement:
    """The ``CasePlacement`` of one attempt.

    ``info``: where and when it ran, as every executor writes it: ``hostname``, ``node_id``, ``node_ip`` (None
    when unknown), ``device``, ``accelerator_ids``, ``start_unix_s`` / ``end_unix_s``, ``times_from`` (``node``
    or ``driver``: whose clock) and ``pid`` (None when no process ran).
    """
    c = sc.case
    return CasePlacement(phase=c.phase, label=c.label, implementation=c.implementation,
                         repeat=sc.repeat, attempt=attempt, kind=case_kind(sc), executor=executor, sharing=sharing,
                         hostname=info["hostname"], node_id=info["node_id"], node_ip=info["node_ip"],
                         device=info["device"], accelerator_ids=tuple(info["accelerator_ids"]),
                         start_unix_s=info["start_unix_s"], end_unix_s=max(info["end_unix_s"], info["start_unix_s"]),
                         times_from=info["times_from"], outcome=outcome, cause=cause, pid=info["pid"])
