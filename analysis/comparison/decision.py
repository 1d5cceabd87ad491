"""The decision table: one row per (phase, label) with what a person decides an offload setting on.

What is modelled (per label, from the aggregated summary and the validated records):
    * released bytes (evidence-accounted, ``analysis.aggregate``) in bytes and GiB (2**30 bytes);
    * KV-cache gain vs the phase baseline (tokens and GiB, from the case logs);
    * throughput retention = median(label tok/s) / median(baseline tok/s) with the verdict rule's 95% t
      interval over processes: the label's ``vs_baseline_ci_*_pct`` (``analysis.comparison.compare.
      label_vs_baseline``: ``verdict_rule.unpaired_interval(label, baseline)``, the interval of the ratio of
      geometric means minus 1 in percent), and retention bounds are ``1 + pct / 100``;
    * the verdict vs the baseline: the label's ``vs_baseline_verdict`` (the same function: the project's one
      verdict rule with ``margin_pct``, inconclusive for a single process or a retention above 1.0, withheld for a
      contended process);
    * greedy token identity vs the baseline (``tokens``: identical / differs / no_baseline);
    * Pareto / knee flags (``analysis.aggregate`` / ``analysis.comparison.pareto``);
    * soundness (``analysis.comparison.soundness``): a verdict that rests on a contended process (the label's or
      its phase baseline's: foreign work on the host while it measured) is ``withheld`` and ``withheld`` says
      ``contended (N of M processes)``; ``unstable`` names the label's processes that ran no warmup round or
      drifted within their window more than twice the phase's noise floor. Either keeps the point off the front;
    * validity per label: a label is invalid when a validation *error* names it, names its phase
      without a label, or names neither (a run-level error): a failed check is never shown as ok.
      ``verdict`` of an invalid label is ``INVALID`` and ``issues`` lists the error codes.

What is deliberately not modelled: a recommendation (``analysis.model.fit.recommend``) and any
cross-run comparison (``analysis.catalog.store``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.comparison import soundness, verdict_rule
from analysis.comparison.compare import VS_BASELINE_COLUMNS, label_vs_baseline
from analysis.load import RunData
from results_schema.units import GIB

DECISION_COLUMNS = [
    "phase", "label", "implementation", "group_size", "num_in_group", "prefetch_step", "selected_layers",
    "num_selected_layers", "processes", "released_bytes", "released_gib", "kv_gain_tokens", "kv_gain_gib",
    "throughput_median_tok_s", "baseline_throughput_median_tok_s", "retention", "retention_ci_low",
    "retention_ci_high", "retention_ci_name", "verdict", "tokens", "pareto", "knee", "valid", "issues", "withheld", "unstable",
]
"""Columns of ``decision_table`` (also the fields of ``results_schema.records.summary.DecisionRow``)."""


RETENTION_CI_NAME = "retention 95% CI"
"""What every table, console line and figure calls a label's interval vs its phase baseline: the verdict's own
interval (``retention_interval``), the verdict rule's 95% t interval over processes."""


def retention_interval(ci_low_pct, ci_high_pct) -> tuple[float, float] | None:
    """The retention bounds of a verdict interval: ``1 + pct / 100`` of each bound of the t interval of
    ``(A - B) / B`` in percent (``verdict_rule.unpaired_interval``); None when either bound is missing or not finite
    (fewer than 2 processes on a side, a baseline row)."""
    if not (_finite(ci_low_pct) and _finite(ci_high_pct)):
        return None
    return 1.0 + float(ci_low_pct) / 100.0, 1.0 + float(ci_high_pct) / 100.0


def _ci_name(name, lo: float) -> str:
    """The row's interval name (``vs_baseline_ci_name``; ``95% CI`` for a summary written before it), ``no interval``
    without one."""
    if not _finite(lo):
        return "no interval"
    return name if isinstance(name, str) and name else "95% CI"


def call_verdict(ci_low_pct: float, ci_high_pct: float, margin_pct: float | None = None) -> str:
    """``analysis.comparison.verdict_rule.verdict`` on a percent interval.

    Args:
        ci_low_pct, ci_high_pct: bounds of the interval of ``(A - B) / B`` in percent (NaN: none).
        margin_pct: equivalence margin in percent; None = ``verdict_rule.DEFAULT_MARGIN_PCT``.
    """
    if margin_pct is None:
        return verdict_rule.verdict(ci_low_pct, ci_high_pct)
    return verdict_rule.verdict(ci_low_pct, ci_high_pct, margin_pct=margin_pct)


def label_errors(validation, phase: str, label: str) -> list[str]:
    """Codes of the validation errors that concern ``(phase, label)`` (see module docstring), sorted, unique."""
    codes = set()
    for i in validation.errors:
        if i.label is None and (i.phase is None or i.phase == phase):
            codes.add(i.code)
        elif i.label == label and (i.phase is None or i.phase == phase):
            codes.add(i.code)
    return sorted(codes)


def _finite(x) -> bool:
    try:
        return x is not None and x is not pd.NA and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def vs_baseline_columns(data: RunData, summary: pd.DataFrame, margin_pct: float | None = None) -> pd.DataFrame:
    """Each summary row's verdict vs its phase baseline (``VS_BASELINE_COLUMNS``, same index as ``summary``):
    the summary's own columns when it carries them at ``margin_pct`` (``analysis.report.tables.build`` adds them),
    else ``analysis.comparison.compare.label_vs_baseline`` (the one per-label rule: the interval, a single process
    or a retention above 1.0 -> inconclusive, a contended process -> withheld).

    Args:
        data: the loaded run.
        summary: ``analysis.aggregate.aggregate(data)`` rows.
        margin_pct: equivalence margin in percent; None = ``verdict_rule.DEFAULT_MARGIN_PCT``.
    """
    margin = verdict_rule.DEFAULT_MARGIN_PCT if margin_pct is None else float(margin_pct)
    if set(VS_BASELINE_COLUMNS) <= set(summary.columns) and (summary["vs_baseline_margin_pct"] == margin).all():
        return summary[VS_BASELINE_COLUMNS]
    return label_vs_baseline(data, summary, margin_pct=margin)


def decision_table(data: RunData, summary: pd.DataFrame, validation, *,
                   margin_pct: float | None = None) -> pd.DataFrame:
    """One decision row per summary row (same order); columns ``DECISION_COLUMNS``.

    Args:
        data: the loaded run (per-process throughputs for the interval).
        summary: ``analysis.aggregate.aggregate(data)`` plus the ``tokens`` column (and the ``vs_baseline_*``
            columns where ``analysis.report.tables.build`` added them).
        validation: the run's ``ValidationReport``.
        margin_pct: equivalence margin passed to the verdict function (percent).

    Returns:
        DataFrame; NaN where a value is undefined (no baseline, no KV line, < 2 processes on a side).
        ``verdict`` is ``baseline`` for the phase's undelayed baselines (a speed control is judged like a label),
        ``INVALID`` for invalid labels, else the label's verdict vs its phase baseline (:func:`vs_baseline_columns`:
        faster / slower / equivalent / inconclusive / withheld).
    """
    if summary.empty:
        return pd.DataFrame([], columns=DECISION_COLUMNS)
    rows = []
    excluded = soundness.point_exclusions(data.runs)
    vb = vs_baseline_columns(data, summary, margin_pct)
    for i, r in summary.iterrows():
        phase, label = r["phase"], r["label"]
        v = str(vb.at[i, "vs_baseline_verdict"])
        v = "baseline" if v == "reference" else v
        lo, hi = retention_interval(vb.at[i, "vs_baseline_ci_low_pct"], vb.at[i, "vs_baseline_ci_high_pct"]) \
            or (float("nan"), float("nan"))
        why = excluded.get((phase, label), [])
        withheld = next((w.removeprefix("withheld: ") for w in why if w.startswith("withheld: ")), "")
        unstable = next((w for w in why if w.startswith("unstable")), "")
        codes = label_errors(validation, phase, label)
        if codes:
            v = "INVALID"
        rel = r["released_bytes"]
        rows.append({
            "phase": phase, "label": label, "implementation": r["implementation"],
            "group_size": int(r["group_size"]), "num_in_group": int(r["num_in_group"]),
            "prefetch_step": int(r["prefetch_step"]), "selected_layers": r["selected_layers"],
            "num_selected_layers": int(r["num_selected_layers"]), "processes": int(r["processes"]),
            "released_bytes": int(rel), "released_gib": float(rel) / GIB,
            "kv_gain_tokens": float(r["kv_gain_tokens"]) if _finite(r["kv_gain_tokens"]) else np.nan,
            "kv_gain_gib": float(r["kv_gain_gib"]) if _finite(r["kv_gain_gib"]) else np.nan,
            "throughput_median_tok_s": float(r["throughput_median_tok_s"]),
            "baseline_throughput_median_tok_s": float(r["baseline_throughput_median_tok_s"])
            if _finite(r["baseline_throughput_median_tok_s"]) else np.nan,
            "retention": float(r["retention"]) if _finite(r["retention"]) else np.nan,
            "retention_ci_low": lo, "retention_ci_high": hi, "retention_ci_name": _ci_name(vb.at[i, "vs_baseline_ci_name"],
                                                                                      lo),
            "verdict": v, "tokens": r.get("tokens", "no_baseline"),
            "pareto": bool(r["pareto"]), "knee": bool(r["knee"]), "valid": not codes, "issues": ",".join(codes),
            "withheld": withheld, "unstable": unstable,
        })
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def ci_cell(low, high, name: str, digits: int = 3, sep: str = "–") -> str:
    """A retention interval as every table prints it: ``low–high``, followed by its name when it is not the fixed
    rule's 95% interval (a sequential phase's label: ``0.660–0.841 (CI96.9% at look 1 (3 vs 3 processes))``);
    ``–`` without one."""
    if not (_finite(low) and _finite(high)):
        return "–"
    cell = f"{float(low):.{digits}f}{sep}{float(high):.{digits}f}"
    return cell if name in ("95% CI", "no interval", "") else f"{cell} ({name})"


def ci_header(names, prefix: str = "retention ") -> str:
    """The retention interval's column header: ``<prefix>95% CI`` (``RETENTION_CI_NAME`` by default) when every row's
    is the fixed rule's, else ``<prefix>CI (95% unless named)`` (a sequential phase's cells name their look's level)."""
    return f"{prefix}95% CI" if all(n in ("95% CI", "no interval", "") for n in names) else \
        f"{prefix}CI (95% unless named)"


def verdict_cell(verdict: str, withheld: str) -> str:
    """The verdict as every table prints it: ``withheld: contended (N of M processes)`` for a withheld one."""
    return f"withheld: {withheld}" if verdict == "withheld" and withheld else verdict


def reasons_cell(issues: str, unstable: str) -> str:
    """The reasons column: the validation error codes, then ``unstable (...)`` when the label is unstable."""
    return "; ".join(x for x in (issues.replace(",", ", "), unstable) if x)


GLOSSARY: dict[str, str] = {
    "throughput tok/s": "Output tokens per second of one case process: generated tokens of all measured rounds "
                        "divided by their wall seconds (one LLM.generate call per round over every prompt). The "
                        "table shows the median over the label's processes.",
    "retention": "Median throughput of the label divided by the median throughput of its phase's baseline "
                 "(no offload). 1.0 = as fast as the baseline; 0.8 = 20% slower. The interval is the verdict's 95% t "
                 "interval over processes (of the ratio of geometric means: Welch t on log tok/s, or the pooled t "
                 "where wider; none with fewer than 2 processes on a side).",
    "released bytes": "Bytes the offloader moved out of the device-resident set minus its static prefetch "
                      "buffers, as reported by runtime evidence (offloaded_bytes - static_buffer_bytes). "
                      "Accounted, not measured: on the CPU runtime host and device memory are the same RAM and "
                      "nothing is freed.",
    "KV gain": "KV-cache capacity of the label minus the baseline's, from the engine's 'KV cache size: N tokens' "
               "and 'Available KV cache memory: X GiB' log lines (tokens / GiB). Empty when a log line is absent.",
    "knee": "The planner's knee: the largest release on the Pareto front before the marginal throughput cost "
            "per released byte jumps (more than 2x the average cost per byte of the steps before it, and more "
            "than the front's average); never the baseline (a knee releases memory: on a front falling fast from "
            "the first step it is the first release); the full rule is printed with every report (analysis.comparison.pareto."
            "knee_rule_text). Only valid, token-identical points can be the knee. Defined for fronts of 3 or "
            "more points.",
    "Pareto front": "Settings not beaten on both released bytes and median throughput by another setting of the "
                    "same implementation (the baseline is the zero-capacity point).",
    "verdict": "Label vs its phase baseline from the 95% t interval of the throughput change over processes "
               "(under no effect at most about 5% of labels are called faster or slower): equivalent only "
               "when the whole interval lies inside the equivalence margin (5% by default, printed with the "
               "table; also when it excludes 0, and then the text names the side); faster / slower when it excludes 0 and leaves the margin; inconclusive otherwise, and "
               "always with a single process or retention above 1.0; withheld when a process it rests on (the "
               "label's or its baseline's) was contended: other work used more than a quarter core of the host, "
               "or steal took more than 5% of it, while that process measured; INVALID when a validation error "
               "concerns the label (never shown as ok).",
    "unstable": "A process of the label ran no warmup round (its cold start is measured) or its measured window "
                "drifted (the throughputs of the window's two halves differ) by more than the phase's noise floor "
                "(the baseline processes' spread). The verdict is shown, but the point is kept off the Pareto "
                "front, the knee and every recommendation.",
    "tokens vs baseline": "Greedy token identity: 'identical' when every measured round generated the same "
                          "token ids as the baseline's, 'differs' otherwise, 'no_baseline' without one; where the "
                          "phase's baseline processes disagree with each other (baseline not deterministic on this "
                          "runtime), 'within baseline noise' when its rounds leave every baseline process on no more "
                          "rounds than the baselines disagree on.",
}
"""Plain-language meaning of the columns a person decides on (HTML report and docs)."""
