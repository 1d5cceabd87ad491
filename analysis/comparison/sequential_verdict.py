"""The verdict of record of a sequential phase: each label's stopping look, recomputed from the recorded processes.

What is modelled: a phase with look lines (``results_schema.records.sequential``, ``docs/sequential.md``) is judged
by its design, never by the fixed 95% rule on all its processes (a fixed 95% interval computed after optional
stopping does not hold its level: a label that ran to the budget has only the last look's alpha increment left).
``sequential_verdicts`` reads the design and the baseline from the first look line of each look series (a phase has one;
a choose run's verify phase one per decision, ``LookDecision.first_block``) and recomputes every
label's looks with ``analysis.comparison.sequential.look_verdict`` as the runner takes them (look ``k`` on the
values ``analysis.comparison.sequential.look_values`` takes under the recorded pairing: the processes of blocks
``1..looks[k]`` of the label's series, block ``b`` being repeat ``first_block + b - 1``, a failed process missing, against the baseline's, or the complete
blocks paired), as many looks as the run recorded for the phase; the recorded verdicts are not trusted here (``analysis
validate`` fails where they differ: ``analysis.comparison.sequential_check``). A label's verdict of record is:

* the verdict of the look that stopped it (``slower``, ``faster``, ``equivalent``), with that look's interval and
  its level named (``CI96.9% at look 1 (3 vs 3 processes)``);
* ``inconclusive`` at the budget, with the last look's interval and the MDE it reached (``LookVerdict.reason``);
* ``inconclusive`` when the run recorded no stopping look for the label (a run stopped early), with the last look
  taken (or no interval when no look had a process on each side).

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

from analysis.comparison.sequential import LookVerdict, SequentialDesign, line_design, look_values, look_verdict
from analysis.comparison.verdict_rule import PAIRED
from results_schema.records.sequential import LookDecision, series_repeats

__all__ = ["SequentialVerdict", "ci_name", "sequential_verdicts", "tok_s_by_label"]


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
        blocks: the stopping (or last taken) look's blocks: the verdict rests on the processes of repeats
            ``first_block..first_block+blocks-1`` of the label and of the baseline (0: no look).
        first_block: blocks of the phase before the label's look series (``LookDecision.first_block``; 0 but in a
            choose run's verify phase).
        design: the series' design as its first look line declared it (``pairing`` says whether the phase's other
            comparisons, e.g. ``analysis.comparison.dimensioning``'s A/A rows, are paired by block too).
    """

    verdict: str
    ci_low_pct: float
    ci_high_pct: float
    ci_name: str
    note: str
    margin_pct: float
    processes: tuple[int, int]
    baseline: str
    blocks: int
    first_block: int = 0
    design: SequentialDesign | None = None


def ci_name(look: LookVerdict) -> str:
    """``CI<level>% at look <k> (<a> vs <b> processes)``: the name every table and legend gives a look's interval
    (the level is ``1 - alpha_k`` to 3 significant digits, e.g. ``CI96.9% at look 1 (3 vs 3 processes)``; a paired
    look adds ``, paired by block``)."""
    paired = ", paired by block" if look.decision.method == PAIRED else ""
    return (f"CI{100 * look.confidence:.3g}% at look {look.look} ({look.processes} vs {look.reference_processes} "
            f"processes{paired})")


def tok_s_by_label(runs: pd.DataFrame) -> dict[tuple[str, str], dict[int, float]]:
    """``(phase, label) -> {repeat: tok/s}`` of every recorded process of ``runs`` (``RunData.runs``: ``phase``,
    ``label``, ``repeat``, ``throughput_tok_s``), in one pass: the values ``look_values`` takes (block ``b`` of a
    series is repeat ``first_block + b - 1``) and ``analysis.comparison.paired_aa`` pairs."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    if runs.empty:
        return out
    for p, lb, r, v in zip(runs["phase"], runs["label"], runs["repeat"], runs["throughput_tok_s"], strict=True):
        out.setdefault((str(p), str(lb)), {})[int(r)] = float(v)
    return out


def _one(a: dict[int, float], b: dict[int, float], design: SequentialDesign, baseline: str,
         taken: int, first: int, with_mde: bool = True) -> SequentialVerdict:
    """Looks ``1..taken`` (the looks the run recorded for the phase) of one label, recomputed as the runner took them
    (``runners.orchestration.sequential``): look ``k`` on ``look_values``, until one stops it."""
    last: LookVerdict | None = None
    for k in range(min(taken, len(design.looks))):
        ak, bk = look_values(series_repeats(a, first), series_repeats(b, first), design, k)
        if not ak or not bk:  # every process of a side failed: no interval at this look
            continue
        last = look_verdict(ak, bk, design, k, with_mde=with_mde)
        if last.stopped:
            break
    if last is None:
        why = (f"sequential: no look with a recorded process on each side ({len(a)} vs {len(b)} processes, "
               f"{taken} look(s) taken): no verdict")
        return SequentialVerdict("inconclusive", math.nan, math.nan, "no interval", why, design.target_pct,
                                 (len(a), len(b)), baseline, 0, first, design)
    verdict, note = last.verdict, "sequential " + last.reason(design)
    if not last.stopped:
        verdict = "inconclusive"
        note += f"; the run recorded no look after look {last.look} (stopped early)"
    d = last.decision
    return SequentialVerdict(verdict, d.ci_low_pct, d.ci_high_pct, ci_name(last), note, design.target_pct,
                             (last.processes, last.reference_processes), baseline, design.looks[last.look - 1], first,
                             design)


def sequential_verdicts(lines: Sequence[LookDecision], runs: pd.DataFrame, *,
                        with_mde: bool = True) -> dict[tuple[str, str], SequentialVerdict]:
    """``(phase, label) -> SequentialVerdict`` of every label a look line names (module docstring).

    Args:
        lines: the run's look lines (``results_schema.records.sequential.read_looks``), any phases, file order.
        runs: ``analysis.load.RunData.runs`` (``phase``, ``label``, ``repeat``, ``throughput_tok_s``).
        with_mde: False leaves the MDE of a label inconclusive at the budget out of its note (simulations: the MDE
            simulates 400 datasets; the verdicts and intervals do not depend on it).

    Returns:
        Empty for a run without look lines. A phase whose first line declares an invalid design is left out (its
        labels keep the fixed rule; ``analysis validate`` fails on it).
    """
    out: dict[tuple[str, str], SequentialVerdict] = {}
    firsts: dict[tuple[str, int], LookDecision] = {}  # one look series per (phase, first_block)
    labels: dict[tuple[str, int], dict[str, None]] = {}
    taken: dict[tuple[str, int], int] = {}
    for line in lines:
        key = (line.phase, line.first_block)
        firsts.setdefault(key, line)
        labels.setdefault(key, {}).update(dict.fromkeys(x.label for x in line.labels))
        taken[key] = taken.get(key, 0) + 1
    values = tok_s_by_label(runs)
    for (phase, first_block), first in firsts.items():
        try:
            design = line_design(first)
        except ValueError:
            continue
        b = values.get((phase, first.baseline), {})
        for label in labels[(phase, first_block)]:
            a = values.get((phase, label), {})
            out[(phase, label)] = _one(a, b, design, first.baseline, taken[(phase, first_block)], first_block,
                                       with_mde)
    return out
