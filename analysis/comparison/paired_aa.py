"""A/A, control and MDE rows of a phase whose design pairs by block: the paired t over the complete blocks.

What is modelled: a sequential phase declared with ``sequential.pairing: block`` (``+experiment=aa_paired``:
``conf/matrix/same_runtime_aa_paired_cpu.yaml``, one look at the budget) runs every arm once per block,
adjacent in time and ABBA-ordered (``runners.planning.blocks``). Its comparisons are then paired, block by block (the
design declared it before the run; nothing here is chosen from the data):

* ``paired_row``: an A/A row (``X_twin`` vs ``X``) or a control row (control vs an undelayed baseline label). Where
  the phase's looks judged ``a`` against ``b`` (``b`` is the design's baseline), the row is the look's verdict
  (``SequentialVerdict``: the stopping look's ``decide_paired``, its interval and level), never overridden by the
  retention > 1.0 rule (an A/A row counts a ``faster`` as the false call it is). Otherwise it is
  ``verdict_rule.decide_paired`` on the blocks where both ran (block ``b`` = repeat ``b - 1``, below the budget) at
  the level of the design's last look, ``1 - alpha_K`` (``SequentialDesign.confidence``): with one look, the
  whole alpha (95% at alpha 0.05), so the row is exactly the rule the looks use. In a multi-look design the blocks
  two labels share depend on when each stopped, and ``alpha_K`` is only the budget's increment: a hint there, not a
  stated error rate.
* ``paired_mde_rows``: each non-reference label's minimum detectable cost against the design's baseline under that
  rule (``analysis.comparison.power.detectable_paired_cost_pct`` at the SD of the per-block log ratios, the blocks
  judged, the design's target as margin, the last look's level); its range from the chi-square interval of that SD
  (``blocks - 1`` df) at the same level. These replace the unpaired ``mde_row`` of that phase (``effects_by_design``);
  every row names its method ("paired t, N blocks vs baseline").

Every row's ``method`` is ``"paired t, N blocks"``: the printed lines (``dimensioning_lines``, ``power_lines``) say
it. A row resting on a contended process of the blocks it used is ``withheld`` (``soundness.contended_reason``, the
rule of ``soundness.withheld_reason`` over those processes). A report groups its runs once (``group_runs``) and
hands the grouping to every row.

What is deliberately not modelled: unpaired phases (``analysis.comparison.dimensioning`` and ``power`` keep the
unpaired rule there), the default's dimensioning rows (they size the default's unpaired 4-vs-4 design).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparison.power import POWER, detectable_effects, detectable_paired_cost_pct
from analysis.comparison.sequential import SequentialDesign
from analysis.comparison.sequential_verdict import SequentialVerdict, tok_s_by_label
from analysis.comparison.soundness import ProcessKey, contended_keys, contended_reason
from analysis.comparison.variance import chi2_quantile, reference_mask
from analysis.comparison.verdict_rule import decide_paired
from results_schema.codec.scalars import finite_or_null

__all__ = ["GroupedRuns", "effects_by_design", "group_runs", "paired_designs", "paired_mde_rows", "paired_method",
           "paired_row"]


def paired_method(blocks: int) -> str:
    """``"paired t, N blocks"``: the method every paired row prints."""
    return f"paired t, {blocks} block{'s' if blocks != 1 else ''}"


def paired_designs(sequential: Mapping[tuple[str, str], SequentialVerdict]) -> dict[str, tuple[SequentialDesign, str]]:
    """``phase -> (design, baseline label)`` of every phase whose looks pair by block (``pairing: block``)."""
    out: dict[str, tuple[SequentialDesign, str]] = {}
    for (phase, _), sv in sequential.items():
        if sv.design is not None and sv.design.paired:
            out.setdefault(phase, (sv.design, sv.baseline))
    return out


@dataclass(frozen=True)
class GroupedRuns:
    """A report's runs grouped once (``group_runs``), so that no row filters the runs table again.

    Attributes:
        tok_s: ``(phase, label) -> {repeat: tok/s}`` of every recorded process
            (``analysis.comparison.sequential_verdict.tok_s_by_label``).
        contended: ``(phase, label, repeat)`` of every contended process (``soundness.contended_keys``).
    """

    tok_s: Mapping[tuple[str, str], Mapping[int, float]]
    contended: frozenset[ProcessKey]


def group_runs(runs: pd.DataFrame) -> GroupedRuns:
    """``runs`` (``RunData.runs``: ``phase``, ``label``, ``repeat``, ``throughput_tok_s``; ``host_contended`` if any)
    grouped once per report."""
    return GroupedRuns(tok_s_by_label(runs), frozenset(contended_keys(runs)))


def _blocks(g: GroupedRuns, phase: str, a: str, b: str, below: int,
            start: int = 0) -> tuple[list[float], list[float], list[int]]:
    """The label's and the reference's values of the complete blocks (``start <= repeat < below``, both recorded),
    aligned."""
    av, bv = g.tok_s.get((phase, a), {}), g.tok_s.get((phase, b), {})
    both = sorted(r for r in av if start <= r < below and r in bv)
    return [av[r] for r in both], [bv[r] for r in both], both


def paired_row(g: GroupedRuns, phase: str, kind: str, a: str, b: str, design: SequentialDesign, delay: float,
               sv: SequentialVerdict | None) -> dict[str, Any]:
    """One A/A or control row of a paired phase (module docstring), with the keys of
    ``analysis.comparison.dimensioning.aa_comparisons`` plus ``method`` (``"paired t, N blocks"``).

    Args:
        g: the report's runs, grouped (``group_runs``).
        phase, kind: the phase; ``A/A`` or ``control``.
        a, b: the label judged and the label it is judged against.
        design: the phase's design (``pairing: block``).
        delay: the control's ``step_delay_ms`` (0 for an A/A row).
        sv: the looks' verdict of ``a`` (used when its baseline is ``b``), or None.
    """
    looked = sv is not None and sv.baseline == b
    ak, bk, used = (_blocks(g, phase, a, b, sv.first_block + sv.blocks, sv.first_block) if sv is not None and looked
                    else _blocks(g, phase, a, b, design.budget))
    if sv is not None and looked:
        v, lo, hi, name, delta = sv.verdict, sv.ci_low_pct, sv.ci_high_pct, sv.ci_name, None
    elif ak:
        d = decide_paired(ak, bk, margin_pct=design.target_pct, confidence=design.confidence(len(design.looks) - 1))
        v, lo, hi, delta = d.verdict, d.ci_low_pct, d.ci_high_pct, d.delta_pct
        name = f"CI{100 * d.confidence:.3g}%" if math.isfinite(lo) else "no interval"
    else:
        v, lo, hi, name, delta = "inconclusive", math.nan, math.nan, "no interval", None
    why = contended_reason([(phase, lb, r) for lb in (a, b) for r in used], g.contended)
    verdict = "withheld" if why else v
    return {"phase": phase, "kind": kind, "a_label": a, "b_label": b, "a_processes": len(ak), "b_processes": len(bk),
            "delta_pct": delta, "ci_low_pct": finite_or_null(lo), "ci_high_pct": finite_or_null(hi),
            "verdict": verdict, "called": verdict in ("faster", "slower"),
            "expected": "slower" if kind == "control" else "no call", "step_delay_ms": delay,
            "margin_pct": float(design.target_pct), "note": f"withheld: {why}" if why else "", "ci_name": name,
            "method": paired_method(len(ak))}


def _mde_row(phase: str, label: str, base: str, ak: list[float], bk: list[float],
             design: SequentialDesign) -> dict[str, Any]:
    n = len(ak)
    conf = design.confidence(len(design.looks) - 1)
    sd_d = float(np.std(np.log(ak) - np.log(bk), ddof=1))
    mde = detectable_paired_cost_pct(n, sd_d, margin_pct=design.target_pct, confidence=conf)
    alpha, df = 1.0 - conf, n - 1
    ends = [detectable_paired_cost_pct(n, k * sd_d, margin_pct=design.target_pct, confidence=conf)
            for k in (math.sqrt(df / chi2_quantile(1.0 - alpha / 2.0, df)), math.sqrt(df / chi2_quantile(alpha / 2.0, df)))]
    return {"phase": phase, "label": label, "processes": n, "reference_processes": n, "mde_pct": finite_or_null(mde),
            "mde_low_pct": finite_or_null(min(mde, *ends)), "mde_high_pct": finite_or_null(max(mde, *ends)),
            "df": float(df), "power": POWER, "confidence": conf, "margin_pct": float(design.target_pct),
            "method": f"{paired_method(n)} vs {base}"}


def paired_mde_rows(runs: pd.DataFrame, phase: str, design: SequentialDesign, baseline: str,
                    g: GroupedRuns) -> list[dict[str, Any]]:
    """The paired MDE (module docstring) of every label of ``phase`` outside its reference arm (undelayed baselines)
    with >= 2 complete blocks against ``baseline`` (``results_schema.records.summary.DetectableEffectRow`` dicts);
    ``g``: ``runs`` grouped (``group_runs``)."""
    pr = runs[runs["phase"] == phase]
    refs = set(pr.loc[reference_mask(pr), "label"].astype(str))
    out = []
    for label in dict.fromkeys(str(x) for x in pr["label"]):
        if label in refs:
            continue
        ak, bk, _ = _blocks(g, phase, label, baseline, design.budget)
        if len(ak) >= 2:
            out.append(_mde_row(phase, label, baseline, ak, bk, design))
    return out


def effects_by_design(runs: pd.DataFrame, rounds: pd.DataFrame, *, margin_pct: float,
                      sequential: Mapping[tuple[str, str], SequentialVerdict],
                      grouped: GroupedRuns | None = None) -> list[dict[str, Any]]:
    """Every phase's MDE rows: ``power.detectable_effects`` (unpaired) for a phase that does not pair, the paired rows
    (``paired_mde_rows``) in place of them for a phase whose design pairs by block (``grouped``: ``group_runs(runs)``,
    grouped here when None)."""
    paired = paired_designs(sequential)
    out = [r for r in detectable_effects(runs, rounds, margin_pct=margin_pct) if r["phase"] not in paired]
    if paired:
        g = grouped if grouped is not None else group_runs(runs)
        for phase, (design, base) in paired.items():
            out += paired_mde_rows(runs, phase, design, base, g)
    return out
