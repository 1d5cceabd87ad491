"""Is a throughput phase's process-level noise shared by the arms that ran close in time?

What is modelled: per throughput phase with >= 2 labels and >= 2 complete blocks, the additive two-way model of
the log throughput ``y`` of the case process of label ``i`` in block ``j`` (the process is the unit: its value is
``BenchRecord.throughput_tok_s``, its tokens over its measured time), the randomized complete block design with
the labels as fixed treatments and the blocks random (Montgomery, *Design and Analysis of Experiments*, 8th ed.,
Wiley 2013, §4.1; random blocks: E(MS_blocks) = s2 + a s2_beta)::

    y_ij = mu + tau_i + beta_j + e_ij,   beta_j ~ (0, s2_block),   e_ij ~ (0, s2_error)

A block is the record's ``repeat`` index: the runner runs every label's repeat ``r`` in cycle ``r`` of its rotated
order (``runners.planning.plan.schedule``) and, in a sequential phase, as ABBA block ``r + 1``
(``runners.planning.blocks``), so the processes of one block ran next to each other in time. ``beta_j`` is the
level shift they share (host speed, foreign load, placement during that stretch of time), ``e_ij`` what a process
carries alone (its round-to-round noise averaged over its rounds included). A ``focus_first`` phase (the published
1.5B design) runs its focus labels' repeats before its capacity labels'; there repeat ``r`` of the two groups ran
apart in time, and this analysis (which does not read the schedule) still counts them as one block.

Incomplete blocks: only complete blocks enter (a block in which some label of the phase has no process -- a
failed process, a label that stopped at an earlier look of a sequential phase -- is dropped, and the row names the
dropped blocks), so the balanced formulas below are exact. With ``a`` labels and ``b`` complete blocks, label
means ``ybar_i.``, block means ``ybar_.j``::

    SS_label = b sum_i (ybar_i. - ybar..)^2          df a - 1
    SS_block = a sum_j (ybar_.j - ybar..)^2          df b - 1
    SS_error = SS_total - SS_label - SS_block        df (a - 1)(b - 1)
    F_block  = MS_block / MS_error  ~ F(b - 1, (a - 1)(b - 1)) when s2_block = 0 (normal e_ij)
    s2_block = max(0, (MS_block - MS_error) / a)     (method of moments from E(MS_block), truncated at 0)
    share    = s2_block / (s2_block + MS_error)      (of the process-level variance within a label)

and the SD within a label before and after removing the block: ``sqrt((SS_block + SS_error) / (a (b - 1)))`` and
``sqrt(MS_error)``. ``F``'s p-value is the F distribution's upper tail (``analysis.comparison.verdict_rule.f_sf``).

What the pairing buys: each label that is not a reference label against the phase's reference
(``analysis.comparison.variance.reference_mask``: its undelayed baselines; per block the mean log of its
reference processes) over every block in which both ran (incomplete blocks of other labels do not matter here):
``d_j = y_label,j - y_ref,j``; the paired SD is ``sd_j(d_j)``, the unpaired SD ``sqrt(var_j(y_label,j) +
var_j(y_ref,j))`` over the same blocks (the SD of the log ratio of a label process and a reference process from
unrelated blocks). As ``var(x - y) = var x + var y - 2 cov(x, y)``, the ratio paired / unpaired falls below 1
exactly as far as the two share their blocks' shifts (under the model: ``sqrt(1 - share)``); about 1 where nothing
is shared.

Error rate: with no block shift, ``F_block`` calls (p < 0.05) at its nominal 5% rate (simulated with this
module's functions in ``tests/analysis/test_shared_time.py``).

What is deliberately not modelled: a label x block interaction (one process per cell leaves no df for it: it is
part of the error), drift inside a block, which physical cause shifts a block (nothing here varies it on purpose).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparison.variance import reference_mask, sd_pct
from analysis.comparison.verdict_rule import f_sf

__all__ = ["BLOCK_METHOD", "BlockAnova", "block_anova", "paired_gain", "shared_in_time", "shared_lines"]

BLOCK_METHOD = ("two-way additive ANOVA of log process tok/s, labels fixed x blocks (the repeat index: one cycle of "
                "the schedule) random, complete blocks only; block variance by the method of moments truncated at 0 "
                "(randomized complete block design, Montgomery, Design and Analysis of Experiments, 8th ed., §4.1)")
"""The model in words, as every output names it."""


@dataclass(frozen=True)
class BlockAnova:
    """The additive two-way ANOVA of a labels x blocks table of log throughputs (module docstring).

    Attributes:
        labels, blocks: ``a`` and ``b``; df_block: ``b - 1``; df_error: ``(a - 1)(b - 1)``.
        ss_label, ss_block, ss_error: sums of squares (log units squared); ms_block, ms_error: mean squares.
        block_var: ``s2_block`` (truncated at 0); share: ``s2_block / (s2_block + MS_error)`` (None when both are 0).
        f_block, p_block: ``MS_block / MS_error`` and its upper-tail p (None when ``MS_error`` is 0).
        within_label_var: the variance within a label before the block is removed, ``(SS_block + SS_error) /
        (a (b - 1))``.
    """

    labels: int
    blocks: int
    ss_label: float
    ss_block: float
    ss_error: float
    df_block: int
    df_error: int
    ms_block: float
    ms_error: float
    block_var: float
    share: float | None
    f_block: float | None
    p_block: float | None
    within_label_var: float


def block_anova(y: np.ndarray) -> BlockAnova:
    """``BlockAnova`` of ``y``, shape ``(a labels, b blocks)``, log throughputs (one process per cell).

    Raises:
        ValueError: fewer than 2 labels or 2 blocks, or a value that is not finite.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2 or not np.all(np.isfinite(y)):
        raise ValueError(f"block_anova needs a finite (labels >= 2, blocks >= 2) table (got shape {y.shape})")
    a, b = y.shape
    grand = float(y.mean())
    ss_label = float(b * ((y.mean(axis=1) - grand) ** 2).sum())
    ss_block = float(a * ((y.mean(axis=0) - grand) ** 2).sum())
    ss_error = max(0.0, float(((y - grand) ** 2).sum()) - ss_label - ss_block)
    df_block, df_error = b - 1, (a - 1) * (b - 1)
    ms_block, ms_error = ss_block / df_block, ss_error / df_error
    block_var = max(0.0, (ms_block - ms_error) / a)
    total = block_var + ms_error
    f = ms_block / ms_error if ms_error > 1e-300 else None
    return BlockAnova(labels=a, blocks=b, ss_label=ss_label, ss_block=ss_block, ss_error=ss_error,
                      df_block=df_block, df_error=df_error, ms_block=ms_block, ms_error=ms_error,
                      block_var=block_var, share=block_var / total if total > 0 else None, f_block=f,
                      p_block=None if f is None else f_sf(f, df_block, df_error),
                      within_label_var=(ss_block + ss_error) / (a * (b - 1)))


def paired_gain(label: Sequence[float], reference: Sequence[float]) -> tuple[float, float]:
    """``(paired SD, unpaired SD)`` of the log ratio of ``label`` vs ``reference`` (log values, one per block, same
    blocks in the same order; module docstring).

    Raises:
        ValueError: fewer than 2 blocks, unequal lengths, or a value that is not finite.
    """
    x, r = np.asarray(label, dtype=float), np.asarray(reference, dtype=float)
    if x.shape != r.shape or x.ndim != 1 or x.size < 2 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(r))):
        raise ValueError(f"paired_gain needs two equal-length finite sequences of >= 2 blocks (got {x.shape}, {r.shape})")
    return float(np.std(x - r, ddof=1)), float(math.sqrt(np.var(x, ddof=1) + np.var(r, ddof=1)))


def _cells(pr: pd.DataFrame) -> pd.DataFrame:
    """``label x block`` table of the mean log throughput of ``pr``'s processes with a positive finite value."""
    tok = pr["throughput_tok_s"].astype(float)
    ok = np.isfinite(tok) & (tok > 0)
    frame = pd.DataFrame({"label": pr["label"].astype(str)[ok], "block": pr["repeat"].astype(int)[ok],
                          "y": np.log(tok[ok])})
    labels = list(dict.fromkeys(frame["label"]))
    return frame.pivot_table(index="label", columns="block", values="y", aggfunc="mean").reindex(labels)


def _pairs(pr: pd.DataFrame, cells: pd.DataFrame) -> list[dict[str, Any]]:
    ref = pr[reference_mask(pr)]
    ref_labels = list(dict.fromkeys(ref["label"].astype(str)))
    if not ref_labels:
        return []
    ref_y = cells.loc[ref_labels].mean(axis=0, skipna=True)
    out = []
    for label in cells.index:
        if label in ref_labels:
            continue
        both = cells.loc[label].notna() & ref_y.notna()
        if int(both.sum()) < 2:
            continue
        paired, unpaired = paired_gain(cells.loc[label][both].to_numpy(), ref_y[both].to_numpy())
        out.append({"label": label, "reference": ",".join(ref_labels), "blocks": int(both.sum()),
                    "paired_sd_pct": 100.0 * math.expm1(paired), "unpaired_sd_pct": 100.0 * math.expm1(unpaired),
                    "ratio": paired / unpaired if unpaired > 0 else None})
    return out


def _phase_row(pr: pd.DataFrame, phase: str) -> dict[str, Any] | None:
    cells = _cells(pr)
    complete = [int(c) for c in cells.columns if cells[c].notna().all()]
    if len(cells.index) < 2 or len(complete) < 2:
        return None
    r = block_anova(cells[complete].to_numpy())
    ss_total = r.ss_label + r.ss_block + r.ss_error
    share_of = (lambda ss: ss / ss_total) if ss_total > 0 else (lambda ss: 0.0)
    return {
        "phase": phase, "labels": r.labels, "blocks": r.blocks,
        "dropped_blocks": tuple(int(c) for c in cells.columns if int(c) not in complete),
        "method": BLOCK_METHOD,
        "ss_label_share": share_of(r.ss_label), "ss_block_share": share_of(r.ss_block),
        "ss_error_share": share_of(r.ss_error), "df_block": r.df_block, "df_error": r.df_error,
        "ms_block": r.ms_block, "ms_error": r.ms_error, "block_var": r.block_var, "block_share": r.share,
        "f_block": r.f_block, "p_block": r.p_block, "block_sd_pct": sd_pct(r.block_var),
        "error_sd_pct": sd_pct(r.ms_error), "within_label_sd_pct": sd_pct(r.within_label_var),
        "pairs": _pairs(pr, cells),
    }


def shared_in_time(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One ``results_schema.records.summary.SharedInTimeRow`` dict per phase of ``runs`` (``RunData.runs``: one
    row per case process, ``phase``, ``label``, ``repeat``, ``implementation``, ``throughput_tok_s``) with >= 2
    labels and >= 2 complete blocks; phases without are left out. SDs are percent of the throughput."""
    if runs.empty:
        return []
    out = []
    for phase in dict.fromkeys(str(p) for p in runs["phase"]):
        row = _phase_row(runs[runs["phase"].astype(str) == phase], phase)
        if row is not None:
            out.append(row)
    return out


def _p(p: float | None) -> str:
    return "undefined (no residual variance)" if p is None else ("p < 0.001" if p < 0.001 else f"p = {p:.3f}")


def shared_lines(rows: Sequence[Any]) -> list[str]:
    """The lines every report prints beside the variance components (console, Markdown, HTML).

    One line per phase (``shared in time same_runtime: blocks of time carry 62% of the process-level variance
    within a label (...; F(3, 6) = 7.90, p = 0.017; ...)``), one per label with its pairing gain, and the model.

    Args:
        rows: ``SharedInTimeRow`` objects or dicts.
    """
    lines = []
    for row in rows:
        g = (lambda k, row=row: row[k] if isinstance(row, dict) else getattr(row, k))
        share, f = g("block_share"), g("f_block")
        share_s = "undefined (no variance)" if share is None else f"{100.0 * share:.0f}%"
        f_s = "F undefined" if f is None else f"F({g('df_block')}, {g('df_error')}) = {f:.2f}"
        dropped = g("dropped_blocks")
        drop_s = (f"; incomplete blocks dropped (repeat {', '.join(str(d) for d in dropped)})" if dropped else "")
        lines.append(f"shared in time {g('phase')}: blocks of time carry {share_s} of the process-level variance "
                     f"within a label (block SD {g('block_sd_pct'):.1f}%, a process's own SD {g('error_sd_pct'):.1f}%; "
                     f"{f_s}, {_p(g('p_block'))}; {g('labels')} labels x {g('blocks')} complete blocks{drop_s}; sums "
                     f"of squares: label {100 * g('ss_label_share'):.0f}%, block {100 * g('ss_block_share'):.0f}%, "
                     f"residual {100 * g('ss_error_share'):.0f}%; SD within a label {g('within_label_sd_pct'):.1f}% "
                     f"-> {g('error_sd_pct'):.1f}% with the block removed)")
        for p in g("pairs"):
            h = (lambda k, p=p: p[k] if isinstance(p, dict) else getattr(p, k))
            ratio = h("ratio")
            ratio_s = "undefined" if ratio is None else f"{ratio:.2f}"
            lines.append(f"shared in time {g('phase')}/{h('label')} vs {h('reference')}: log-ratio SD paired by block "
                         f"{h('paired_sd_pct'):.1f}%, unpaired {h('unpaired_sd_pct'):.1f}% (paired / unpaired {ratio_s}; "
                         f"{h('blocks')} blocks)")
    if rows:
        lines.append(f"shared-in-time model: {BLOCK_METHOD}")
    return lines
