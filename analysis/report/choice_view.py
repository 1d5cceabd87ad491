"""What the reports show of a choose-then-confirm run: its decision lines and predicted-vs-measured points.

What is modelled: ``read_choice_view(run_dir, out_dir)`` reads the run's ``choose-decisions.jsonl``
(``results_schema.records.choice.ChoiceDecision``) and ``<out_dir>/choice.json`` (``ChoiceSummary``, written by
``analysis.model.choice.write_choice``) into a ``ChoiceView``:

* ``points``: every distinct setting of the LAST decision that has predictions (x: its predicted released
  GiB, ``released_bytes / 2**30``; y: its predicted retention with the interval), whether it meets the need;
* ``verified``: every decided setting beside its measurement (``VerifiedPoint.measured_retention``: the verify
  phase's median / its baseline median), placed at the released GiB of its setting;
* ``recommended``: the recommended setting at its measured retention (a measured setting, never a prediction);
* ``ordered_lines``: ``ChoiceSummary.lines`` with the recommendation first.

``measured_choice_lines`` and ``need_differs`` serve ``python -m analysis recommend`` on a choose run.

The HTML section (``analysis.report.html_choice``), the plotly figure and the PNG
(``analysis.report.plots.plot_choice``) draw the same view.

What is deliberately not modelled: computing a decision (``analysis.model.choice``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from results_schema.records.choice import SUMMARY_FILE, ChoiceDecision, ChoiceSummary, PredictedSetting, verify_phase
from results_schema.units import GIB

BAD_MARKS = ("MISSED", "NOT TRUSTED", "NONE", "STOPPED")
"""A decision line holding one of these is marked (red in HTML, yellow on the console)."""
FIRST_PREFIXES = ("recommended", "margin over the runner-up")
"""Lines shown first: the recommendation and its margin over the runner-up."""


@dataclass(frozen=True)
class ChoicePoint:
    """One predicted setting of the drawn decision."""

    group_size: int
    num_in_group: int
    prefetch_step: int
    class_id: int
    released_gib: float
    retention: float
    retention_low: float
    retention_high: float
    predicted_tok_s: float
    meets_need: bool


@dataclass(frozen=True)
class VerifiedMark:
    """A decided (verified) setting: its prediction and its measurement (``measured``: None when not measured)."""

    label: str
    stage: str
    released_gib: float | None
    predicted_retention: float
    retention_low: float
    retention_high: float
    measured: float | None
    within: bool | None

    @property
    def at(self) -> tuple[float, float] | None:
        """``(released GiB, measured retention)`` where it is drawn; None: not measured or its bytes unknown."""
        return None if self.measured is None or self.released_gib is None else (self.released_gib, self.measured)


@dataclass
class ChoiceView:
    """See the module docstring; ``summary`` is None when ``choice.json`` is missing."""

    summary: ChoiceSummary | None
    decisions: list[ChoiceDecision]
    need_gib: float
    drawn_stage: str | None = None
    drawn_form: str | None = None
    half_width_pct: float | None = None
    points: list[ChoicePoint] = field(default_factory=list)
    verified: list[VerifiedMark] = field(default_factory=list)
    recommended: VerifiedMark | None = None

    @property
    def ordered_lines(self) -> list[str]:
        """``ChoiceSummary.lines``, the recommendation (and its margin) first, the others in their order."""
        lines = list(self.summary.lines) if self.summary is not None else []
        first = [x for x in lines if x.startswith(FIRST_PREFIXES)]
        return first + [x for x in lines if x not in first]

    @property
    def missed(self) -> list[VerifiedMark]:
        return [v for v in self.verified if v.within is False]

    def drawn(self) -> list[tuple[VerifiedMark, float, float]]:
        """``(mark, x, y)`` of every verified setting that can be drawn (``VerifiedMark.at``)."""
        return [(v, *v.at) for v in self.verified if v.at is not None]


def is_bad(line: str) -> bool:
    """Whether a decision line reports a miss, an untrusted model or no recommendation."""
    return any(m in line for m in BAD_MARKS)


def _setting(p: PredictedSetting) -> tuple[int, int, int]:
    return p.group_size, p.num_in_group, p.prefetch_step


def choice_view(decisions: Sequence[ChoiceDecision], summary: ChoiceSummary | None) -> ChoiceView:
    """The view of ``decisions`` (at least one) and their summary (see the module docstring)."""
    first = decisions[0]
    view = ChoiceView(summary=summary, decisions=list(decisions), need_gib=first.need_bytes / GIB)
    drawn = next((d for d in reversed(decisions) if d.predictions), None)
    if drawn is not None:
        view.drawn_stage, view.drawn_form, view.half_width_pct = drawn.stage, drawn.form, drawn.half_width_pct
        view.points = [ChoicePoint(p.group_size, p.num_in_group, p.prefetch_step, p.class_id,
                                   p.released_bytes / GIB, p.retention, p.retention_low, p.retention_high,
                                   p.predicted_tok_s, p.released_bytes >= drawn.need_bytes) for p in drawn.predictions]
    released: dict[tuple[int, int, int], int] = {}
    for d in ([drawn] if drawn is not None else []) + list(decisions):  # the drawn decision's bytes first
        for p in d.predictions:
            released.setdefault(_setting(p), p.released_bytes)
    setting_of = {c.label: (c.group_size, c.num_in_group, c.prefetch_step) for d in decisions for c in d.chosen}
    for v in summary.verified if summary is not None else ():
        rb = released.get(setting_of[v.label]) if v.label in setting_of else None
        view.verified.append(VerifiedMark(v.label, v.stage, None if rb is None else rb / GIB, v.predicted_retention,
                                          v.retention_low, v.retention_high, v.measured_retention, v.within_interval))
    rec = summary.recommended if summary is not None else None
    if rec is not None:
        view.recommended = next((v for v in view.verified if v.label == rec.label and v.at is not None), None)
    return view


def read_choice_view(run_dir: Path | str, out_dir: Path | str) -> ChoiceView | None:
    """The view of a choose run (None: ``run_dir`` has no ``choose-decisions.jsonl``, not a choose run).

    Raises:
        RecordError / StrictJSONError: the decision lines or ``choice.json`` do not validate.
    """
    from analysis.model.choice import read_decisions
    from results_schema.codec.io import read_json

    decisions = read_decisions(Path(run_dir))
    if not decisions:
        return None
    path = Path(out_dir) / SUMMARY_FILE
    return choice_view(decisions, read_json(path, ChoiceSummary) if path.is_file() else None)


def measured_choice_lines(run_dir: Path, tables: dict) -> tuple[list[str], str]:
    """A choose run's measured decision and where it comes from: ``<run_dir>/summary/choice.json``'s lines when
    the run wrote it, else computed now from the measurements by the same rule (``analysis.model.choice.decide``,
    as ``write_choice``; nothing is written). ``tables``: ``analysis.report.tables.build``'s.

    Raises:
        ValueError: ``run_dir`` has no decision lines (not a choose run).
    """
    from analysis.model.choice import decide, read_decisions
    from results_schema.codec.io import read_json

    path = Path(run_dir) / "summary" / SUMMARY_FILE
    if path.is_file():
        return list(read_json(path, ChoiceSummary).lines), f"recorded in {path}"
    decisions = read_decisions(Path(run_dir))
    if not decisions:
        raise ValueError(f"{run_dir} has no choose-decisions.jsonl: not a choose run")
    data = tables["data"]
    phase = verify_phase(decisions)
    res = decide(decisions, tables["summary"], data.runs, verify_phase=phase or "",
                 processes_run=len(data.case_runs) + len(data.case_failures), margin_pct=tables["margin_pct"])
    return res.lines, "computed now from its measurements; the run wrote no summary/choice.json"


def need_differs(d: ChoiceDecision, need_gib: float | None, need_kv_gib: float | None) -> str | None:
    """Why an asked need is not the run's own (``d.need_source``, ``d.need_bytes``); None when it is the same need
    (same kind, same bytes as the runner rounds them)."""
    kind, x = ("need_gib", need_gib) if need_gib is not None else ("need_kv_gib", need_kv_gib)
    if x is None:
        return None
    asked = int(round(float(x) * GIB))
    if d.need_source.startswith(kind + "=") and asked == d.need_bytes:
        return None
    return (f"asked {kind}={x:g} ({asked:,} B) differs from this run's need {d.need_source} ({d.need_bytes:,} B): "
            f"the decision above is for the run's own need (a choose run with {kind}={x:g} decides for the asked one)")
