"""``analysis validate`` of a sequential phase: every recorded look recomputed from the recorded processes.

What is modelled: the lines of ``sequential-decisions.jsonl`` (``results_schema.records.sequential``) of one phase,
in order, per look series (one per phase; a choose run's verify phase has one per decision, ``first_block``), against the processes of ``<phase>-runs.jsonl``: each line follows its design (look number, blocks =
``looks[k]``, the look's spent alpha), looks at exactly the labels the previous line left open, adds the blocks the
design gives (``looks[k+1] - looks[k]`` while a label is open, else 0), and each label's verdict, interval and interval method
(``Welch t`` / ``pooled t``, or ``paired t`` under ``pairing: block``) are what
``analysis.comparison.sequential.look_verdict`` gives on the values ``look_values`` takes under the recorded pairing
(its processes of blocks ``1..blocks`` against the baseline's, or the complete blocks paired; bounds within
``TOL_PCT``). The MDE of an inconclusive label is not recomputed (a simulation; its
seed is fixed, so it would agree, but it costs 400 ``decide`` calls per label).

What is deliberately not modelled: whether the runner ran the blocks in ABBA order (the schedule is in the logs),
the first look's label set (the plan's cases).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from analysis.comparison.sequential import SequentialDesign, line_design, look_values, look_verdict
from results_schema.records.sequential import LabelLook, LookDecision, series_repeats

TOL_PCT = 1e-6
"""Bound tolerance (percent points): the recorded JSON holds full float precision."""


def _same(x: float | None, y: float) -> bool:
    return (x is None and not math.isfinite(y)) or (x is not None and math.isfinite(y) and abs(x - y) <= TOL_PCT)


def _label(x: LabelLook, a: list[float], b: list[float], design: SequentialDesign, k: int) -> str | None:
    last = k == len(design.looks) - 1
    if not a or not b:
        want = "inconclusive" if last else "open"
        return None if x.verdict == want and x.ci_low_pct is None else (
            f"{x.label}: recorded {x.verdict} with no process on a side ({len(a)} vs {len(b)}); expected {want}")
    lv = look_verdict(a, b, design, k, with_mde=False)
    d = lv.decision
    if lv.verdict == x.verdict and _same(x.ci_low_pct, d.ci_low_pct) and _same(x.ci_high_pct, d.ci_high_pct) and (
            x.processes, x.reference_processes) == (len(a), len(b)) and x.method == d.method:
        return None
    return (f"{x.label}: recorded {x.verdict} ({x.method or 'no interval'} {x.ci_low_pct}..{x.ci_high_pct}%, "
            f"{x.processes} vs {x.reference_processes}), recomputed {lv.verdict} ({d.method} {d.ci_low_pct:+.4f}.."
            f"{d.ci_high_pct:+.4f}%, {len(a)} vs {len(b)})")


def _structure(line: LookDecision, k: int, design: SequentialDesign, prev: LookDecision | None) -> list[str]:
    out = []
    if line.look != k + 1 or line.blocks != design.looks[k]:
        out.append(f"look {line.look} after {line.blocks} blocks: the design's look {k + 1} is after {design.looks[k]}")
    if abs(line.look_alpha - design.look_alphas()[k]) > 1e-12:
        out.append(f"look {line.look}: alpha {line.look_alpha} recorded, the design spends {design.look_alphas()[k]}")
    if prev is not None and tuple(x.label for x in line.labels) != prev.still_open:
        out.append(f"look {line.look} looks at {[x.label for x in line.labels]}, the previous look left "
                   f"{list(prev.still_open)} open")
    want = design.looks[k + 1] - design.looks[k] if line.still_open and k + 1 < len(design.looks) else 0
    if line.next_blocks != want:
        out.append(f"look {line.look}: adds {line.next_blocks} block(s), the design gives {want}")
    return out


def recheck_looks(lines: Sequence[LookDecision], values: Mapping[tuple[str, str], Mapping[int, float]]) -> list[str]:
    """One line per difference between one phase's recorded looks and their recomputation (empty: all agree).

    A phase holds one look series, or (a choose run's verify phase) one per decision, told apart by
    ``LookDecision.first_block``: each series is checked on its own (``recheck_series``), and each starts where the one
    before it ended (``first_block`` = the earlier series' last blocks).

    Args:
        lines: the phase's look lines, in file order.
        values: ``(phase, label) -> {repeat: tok/s}`` of every recorded process (block ``b`` of a series is repeat
            ``first_block + b - 1``).
    """
    series: dict[int, list[LookDecision]] = {}
    for line in lines:
        series.setdefault(line.first_block, []).append(line)
    out: list[str] = []
    end = 0
    for first, mine in series.items():
        head = f"series from block {first + 1}: " if len(series) > 1 else ""
        if first != end:
            out.append(f"{head}starts after block {first}, the series before it ended after block {end}")
        out += [head + diff for diff in recheck_series(mine, values)]
        end = first + mine[-1].blocks
    return out


def recheck_series(lines: Sequence[LookDecision], values: Mapping[tuple[str, str], Mapping[int, float]]) -> list[str]:
    """``recheck_looks`` of one look series (its lines share ``first_block``, in file order)."""
    if not lines:
        return []
    first = lines[0]
    try:
        design = line_design(first)
    except ValueError as exc:
        return [f"the recorded design is not valid: {exc}"]
    out: list[str] = []
    for k, line in enumerate(lines):
        if (line.looks, line.target_pct, line.alpha, line.spending, line.pairing) != (
                first.looks, first.target_pct, first.alpha, first.spending, first.pairing):
            out.append(f"look {line.look}: another design than look 1's")
            continue
        if k >= len(design.looks):
            out.append(f"look {line.look}: the design has {len(design.looks)} looks")
            break
        out += _structure(line, k, design, lines[k - 1] if k else None)

        base = series_repeats(values.get((line.phase, line.baseline), {}), line.first_block)
        out += [f"look {line.look}: {diff}" for x in line.labels
                if (diff := _label(x, *look_values(series_repeats(values.get((line.phase, x.label), {}),
                                                                  line.first_block), base, design, k), design,
                                   k)) is not None]
    return out


LOOK_HEADER = ["phase", "label", "look", "blocks", "processes", "interval (the look's verdict interval)", "verdict",
               "MDE"]
"""Columns of ``look_rows`` / ``look_table``."""


def look_rows(lines: Sequence[LookDecision]) -> list[list[str]]:
    """Each label's interval per look, one row per label and look (columns ``LOOK_HEADER``): the blocks, processes
    (label vs baseline), the interval of ``(label - baseline) / baseline`` at the look's confidence (the verdict's own
    interval, named ``CI<level> <method>``), the look's verdict (``open``: looked at again), the MDE of a label
    inconclusive at the budget."""
    rows = []
    for line in lines:
        level = f"CI{100 * (1 - line.look_alpha):.3g}"
        for x in line.labels:
            ci = ("no interval" if x.ci_low_pct is None or x.ci_high_pct is None
                  else f"{level} {x.method} {x.ci_low_pct:+.1f}%..{x.ci_high_pct:+.1f}%")
            mde = "" if x.verdict != "inconclusive" else "none below 100%" if x.mde_pct is None else f"{x.mde_pct:.1f}%"
            rows.append([line.phase, x.label, str(line.look), str(line.blocks),
                         f"{x.processes} vs {x.reference_processes}", ci, x.verdict, mde])
    return rows


def look_table(lines: Sequence[LookDecision]) -> list[str]:
    """``look_rows`` as a Markdown table (the summary and the console print it; empty: no look)."""
    if not lines:
        return []
    return ["| " + " | ".join(LOOK_HEADER) + " |", "|" + "---|" * len(LOOK_HEADER),
            *("| " + " | ".join(r) + " |" for r in look_rows(lines))]
