"""The report's tables: every frame of a run's summary, computed from the validated records.

What is modelled: ``build(run_dir)`` loads and validates the run, aggregates per label, compares
implementations and fits the transfer-bound model (``analysis.model.fit``); ``records`` turns a frame into
JSON-safe rows; ``display_columns`` adds the text columns of the main table. Every number comes from
the validated records; offloaded/released bytes and selected layers come from evidence, never from labels.

What is deliberately not modelled: rendering (``analysis.report.markdown``, ``analysis.report.plots``,
``analysis.report.html``) and writing files (``analysis.report.summary``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.aggregate import aggregate
from analysis.comparison.compare import (
    compare_implementations,
    confirmation_table,
    label_vs_baseline,
    long_window_table,
    native_vs_same_runtime,
    run_sequential_verdicts,
    spaced_vs_adjacent,
    vs_baseline_text,
)
from analysis.comparison.dimensioning import aa_comparisons, design_rows
from analysis.comparison.paired_aa import effects_by_design, group_runs
from analysis.comparison.shared_time import shared_in_time
from analysis.comparison.variance import variance_components
from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT, check_margin
from analysis.load import RunData, load_run
from analysis.model.fit import fit_model, model_table
from analysis.model.trust import trust_fields, untrusted_reason
from analysis.validation.validate import point_exclusions, validate_run
from analysis.validation.checks import token_digest_status

CPU_NOTE = ("CPU runtime: host and \"device\" memory are the same RAM. \"released bytes\" are accounted bytes "
            "(what the offloader moved out of the device-resident set, minus its static buffers; what it would "
            "free on an accelerator), not measured memory: process RSS and KV-cache capacity do not change.")
"""Caveat printed under every CPU-runtime table and in the recommender output."""


def is_cpu_run(frame: pd.DataFrame) -> bool:
    """True when any row of ``frame`` (a runs or summary frame with a ``runtime`` column) ran on ``cpu``."""
    return "runtime" in frame and not frame.empty and (frame["runtime"].astype(str) == "cpu").any()

PRECISION: dict[str, int] = {
    "throughput_median_tok_s": 2, "throughput_mean_tok_s": 2, "throughput_stdev_tok_s": 2,
    "throughput_min_tok_s": 2, "throughput_max_tok_s": 2, "pooled_round_throughput_median_tok_s": 2,
    "pooled_round_throughput_stdev_tok_s": 2, "round_latency_p50_s": 4, "round_latency_p95_s": 4,
    "load_seconds_median": 2, "kv_cache_tokens_median": 1, "kv_cache_gib_median": 4, "peak_rss_bytes_median": 0,
    "device_memory_bytes_median": 0, "baseline_throughput_median_tok_s": 2, "retention": 4,
    "throughput_change_pct": 2, "kv_gain_tokens": 1, "kv_gain_gib": 4,
}
"""Decimals each per-label statistic is printed with (Markdown); ``analysis verify`` compares at this precision."""



def clean(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
    if isinstance(v, tuple):
        return list(v)
    return v


def records(df: pd.DataFrame) -> list[dict]:
    """Frame -> JSON-safe list of dicts (NaN/NA -> None, numpy scalars -> Python)."""
    return [{k: clean(v) for k, v in row.items()} for row in df.astype(object).to_dict(orient="records")]


def display_columns(summary: pd.DataFrame) -> pd.DataFrame:
    """Add the text columns of the main table: ``vs_baseline`` (verdict, CI, margin), ``window``, ``notes``."""
    s = summary.copy()
    if s.empty:
        for c in ("vs_baseline", "window", "notes"):
            s[c] = []
        return s
    vb, win, notes = [], [], []
    for _, r in s.iterrows():
        v = r.get("vs_baseline_verdict")
        if v is None or (isinstance(v, float) and math.isnan(v)):
            vb.append("–")
        elif v == "reference":
            vb.append("reference")
        else:
            vb.append(vs_baseline_text(v, r.get("vs_baseline_ci_low_pct"), r.get("vs_baseline_ci_high_pct"),
                                       float(r.get("vs_baseline_margin_pct")), r.get("vs_baseline_ci_name")))
        ws = r.get("window_measured_s_min")
        win.append("–" if ws is None or (isinstance(ws, float) and math.isnan(ws)) else
                   f"{float(ws):.2f} s / {int(r.get('window_rounds_min'))} rounds (min per process)")
        n = [part for x in (r.get("vs_baseline_note"), r.get("front_excluded")) if isinstance(x, str) and x
             for part in x.split("; ")]
        notes.append("; ".join(dict.fromkeys(n)))
    s["vs_baseline"], s["window"], s["notes"] = vb, win, notes
    return s


def _digest_column(data: RunData, summary: pd.DataFrame) -> list[str]:
    st = token_digest_status(data)
    out = []
    for _, r in summary.iterrows():
        vals = {v for (p, lb, _rep), v in st.items() if p == r["phase"] and lb == r["label"]}
        out.append("differs" if "differs" in vals else ("identical" if vals == {"identical"} else
                   "within baseline noise" if "within_baseline_noise" in vals else "no_baseline"))
    return out



def build(run_dir: Path | str, *, model_dir: Path | str | None = None,
          margin_pct: float = DEFAULT_MARGIN_PCT) -> dict:
    """Compute every table of the report (no files written).

    Args:
        run_dir: the run directory.
        model_dir: model directory for the layer-byte checks (see ``analysis.validation.validate.validate_run``).
        margin_pct: equivalence margin of every verdict (``analysis.comparison.verdict_rule.verdict``), percent > 0.

    Returns:
        dict with frames ``summary``, ``comparison``, ``long_window``, ``spaced_vs_adjacent``,
        ``cross_stack``, ``model_table``; ``models`` (per phase, dict or None); ``validation``
        (``ValidationReport``); ``data`` (``RunData``); ``margin_pct``; ``variance`` (variance components per
        phase and arm, ``analysis.comparison.variance``) and ``effects`` (each label's minimum detectable cost,
        ``analysis.comparison.power``), ``aa`` and ``dimensioning`` (``analysis.comparison.dimensioning``), lists
        of dicts.

    Raises:
        ValueError: a margin that is not a finite number > 0.
    """
    check_margin(margin_pct)
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    report = validate_run(run_dir, data, model_dir=model_dir)
    summary = aggregate(data, excluded=point_exclusions(report, data))
    summary["tokens"] = _digest_column(data, summary) if not summary.empty else []
    seq = run_sequential_verdicts(data)  # once: the decision columns and the A/A rows both read them
    grouped = group_runs(data.runs)  # once: the paired A/A, control and MDE rows read it
    if not summary.empty:
        vb = label_vs_baseline(data, summary, margin_pct=margin_pct, sequential=seq)
        for c in vb.columns:
            summary[c] = vb[c]
    comparison = compare_implementations(data, summary, margin_pct=margin_pct)
    lw = long_window_table(data, summary, margin_pct=margin_pct)
    sva = spaced_vs_adjacent(data, summary, margin_pct=margin_pct)
    cross = native_vs_same_runtime(summary)
    confirm = confirmation_table(summary)
    models, mt = model_fits(run_dir, data, summary)
    return {"data": data, "validation": report, "summary": summary, "comparison": comparison, "long_window": lw,
            "spaced_vs_adjacent": sva, "cross_stack": cross, "confirmation": confirm, "models": models, "model_table": mt,
            "margin_pct": float(margin_pct), "variance": variance_components(data.runs, data.rounds),
            "shared": shared_in_time(data.runs),
            "effects": effects_by_design(data.runs, data.rounds, margin_pct=margin_pct, sequential=seq,
                                         grouped=grouped),
            "aa": aa_comparisons(data.runs, margin_pct=margin_pct, sequential=seq, grouped=grouped),
            "dimensioning": design_rows(data.runs, data.rounds, margin_pct=margin_pct)}


def model_fits(run_dir: Path, data: RunData, summary: pd.DataFrame) -> tuple[dict[str, dict | None], pd.DataFrame]:
    """Transfer-bound model of every ``phase/implementation`` (``analysis.model.fit.fit_model``; None when
    it cannot be fitted) and the predicted-vs-measured table of the fitted ones."""
    models: dict[str, dict | None] = {}
    mtables = []
    bench = copy_bench_bandwidth(run_dir)
    for phase in summary["phase"].unique():
        ph = summary[summary["phase"] == phase]
        for impl in ph["implementation"].unique():
            if impl == "baseline":
                continue
            m = fit_model(summary, data.runs, phase, implementation=impl, bench_bandwidth_bytes_s=bench)
            models[f"{phase}/{impl}"] = None if m is None else {
                "phase": phase, "implementation": impl, "mode": m.mode, "baseline_tok_s": m.baseline_tok_s,
                "num_prompts": m.num_prompts, "num_layers": m.num_layers, "bytes_per_layer": m.bytes_per_layer,
                "bandwidth_bytes_s": m.bandwidth_bytes_s, "bandwidth": m.bandwidth_source,
                "fit_rms_error_pct": m.fit_rms_error_pct, "fit_points": m.fit_points,
                "predictions_trusted": (untrusted_reason(m) is None), **trust_fields(m),
                "copy_bench_bandwidth_bytes_s": bench}
            if m is not None:
                t = model_table(summary, m, phase)
                if not (untrusted_reason(m) is None):  # an untrusted model predicts nothing, in every output
                    t["predicted_tok_s"] = float("nan")
                    t["error_pct"] = float("nan")
                t = t[t["label"].isin(ph.loc[ph["implementation"] == impl, "label"])]
                t.insert(1, "implementation", impl)
                mtables.append(t)
    return models, (pd.concat(mtables, ignore_index=True) if mtables else pd.DataFrame())


def copy_bench_bandwidth(run_dir: Path | str) -> float | None:
    """Plain ``copy_`` bandwidth (bytes/s) that ``offload_tools.bench`` measured for this run
    (``<run_dir>/copy-bench.json``, written by the runner on CPU runs); None when absent."""
    path = Path(run_dir) / "copy-bench.json"
    if not path.is_file():
        return None
    try:
        v = float(json.loads(path.read_text())["plain_copy_bandwidth_bytes_s"])
    except (ValueError, KeyError, TypeError):
        return None
    return v if math.isfinite(v) and v > 0 else None

