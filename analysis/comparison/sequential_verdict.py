"""The verdict of record of a sequential phase: each label's stopping look, recomputed from the recorded processes.

What is modelled: a phase with look lines (``results_schema.records.sequential``, ``docs/sequential.md``) is judged
by its design, never by the fixed 95% rule on all its processes (a fixed 95% interval computed after optional
stopping does not hold its level: a label that ran to the budget has only the last look's alpha increment left).
``sequential_verdicts`` reads the design and the baseline from the phase's first look line and recomputes every
label's looks with ``analysis.comparison.sequential.label_looks`` on its processes in block order (repeat order:
block ``b`` is repeat ``b - 1``) against the baseline's; the recorded verdicts are not trusted here (``analysis
validate`` fails where they differ: ``analysis.comparison.sequential_check``). A label's verdict of record is:

* the verdict of the look that stopped it (``slower``, ``faster``, ``equivalent``), with that look's interval and
  its level named (``CI96.9% at look 1 (3 vs 3 processes)``);
* ``inconclusive`` at the budget, with the last look's interval and the MDE it reached (``LookVerdict.reason``);
* ``inconclusive`` when the recorded processes end before a stopping look (a run stopped early), with the last look
  taken (or no interval when not even the first look's processes are there).

The label's processes the stopping look used (and the baseline's) are the ones the verdict rests on
(``SequentialVerdict.processes``): the soundness rule (``analysis.comparison.soundness``) is applied to those.

What is deliberately not modelled: the retention > 1.0 and single-process rules and the withholding (the caller,
``analysis.comparison.compare.label_vs_baseline``, applies them to every verdict alike), labels no look line names
(judged by the fixed rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.comparison.sequential import LookVerdict, SequentialDesign, label_looks
from results_schema.records.sequential import LookDecision

__all__ = ["SequentialVerdict", "ci_name", "sequential_verdicts"]


@dataclass(frozen=True)
class SequentialVerdict:
    """One label's verdict of record in a sequential phase (module docstring).

    Attributes:
        verdict: ``slower`` / ``faster`` / ``equivalent`` / ``inconclusive``.
        ci_low_pct, ci_high_pct: the stopping (or last taken) look's interval of ``(label - baseline) / baseline``,
            percent; NaN when no look was taken.
        ci_name: the interval's name with its level and look (``ci_name``).
        note: the look in words (``LookVerdict.reason``), or why no look stopped the label.
        margin_pct: the design's target (every look's equivalence margin), percent.
        processes: ``(label, baseline)`` processes the verdict rests on (the first ``looks[k]`` of each, in block
            order; the recorded ones when no look was taken).
        baseline: the baseline label the looks compare against.
    """

    verdict: str
    ci_low_pct: float
    ci_high_pct: float
    ci_name: str
    note: str
    margin_pct: float
    processes: tuple[int, int]
    baseline: str


def ci_name(look: LookVerdict) -> str:
    """``CI<level>% at look <k> (<a> vs <b> processes)``: the name every table and legend gives a look's interval
    (the level is ``1 - alpha_k`` to 3 significant digits, e.g. ``CI96.9% at look 1 (3 vs 3 processes)``)."""
    return f"CI{100 * look.confidence:.3g}% at look {look.look} ({look.processes} vs {look.reference_processes} processes)"


def _values(runs: pd.DataFrame, phase: str, label: str) -> list[float]:
    sub = runs[(runs["phase"] == phase) & (runs["label"] == label)].sort_values("repeat", kind="stable")
    return [float(x) for x in sub["throughput_tok_s"]]


def _one(a: list[float], b: list[float], design: SequentialDesign, baseline: str) -> SequentialVerdict:
    looks = label_looks(a, b, design) if a and b else []
    if not looks:
        why = (f"sequential: {len(a)} vs {len(b)} processes recorded, the first look needs {design.looks[0]} per arm "
               "(the run stopped before it): no verdict")
        return SequentialVerdict("inconclusive", math.nan, math.nan, "no interval", why, design.target_pct,
                                 (len(a), len(b)), baseline)
    last = looks[-1]
    verdict, note = last.verdict, "sequential " + last.reason(design)
    if not last.stopped:
        verdict = "inconclusive"
        note += f"; the recorded processes end before look {last.look + 1} (run stopped early)"
    d = last.decision
    return SequentialVerdict(verdict, d.ci_low_pct, d.ci_high_pct, ci_name(last), note, design.target_pct,
                             (last.processes, last.reference_processes), baseline)


def sequential_verdicts(lines: Sequence[LookDecision], runs: pd.DataFrame) -> dict[tuple[str, str], SequentialVerdict]:
    """``(phase, label) -> SequentialVerdict`` of every label a look line names (module docstring).

    Args:
        lines: the run's look lines (``results_schema.records.sequential.read_looks``), any phases, file order.
        runs: ``analysis.load.RunData.runs`` (``phase``, ``label``, ``repeat``, ``throughput_tok_s``).

    Returns:
        Empty for a run without look lines. A phase whose first line declares an invalid design is left out (its
        labels keep the fixed rule; ``analysis validate`` fails on it).
    """
    out: dict[tuple[str, str], SequentialVerdict] = {}
    firsts: dict[str, LookDecision] = {}
    labels: dict[str, dict[str, None]] = {}
    for line in lines:
        firsts.setdefault(line.phase, line)
        labels.setdefault(line.phase, {}).update(dict.fromkeys(x.label for x in line.labels))
    for phase, first in firsts.items():
        try:
            design = SequentialDesign(tuple(first.looks), first.target_pct, first.alpha, first.spending)
        except ValueError:
            continue
        b = _values(runs, phase, first.baseline) if not runs.empty else []
        for label in labels[phase]:
            a = _values(runs, phase, label) if not runs.empty else []
            out[(phase, label)] = _one(a, b, design, first.baseline)
    return out
