"""Sequential looks of a serving phase: every (rate, metric) cell of one offload label at one look, and the rule that
stops the label.

What is modelled (the design: ``analysis.comparison.sequential.SequentialDesign`` with ``pairing: block``, declared in
``phases.<phase>.sequential`` of a serving phase; docs/sequential.md, "Serving"):

* **One cell** (``look_cell``): a (rate, metric) of ``analysis.serving.stats.VERDICT_METRICS`` at look ``k`` is
  ``analysis.serving.stats.block_verdict`` over the complete blocks among blocks ``1..looks[k]`` (the label's
  process and at least two floor baselines recorded in the block: ``results_schema.rules.floor_rule.is_floor_baseline``) at
  the look's spent level: two-sided confidence ``1 - alpha_k`` (``SequentialDesign.look_alphas``), ``equivalent``
  only inside ``±target_pct``, a ``slower`` / ``faster`` kept only beyond the floor. A cell whose look rests on a
  process that ran its rate beside foreign work is ``withheld`` (``baseline_verdicts``' rule).
* **The label** (``label_state``): ``conclusive`` when every cell is ``slower``, ``faster`` or ``equivalent`` (it
  stops); else ``open`` before the last look, ``budget`` at it (it ends with whatever each cell gives).
* **Why each cell's false-call rate stays <= alpha whatever the stopping time**: a cell's false ``slower`` /
  ``faster`` over every look taken has probability at most ``sum_k P(false call at look k) <= sum_k alpha_k =
  alpha`` (the union bound, as for the throughput looks: ``analysis.comparison.sequential``); stopping the label
  only removes looks. Simulated with this module's functions under no effect and at a known cost
  (``tests/analysis/test_serving_sequential.py``).
* ``look_rows`` builds the cells of one label from the recorded ``ServingRun`` lines, as
  ``results_schema.records.serving_summary.BaselineVerdictRow`` dicts: what the runner records (``label_look``), what
  the serving validation recomputes (``analysis.serving.sequential_check``) and what the summary prints for a label
  (``sequential_verdicts``: the rows of the look that stopped it, at that look's level).

What is deliberately not modelled: a correction across cells or labels (each cell has its own alpha), the speed
control (judged at the end by the fixed rule: ``analysis.serving.stats.control_warnings``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from analysis.comparison.sequential import CONCLUSIVE, SequentialDesign, line_design
from analysis.serving.stats import (VERDICT_METRICS, _blocks, _by_block, _contended, _floor_baselines, _p50s,
                                    block_verdict, baseline_verdicts)
from results_schema.records.serving import ServingRun
from results_schema.records.serving_looks import (CellVerdictName, LabelState, ServingCell, ServingLabelLook,
                                                  ServingLookDecision)

__all__ = ["label_look", "label_state", "look_cell", "look_rows", "sequential_verdicts"]

Block = tuple[Sequence[float], Sequence[float]]
"""One block of one cell: (the label's P50s, the block's floor-baseline P50s), ms."""



def look_cell(blocks: Sequence[Block], design: SequentialDesign, k: int) -> dict[str, Any]:
    """One (rate, metric) cell at look ``k`` (0-based): ``block_verdict`` of ``blocks`` (the complete blocks among
    blocks ``1..looks[k]``, in block order) at confidence ``1 - alpha_k``, ``equivalent`` only inside ``±target_pct``.

    Raises:
        ValueError: ``k`` outside the design's looks; no block; ``block_verdict``'s errors.
    """
    if not 0 <= k < len(design.looks):
        raise ValueError(f"look {k + 1}: the design has {len(design.looks)} looks")
    if not blocks:
        raise ValueError(f"look {k + 1}: a cell needs at least one complete block")
    row = block_verdict(blocks, confidence=design.confidence(k), margin_pct=design.target_pct)
    row["verdict_text"] += (f"; CI{100 * design.confidence(k):.3g}% at look {k + 1} of {len(design.looks)} "
                            f"({design.looks[k]} blocks, alpha {design.look_alphas()[k]:.4f} of {design.alpha:g} "
                            f"{design.spending}-type)")
    return row


def label_state(verdicts: Sequence[str], design: SequentialDesign, k: int, expected: int | None = None) -> LabelState:
    """The label after look ``k`` (0-based) from its cells' verdicts: ``conclusive`` when every one is ``slower``,
    ``faster`` or ``equivalent`` (and there is one, and at least ``expected`` of them: a (rate, metric) without a cell,
    e.g. a rate with no complete block, is not known), else ``budget`` at the last look, ``open`` before it."""
    if verdicts and len(verdicts) >= (expected or 0) and all(v in CONCLUSIVE for v in verdicts):
        return "conclusive"
    return "budget" if k == len(design.looks) - 1 else "open"


def look_rows(runs: Sequence[ServingRun], phase: str, label: str, design: SequentialDesign,
              k: int) -> list[dict[str, Any]]:
    """``BaselineVerdictRow`` dicts of ``label`` at look ``k`` (0-based), one per (rate, metric): ``look_cell`` over
    the complete blocks among repeats ``0..looks[k] - 1`` (the label and >= 2 floor baselines recorded), withheld
    when a process of those blocks ran the rate beside foreign work. A rate with no complete block has no row."""
    end = design.looks[k]
    mine = [r for r in runs if r.phase == phase and r.repeat < end]
    vals = _p50s(mine)
    _labels, floor_at = _floor_baselines(mine)
    rows = []
    for (ph, lb, rate), procs in vals.items():
        if lb != label:
            continue
        bases = floor_at.get((ph, rate), [])
        base = [p for b in bases for p in vals[(ph, b, rate)]]
        full = {rep for rep, ps in _by_block(base).items() if len(ps) >= 2} & {p[1] for p in procs}
        a = [p for p in procs if p[1] in full]
        b = [p for p in base if p[1] in full]
        if not a:
            continue
        hot = _contended([r for r in mine if r.repeat in full and r.rate.request_rate_rps == rate
                          and r.label in (label, *bases)])
        busy = sum(hot.values())
        for m in VERDICT_METRICS:
            blocks = _blocks(a, b, m)
            if not all(float(np.median(bb)) > 0 for _aa, bb in blocks):
                continue
            row = look_cell(blocks, design, k)
            if busy:
                row.update(verdict="withheld", verdict_text=f"withheld: contended ({busy} of {len(a) + len(b)} "
                           f"processes of look {k + 1}'s blocks ran this rate beside foreign work)")
            rows.append({"phase": ph, "label": lb, "rate_rps": rate, "metric": m, "a_processes": len(a),
                         "b_processes": len(b), "a_median_ms": float(np.median([x[m] for _p, _r, x in a])),
                         "b_median_ms": float(np.median([x[m] for _p, _r, x in b])), **row})
    return rows


def _fin(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _rate(r: float | None) -> float | None:
    return None if r is None or math.isinf(r) else float(r)


def _reason(state: LabelState, cells: Sequence[ServingCell], design: SequentialDesign, k: int, expected: int) -> str:
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    tally = ", ".join(f"{v} {n}" for v, n in sorted(counts.items())) or "no cell"
    head = (f"look {k + 1} ({design.looks[k]} blocks, paired by block against the floor baselines, CI"
            f"{100 * design.confidence(k):.3g}%: alpha {design.look_alphas()[k]:.4f} of {design.alpha:g} "
            f"{design.spending}-type): {len(cells)} (rate, metric) cell(s): {tally}"
            + (f"; {expected - len(cells)} of {expected} without a cell (no complete block)" if len(cells) < expected
               else ""))
    return head + {"conclusive": "; stopped (every cell slower, faster or equivalent)",
                   "open": "; open (a cell is inconclusive, withheld or missing)",
                   "budget": f"; at the budget ({design.budget} blocks): ends with these verdicts"}[state]


def label_look(runs: Sequence[ServingRun], phase: str, label: str, design: SequentialDesign, k: int) -> ServingLabelLook:
    """``label`` at look ``k`` (0-based) as recorded (``ServingLabelLook``): every cell of ``look_rows`` and the
    label's ``label_state``."""
    rows = look_rows(runs, phase, label, design, k)
    cells = tuple(ServingCell(rate_rps=_rate(r["rate_rps"]), metric=r["metric"],
                              verdict=cast(CellVerdictName, r["verdict"]), blocks=int(r["blocks"] or 0),
                              ci_low_pct=_fin(r["ci_low_pct"]), ci_high_pct=_fin(r["ci_high_pct"]),
                              floor_pct=_fin(r["floor_pct"]), margin_pct=float(r["margin_pct"])) for r in rows)
    rates = {r.rate.request_rate_rps for r in runs if r.phase == phase and r.repeat < design.looks[k]}
    expected = len(rates) * len(VERDICT_METRICS)  # every rate the phase ran by this look, every verdict metric
    state = label_state([c.verdict for c in cells], design, k, expected)
    return ServingLabelLook(label=label, state=state, cells=cells, reason=_reason(state, cells, design, k, expected))


def sequential_verdicts(runs: Sequence[ServingRun], lines: Sequence[ServingLookDecision]) -> list[dict[str, Any]]:
    """``baseline_verdicts`` rows, where the look lines name a label: the rows of the look that ended it (its last
    line: its blocks, at that look's level, the text naming the level), recomputed from ``runs`` by ``look_rows`` (the
    lines' verdicts are not trusted: the serving validation holds them to it), not a 95% interval over the same blocks,
    which would be narrower than the level the decision was taken at. Labels no line names (the floor baselines, a
    speed control) keep the fixed rule. A line whose design is not valid leaves its labels to the fixed rule
    (the serving validation names it)."""
    last: dict[tuple[str, str], ServingLookDecision] = {}
    for line in lines:
        for x in line.labels:
            last[(line.phase, x.label)] = line
    out: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    fixed = baseline_verdicts(runs)
    for row in fixed:
        key = (row["phase"], row["label"])
        if key not in last:
            out.append(row)
            continue
        if key in done:
            continue
        done.add(key)
        try:
            design = line_design(last[key])
        except ValueError:
            out += [r for r in fixed if (r["phase"], r["label"]) == key]
            continue
        out += look_rows(runs, key[0], key[1], design, last[key].look - 1)
    return out
