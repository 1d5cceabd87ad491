"""Schema of ``sequential-decisions.jsonl``: every look of a sequential throughput phase, as the runner took it.

What is modelled: one line per look (``LookDecision``), appended with fsync before the next block starts
(``runners.orchestration.sequential``): the phase, the design it ran under (looks, target, alpha, spending, pairing:
which interval every look used), the
look's number, its blocks (processes per arm at the look), its spent alpha and confidence, every label looked at
with its verdict (``open`` or a stopping verdict: ``slower``, ``faster``, ``equivalent``, or ``inconclusive`` at
the budget with the MDE it reached), its interval and the reason in words, and the blocks the look adds for the
labels still open (``next_blocks``; 0 when the phase is done). A resume reads these lines and continues the same
sequence; ``analysis validate`` recomputes every look from the recorded processes
(``analysis.comparison.sequential``) and fails where a recorded decision differs, or where a line's design, baseline
or first labels are not what the run declared (``analysis.comparison.sequential_check``).

What is deliberately not modelled: the statistics (``analysis.comparison.sequential``), the processes' records
(``<phase>-runs.jsonl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Mapping, Sequence

from pydantic import Field

from results_schema.records.base import NonNegInt, SchemaVersion, StrictModel
from results_schema.records.dispatch import FileKind
from results_schema.codec.io import read_jsonl
from results_schema.records.plan import PlannedCase, PlannedPhase, RunPlan

FILE_NAME = "sequential-decisions.jsonl"
"""File name of the look lines inside a run directory."""

LookVerdictName = Literal["open", "slower", "faster", "equivalent", "inconclusive"]
SpendingName = Literal["pocock", "obrien_fleming"]
"""The alpha-spending functions a design may name (Lan and DeMets 1983): Pocock-type and O'Brien-Fleming-type
(``analysis.comparison.sequential.spent_alpha``); ``results_schema.rules.sequential_rule.SPENDING`` is this set."""
PairingName = Literal["none", "block"]
"""The interval every look uses; ``results_schema.rules.sequential_rule.PAIRING`` is this set."""

DEFAULT_ALPHA = 0.05
"""A design's total two-sided alpha over every look where none is named: ``conf.schema_matrix.SequentialConfig.alpha``'s
default, ``analysis.comparison.sequential.SequentialDesign``'s, and every choose run's verify series (``VerifyDesign``)."""
DEFAULT_SPENDING: SpendingName = "pocock"
"""A design's alpha spending where none is named (the same three; Pocock-type: a large cost stops at the first look)."""
DEFAULT_PAIRING: PairingName = "none"
"""A design's pairing where none is named (the same three; a choose run's verify series never names one)."""


class LabelLook(StrictModel):
    """One label at one look."""

    label: str = Field(min_length=1)
    verdict: LookVerdictName = Field(description="open: neither call nor equivalence at this look's level.")
    processes: NonNegInt = Field(description="The label's processes the look used (blocks 1..blocks; paired: those of "
                                              "the complete blocks).")
    reference_processes: NonNegInt = Field(description="The baseline's processes the look used (paired: one per "
                                                        "complete block).")
    ci_low_pct: float | None = Field(description="Interval of (label - baseline) / baseline, percent; null: none.")
    ci_high_pct: float | None
    center_pct: float | None = Field(description="Ratio of geometric means - 1, percent.")
    method: str = Field(description="The interval: Welch t or pooled t (pairing none), paired t (pairing block) "
                                    "(analysis.comparison.verdict_rule); empty without a process on a side.")
    mde_pct: float | None = Field(default=None, description="Inconclusive at the budget: the minimum detectable "
                                                             "cost reached (percent; null: none below 100%).")
    reason: str = Field(description="The look in words (interval, level, why stopped or open).")


class LookLine(StrictModel):
    """What every look line shares, in this field order: which look of which phase, and the design it ran under (a
    throughput phase's ``LookDecision``, a serving phase's ``results_schema.records.serving_looks.ServingLookDecision``;
    never written on its own)."""

    schema_version: SchemaVersion = 1
    phase: str = Field(min_length=1)
    look: int = Field(ge=1, description="1-based look number.")
    blocks: int = Field(ge=1, description="Blocks (processes per arm) the look is taken after.")
    looks: tuple[int, ...] = Field(min_length=1, description="The design's looks (blocks: processes per arm).")
    target_pct: float = Field(gt=0, description="Smallest cost that matters; the equivalence margin (percent).")
    alpha: float = Field(gt=0, lt=1, description="Total two-sided alpha over every look (per label; a serving "
                                                 "label: per cell).")
    spending: SpendingName = Field(description="Alpha-spending function (pocock or obrien_fleming).")
    pairing: PairingName = Field(default=DEFAULT_PAIRING, description="The interval every look uses: none (unpaired "
                                 "t of the label's processes vs the baseline's) or block (paired t of the per-block log "
                                 "ratio over the complete blocks).")
    look_alpha: float = Field(gt=0, lt=1, description="Alpha this look spends; its intervals are at 1 - look_alpha.")

    @property
    def design_values(self) -> tuple[tuple[int, ...], float, float, str, str]:
        """``(looks, target_pct, alpha, spending, pairing)``: the design the line records, in
        ``analysis.comparison.sequential.SequentialDesign``'s argument order."""
        return self.looks, self.target_pct, self.alpha, self.spending, self.pairing


class LookDecision(LookLine):
    """One line of ``sequential-decisions.jsonl`` (module docstring)."""

    baseline: str = Field(min_length=1, description="The reference arm's label.")
    labels: tuple[LabelLook, ...] = Field(description="Every label open before this look.")
    next_blocks: NonNegInt = Field(description="Blocks this look schedules for the labels still open (0: done).")
    first_block: NonNegInt = Field(default=0, description="Blocks of the phase before this look series: its block b "
                                   "is repeat first_block + b - 1 of every arm (0 but in a choose run's verify phase, "
                                   "where each decision starts its own series after the last).")

    @property
    def still_open(self) -> tuple[str, ...]:
        return tuple(x.label for x in self.labels if x.verdict == "open")


FILE_KINDS: list[FileKind] = [FileKind(FILE_NAME, "results_schema.records.sequential:LookDecision", jsonl=True)]
"""Picked up by ``results_schema.records.dispatch`` (``CONTRIBUTING_MODULES``)."""


def series_repeats(values: Mapping[int, float], first_block: int) -> dict[int, float]:
    """``repeat -> value`` of one arm renumbered to its look series (``LookDecision.first_block``): the series' block
    ``b`` (repeat ``first_block + b - 1``) becomes ``b - 1``; repeats before the series are left out."""
    return {r - first_block: v for r, v in values.items() if r >= first_block}


def read_looks(run_dir: Path, phase: str | None = None) -> list[LookDecision]:
    """The run's look lines in order (of ``phase`` when given; none: not a sequential run, or no look yet).

    Raises:
        results_schema.codec.io.RecordError: the first line that does not validate, naming ``path:line``.
    """
    path = Path(run_dir) / FILE_NAME
    lines = read_jsonl(path, LookDecision) if path.is_file() else []
    return [d for d in lines if phase is None or d.phase == phase]


def added_repeats(decisions: Sequence[LookDecision]) -> dict[tuple[str, str], int]:
    """``(phase, label) -> processes`` the looks added beyond the plan (baseline included)."""
    out: dict[tuple[str, str], int] = {}
    for d in decisions:
        for label in (d.baseline, *d.still_open) if d.next_blocks else ():
            out[(d.phase, label)] = out.get((d.phase, label), 0) + d.next_blocks
    return out


def with_looks(plan: RunPlan, decisions: Sequence[LookDecision]) -> RunPlan:
    """``plan`` with the repeats every look added (the run's whole plan; ``analysis.validation`` counts it).

    Raises:
        ValueError: a look names a phase or label the plan does not have.
    """
    add = added_repeats(decisions)
    phases = []
    known = {(p.name, c.label) for p in plan.phases for c in p.cases}
    missing = sorted(set(add) - known)
    if missing:
        raise ValueError(f"sequential looks add processes to {missing}, which plan.json does not have")
    for p in plan.phases:
        cases = tuple(_more(c, add.get((p.name, c.label), 0)) for c in p.cases)
        phases.append(PlannedPhase(name=p.name, kind=p.kind, cases=cases, processes=sum(c.repeats for c in cases)))
    return RunPlan(experiment=plan.experiment, run_id=plan.run_id, phases=tuple(phases),
                   processes=sum(p.processes for p in phases))


def _more(c: PlannedCase, n: int) -> PlannedCase:
    if not n:
        return c
    runs, fails = (0, n) if c.expect_error is not None else (n, 0)
    return c.model_copy(update={"repeats": c.repeats + n, "expected_runs": c.expected_runs + runs,
                                "expected_failures": c.expected_failures + fails})
