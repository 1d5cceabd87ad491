"""Schema of ``serving-looks.jsonl``: every look of a sequential serving phase, as the runner took it.

What is modelled: one line per look (``ServingLookDecision``), appended with fsync before the next block starts
(``runners.orchestration.serving_sequential``): the phase, the design it ran under (looks, target, alpha, spending,
pairing: always ``block`` for serving), the look's number, its blocks, its spent alpha, the floor baselines every
block runs (``results_schema.rules.floor_rule.is_floor_baseline``), and every offload label looked at (``ServingLabelLook``):
its state (``open``: looked at again; ``conclusive``: every (rate, metric) cell is ``slower``, ``faster`` or
``equivalent``, it stops; ``budget``: the last look, it ends with whatever each cell gives), each cell's verdict,
complete blocks and interval at the look's level, and the reason in words; ``next_blocks``: the blocks the look adds
for the labels still open (0 when the phase is done). A resume reads these lines and continues the same sequence;
the serving validation recomputes every look from the recorded ``ServingRun`` lines
(``analysis.serving.sequential_check``) and holds each line's design to the saved config.

Beside ``sequential-decisions.jsonl`` (``results_schema.records.sequential``, one interval per label) rather than in
it: a serving label's look is a set of cells, and its arms are two or more floor baselines, not one baseline.

What is deliberately not modelled: the statistics (``analysis.serving.sequential``), the processes' records
(``<phase>-serving.jsonl``), the speed control (not looked at: its blocks are fixed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

from pydantic import Field

from results_schema.codec.io import read_jsonl
from results_schema.records.base import NonNegFloat, NonNegInt, StrictModel
from results_schema.records.dispatch import FileKind
from results_schema.records.plan import PlannedPhase, RunPlan
from results_schema.records.sequential import LookLine, _more
from results_schema.records.serving_spec import PosFloat
from results_schema.records.serving_summary import Metric

FILE_NAME = "serving-looks.jsonl"
"""File name of the serving look lines inside a run directory."""

LabelState = Literal["open", "conclusive", "budget"]
CellVerdictName = Literal["slower", "faster", "equivalent", "inconclusive", "withheld"]


class ServingCell(StrictModel):
    """One (rate, metric) of one label at one look."""

    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    metric: Metric = Field(description="The metric; one value per process, its P50.")
    verdict: CellVerdictName = Field(description="analysis.serving.stats.block_verdict at the look's level over "
                                                 "the look's complete blocks; withheld: a process of those blocks "
                                                 "ran this rate beside foreign work.")
    blocks: NonNegInt = Field(description="Complete blocks the cell used (the label and >= 2 floor baselines).")
    ci_low_pct: float | None = Field(description="Paired t interval of (label - baselines) / baselines at the "
                                                 "look's level, percent; null: none.")
    ci_high_pct: float | None
    floor_pct: float | None = Field(description="Widest spread of the floor baselines inside one block (%).")
    margin_pct: NonNegFloat = Field(description="Equivalence margin: the target (%); the floor gates only slower / faster.")


class ServingLabelLook(StrictModel):
    """One offload label at one look."""

    label: str = Field(min_length=1)
    state: LabelState = Field(description="open: a cell is inconclusive or withheld, looked at again; conclusive: "
                                          "every cell slower, faster or equivalent, stopped; budget: the last look.")
    cells: tuple[ServingCell, ...] = Field(description="Every (rate, metric) with a complete block.")
    reason: str = Field(description="The look in words (level, cell tally, why stopped or open).")


class ServingLookDecision(LookLine):
    """One line of ``serving-looks.jsonl`` (module docstring)."""

    # the fields before ``baselines`` are every look line's (``LookLine``); a serving phase pairs by block only
    pairing: Literal["block"] = Field(description="Every look pairs each label process with its block's floor "
                                                  "baselines (the only pairing a serving phase allows).")
    baselines: tuple[str, ...] = Field(min_length=1, description="The floor baselines every block runs.")
    labels: tuple[ServingLabelLook, ...] = Field(description="Every label open before this look.")
    next_blocks: NonNegInt = Field(description="Blocks this look schedules for the labels still open (0: done).")

    @property
    def still_open(self) -> tuple[str, ...]:
        return tuple(x.label for x in self.labels if x.state == "open")


FILE_KINDS: list[FileKind] = [FileKind(FILE_NAME, "results_schema.records.serving_looks:ServingLookDecision",
                                       jsonl=True)]
"""Picked up by ``results_schema.records.dispatch`` (``CONTRIBUTING_MODULES``)."""


def read_serving_looks(run_dir: Path, phase: str | None = None) -> list[ServingLookDecision]:
    """The run's serving look lines in order (of ``phase`` when given; none: no sequential serving phase, or no look
    yet).

    Raises:
        results_schema.codec.io.RecordError: the first line that does not validate, naming ``path:line``.
    """
    path = Path(run_dir) / FILE_NAME
    lines = read_jsonl(path, ServingLookDecision) if path.is_file() else []
    return [d for d in lines if phase is None or d.phase == phase]


def with_serving_looks(plan: RunPlan, decisions: Sequence[ServingLookDecision]) -> RunPlan:
    """``plan`` with the blocks every serving look added (each floor baseline and each label still open gets
    ``next_blocks`` more processes).

    Raises:
        ValueError: a look names a phase or label the plan does not have.
    """
    add: dict[tuple[str, str], int] = {}
    for d in decisions:
        for label in (*d.baselines, *d.still_open) if d.next_blocks else ():
            add[(d.phase, label)] = add.get((d.phase, label), 0) + d.next_blocks
    known = {(p.name, c.label) for p in plan.phases for c in p.cases}
    missing = sorted(set(add) - known)
    if missing:
        raise ValueError(f"serving looks add processes to {missing}, which plan.json does not have")
    phases = []
    for p in plan.phases:
        cases = tuple(_more(c, add.get((p.name, c.label), 0)) for c in p.cases)
        phases.append(PlannedPhase(name=p.name, kind=p.kind, cases=cases, processes=sum(c.repeats for c in cases)))
    return RunPlan(experiment=plan.experiment, run_id=plan.run_id, phases=tuple(phases),
                   processes=sum(p.processes for p in phases))
