"""Per-label aggregation of a loaded run: throughput statistics, evidence bytes, retention, Pareto.

What is modelled (one row per (phase, label)):
    * process throughput (``BenchRecord.throughput_tok_s``, one value per case
      process): median (the primary metric), mean, sample stdev (ddof=1), min, max;
    * pooled measured-round throughput over every round of every process: median, stdev;
    * round latency (``RoundResult.elapsed_s``, one ``generate`` call over all
      prompts): P50 and P95, linear interpolation between order statistics
      (numpy's default, Hyndman & Fan type 7);
    * medians of load seconds, KV cache tokens / GiB, peak RSS, device memory;
    * from *evidence only* (never from labels): selected layers, wrapped count,
      offloaded, static-buffer and released bytes (taken from the first process;
      ``analysis.validation.validate`` checks the repeats agree);
    * vs the phase baseline (``implementation == "baseline"``): retention =
      median / baseline median, change in percent, KV gain (tokens, GiB);
    * Pareto flag per implementation (capacity = released bytes by default, or offloaded
      bytes / measured KV gain: ``capacity_axis``; maximise both,
      the baseline included as the zero-capacity point) and the planner's knee
      (``analysis.comparison.pareto.KNEE_RULE``), over *eligible* points only: a label whose
      generated tokens differ from the phase baseline, or that ``excluded`` names
      (validation errors of its evidence, logs, counts...), whose verdict is withheld because a process it
      rests on was contended, or that has an unstable process (``analysis.comparison.soundness``), is never
      on the front nor the knee; ``front_excluded`` says why (empty when eligible).
    * processes of the label that were contended (``contended_processes``) or unstable
      (``unstable_processes``);
    * the measured window: shortest measured seconds and fewest measured rounds of any
      process of the label (``window_measured_s_min``, ``window_rounds_min``);

What is deliberately not modelled: significance (``analysis.comparison.compare``) and
validity (``analysis.validation.validate``); rows are produced even for invalid runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from collections.abc import Mapping

from analysis.comparison.variance import reference_mask
from analysis.load import RunData
from analysis.comparison import soundness
from analysis.comparison.pareto import knee_index, pareto_mask
from results_schema.units import GIB

KEY = ["phase", "label"]

SUMMARY_COLUMNS = [
    "phase", "label", "implementation", "group_size", "num_in_group", "prefetch_step", "offload_params", "runtime",
    "processes", "throughput_median_tok_s", "throughput_mean_tok_s", "throughput_stdev_tok_s",
    "throughput_min_tok_s", "throughput_max_tok_s", "pooled_round_throughput_median_tok_s",
    "pooled_round_throughput_stdev_tok_s", "rounds", "round_latency_p50_s", "round_latency_p95_s",
    "load_seconds_median", "kv_cache_tokens_median", "kv_cache_gib_median", "peak_rss_bytes_median",
    "device_memory_bytes_median", "selected_layers", "num_selected_layers", "wrapped_layers", "wrapped_count",
    "offloaded_bytes", "static_buffer_bytes", "released_bytes", "offloader_class", "baseline_throughput_median_tok_s",
    "retention", "throughput_change_pct", "kv_gain_tokens", "kv_gain_gib", "window_measured_s_min",
    "window_rounds_min", "contended_processes", "unstable_processes", "front_excluded", "pareto", "knee",
]

CAPACITY_AXES = ("offloaded_bytes", "released_bytes", "kv_gain_bytes")
"""Pareto capacity axes: offloaded bytes (the published "weight saved", reproduces the published
fronts), released bytes (offloaded - device static buffers: what the device really gains; the
project's default) and the measured KV-cache gain from the engine log (bytes, GiB = 2**30)."""


def aggregate(data: RunData, *, excluded: Mapping[tuple[str, str], str] | None = None,
              capacity_axis: str = "released_bytes") -> pd.DataFrame:
    """One summary row per (phase, label), in order of first appearance in the runs files (repeat 0 = plan order).

    Args:
        data: ``analysis.load.load_run`` output.
        excluded: ``{(phase, label): reason}`` of points that must not enter a front or a knee
            (``analysis.validation.validate.point_exclusions``); token differences are always checked here.
        capacity_axis: Pareto capacity axis, one of ``CAPACITY_AXES``.

    Raises:
        ValueError: unknown ``capacity_axis`` (naming the allowed ones).

    Returns:
        DataFrame with ``SUMMARY_COLUMNS``; empty (with columns) when there are no runs.
    """
    if capacity_axis not in CAPACITY_AXES:
        raise ValueError(f"capacity_axis {capacity_axis!r} must be one of {CAPACITY_AXES}")
    runs = data.runs
    if runs.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    out = _per_label(data)
    _add_baseline_relative(out, runs)
    _add_window(out, data)
    keys = list(zip(out["phase"], out["label"], strict=True))
    contended = soundness.contended_keys(runs)
    unstable = soundness.unstable_processes(runs)
    out["contended_processes"] = [sum(1 for c in contended if c[:2] == k) for k in keys]
    out["unstable_processes"] = [sum(1 for u in unstable if u[:2] == k) for k in keys]
    reasons = _exclusions(data, excluded)
    out["front_excluded"] = ["; ".join(reasons.get(k, [])) for k in keys]
    out["kv_gain_bytes"] = out["kv_gain_gib"] * float(GIB)  # Pareto axis only (analysis.published reports it)
    _mark_fronts(out, capacity_axis)
    return out[SUMMARY_COLUMNS]


def _per_label(data: RunData) -> pd.DataFrame:
    """Per (phase, label): configuration, evidence and process / round statistics (index reset)."""
    g = data.runs.groupby(KEY, sort=False)
    thr = g["throughput_tok_s"]
    out = pd.DataFrame({
        "implementation": g["implementation"].first(),
        "group_size": g["group_size"].first(),
        "num_in_group": g["num_in_group"].first(),
        "prefetch_step": g["prefetch_step"].first(),
        "offload_params": g["offload_params"].first().map(lambda t: ",".join(t)),
        "runtime": g["runtime"].first(),
        "processes": g.size(),
        "throughput_median_tok_s": thr.median(),
        "throughput_mean_tok_s": thr.mean(),
        "throughput_stdev_tok_s": thr.std(ddof=1),
        "throughput_min_tok_s": thr.min(),
        "throughput_max_tok_s": thr.max(),
        "load_seconds_median": g["load_seconds"].median(),
        "kv_cache_tokens_median": g["kv_cache_tokens"].median(),
        "kv_cache_gib_median": g["kv_cache_gib"].median(),
        "peak_rss_bytes_median": g["peak_rss_bytes"].median(),
        "device_memory_bytes_median": g["device_memory_bytes"].median(),
        "selected_layers": g["ev_selected_layers"].first().map(_layers_str),
        "num_selected_layers": g["ev_selected_layers"].first().map(len),
        "wrapped_layers": g["ev_wrapped_layers"].first().map(_layers_str),
        "wrapped_count": g["ev_wrapped_count"].first(),
        "offloaded_bytes": g["ev_offloaded_bytes"].first(),
        "static_buffer_bytes": g["ev_static_buffer_bytes"].first(),
        "released_bytes": g["ev_released_bytes"].first(),
        "offloader_class": g["ev_offloader_class"].first(),
    })
    rg = data.rounds.groupby(KEY, sort=False)
    out["pooled_round_throughput_median_tok_s"] = rg["throughput_tok_s"].median()
    out["pooled_round_throughput_stdev_tok_s"] = rg["throughput_tok_s"].std(ddof=1)
    out["rounds"] = rg.size()
    out["round_latency_p50_s"] = rg["elapsed_s"].quantile(0.5)
    out["round_latency_p95_s"] = rg["elapsed_s"].quantile(0.95)
    return out.reset_index()


def _add_baseline_relative(out: pd.DataFrame, runs: pd.DataFrame) -> None:
    """Baseline median, retention, throughput change and KV gain vs the phase baseline (in place): the phase's
    undelayed baselines pooled (``analysis.comparison.variance.reference_mask``; a speed control is none of them)."""
    base = runs[reference_mask(runs)].groupby("phase")
    base_thr = base["throughput_tok_s"].median()
    base_kv = base["kv_cache_tokens"].median()
    base_kvg = base["kv_cache_gib"].median()
    out["baseline_throughput_median_tok_s"] = out["phase"].map(base_thr).astype("float64")
    out["retention"] = out["throughput_median_tok_s"] / out["baseline_throughput_median_tok_s"]
    out["throughput_change_pct"] = (out["retention"] - 1.0) * 100.0
    out["kv_gain_tokens"] = out["kv_cache_tokens_median"].astype("Float64") - out["phase"].map(base_kv).astype("Float64")
    out["kv_gain_gib"] = out["kv_cache_gib_median"].astype("Float64") - out["phase"].map(base_kvg).astype("Float64")


def _add_window(out: pd.DataFrame, data: RunData) -> None:
    """Shortest measured window (s) and fewest measured rounds over each label's processes (in place)."""
    pg = data.runs.groupby(["phase", "label", "repeat"], sort=False)
    per_proc = pd.DataFrame({"elapsed_s": pg["elapsed_s"].first(),
                             "rounds": data.rounds.groupby(["phase", "label", "repeat"], sort=False).size()})
    per_label = per_proc.groupby(level=[0, 1], sort=False)
    win_s, win_r = per_label["elapsed_s"].min(), per_label["rounds"].min()
    keys = list(zip(out["phase"], out["label"], strict=True))
    out["window_measured_s_min"] = [float(win_s.get(k, float("nan"))) for k in keys]
    out["window_rounds_min"] = [int(win_r.get(k, 0)) for k in keys]


def _mark_fronts(out: pd.DataFrame, capacity_axis: str) -> None:
    """``pareto`` and ``knee`` flags per phase and implementation (baseline included), eligible points only."""
    out["pareto"] = False
    out["knee"] = False
    for _phase, sub in out.groupby("phase", sort=False):
        base_idx = list(sub.index[sub["implementation"] == "baseline"])
        for impl in sub["implementation"].unique():
            if impl == "baseline":
                continue
            idx = base_idx + list(sub.index[sub["implementation"] == impl])
            idx = [i for i in idx if not out.loc[i, "front_excluded"]]
            if not idx:
                continue
            cap = out.loc[idx, capacity_axis].astype("Float64").astype(float).tolist()
            tp = out.loc[idx, "throughput_median_tok_s"].astype(float).tolist()
            mask = pareto_mask(cap, tp)
            for i, m in zip(idx, mask, strict=True):
                if m:
                    out.loc[i, "pareto"] = True
            k = knee_index(cap, tp, mask)
            if k is not None:
                out.loc[idx[k], "knee"] = True
        if sub["implementation"].eq("baseline").all():
            out.loc[[i for i in base_idx if not out.loc[i, "front_excluded"]], "pareto"] = True


def _exclusions(data: RunData, excluded: Mapping[tuple[str, str], str] | None) -> dict[tuple[str, str], list[str]]:
    from analysis.validation.checks import token_statuses

    reasons: dict[tuple[str, str], list[str]] = {}
    for (phase, label), why in (excluded or {}).items():
        if why:
            reasons.setdefault((phase, label), []).append(why)
    for key, whys in soundness.point_exclusions(data.runs).items():
        reasons.setdefault(key, []).extend(w for w in whys if w not in reasons.get(key, []))
    for (phase, label, _rep), st in token_statuses(data.record_views).items():
        if st == "differs":
            why = "tokens differ from the phase baseline"
            if why not in reasons.get((phase, label), []):
                reasons.setdefault((phase, label), []).append(why)
    return reasons


def _layers_str(t) -> str:
    return ",".join(str(i) for i in t)


def percentile(values, q: float) -> float:
    """Type-7 percentile of ``values`` (q in [0, 100]); NaN for empty input."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0:
        return float("nan")
    return float(np.percentile(v, q))
