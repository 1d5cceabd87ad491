"""The published analyzer's view of a run: three capacity axes, selectable Pareto axis, its columns.

What is modelled (one row per (phase, label), on top of ``analysis.aggregate.aggregate``):

* capacity, all three reported: ``offloaded_bytes`` (the published "weight saved"),
  ``released_bytes`` (offloaded minus the device static buffers: what the device really
  gains) and ``kv_gain_bytes`` (the measured KV-cache gain from the engine log vs the phase
  baseline, GiB = 2**30 bytes); the Pareto front / knee / ``dominated_by`` on the axis
  chosen (``capacity_axis``; ``offloaded_bytes`` reproduces the published fronts);
* ``kv_gain_exceeds_released``: the KV gain exceeds the released bytes by more than the log's
  rounding (``KV_GIB_LOG_RESOLUTION``). The published knee (28,1) offloads one layer with a
  one-slot static buffer of one layer: it releases 0 bytes, yet its KV cache grew: a buffer
  outside the engine's profiled budget, an over-subscription risk on a fuller device. NA when
  no KV gain is known (CPU runtime);
* the published columns: ``runs_tok_s`` (per-process throughputs, repeat order),
  ``dominated_by`` (labels of the points that strictly dominate this one on the chosen axis,
  same implementation or the baseline), ``pooled_round_throughput_mean_tok_s`` and
  ``pooled_change_pct`` (vs the phase baseline's pooled mean, percent),
  ``round_latency_p50_median_s`` (median over processes of each process's P50 round latency,
  type-7 percentile; the record's ``round_latency_p50_s`` when it has one) and ``published_stdev_tok_s`` (sample stdev of process throughputs, shown
  as 0 with one process; ``throughput_stdev_tok_s`` keeps NaN there: no spread is measured);
* the published per-process fields of the records (``RECORD_METRICS``), median over a label's
  processes: ``requests_median``, ``requests_per_s_median`` (req/s), ``round_latency_p95_median_s``,
  RSS and device memory (``npu-smi`` HBM / ``nvidia-smi``) before / peak / after load
  (``*_load_bytes_median``) and ``device_memory_source``; NaN where the records lack them (CPU device
  memory, records written before the fields), never 0.

What is deliberately not modelled: verdicts (``analysis.comparison.compare``), the report layout.

``python -m analysis.published RUN_DIR [--capacity-axis AXIS] [--out FILE.csv]`` prints / writes it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.aggregate import CAPACITY_AXES, KEY, aggregate
from analysis.load import RunData
from results_schema.units import GIB

KV_GIB_LOG_RESOLUTION = 0.005
"""Half the last printed digit of vLLM's ``Available KV cache memory: X.XX GiB`` (GiB)."""

PUBLISHED_COLUMNS = [
    "phase", "label", "implementation", "group_size", "num_in_group", "processes", "runs_tok_s",
    "throughput_median_tok_s", "throughput_mean_tok_s", "published_stdev_tok_s",
    "pooled_round_throughput_mean_tok_s", "pooled_change_pct", "throughput_change_pct",
    "round_latency_p50_median_s", "offloaded_bytes", "static_buffer_bytes", "released_bytes", "kv_gain_gib",
    "kv_gain_bytes", "kv_gain_exceeds_released", "pareto_axis", "pareto", "knee", "dominated_by",
    *(f"{f}_median" for f in ("requests", "requests_per_s")), "round_latency_p95_median_s",
    *(f"{f}_median" for f in ("rss_before_load_bytes", "rss_peak_load_bytes", "rss_after_load_bytes",
                              "device_memory_before_load_bytes", "device_memory_peak_load_bytes",
                              "device_memory_after_load_bytes")), "device_memory_source",
]

RECORD_METRICS = ("requests", "requests_per_s", "round_latency_p50_s", "round_latency_p95_s", "rss_before_load_bytes",
                  "rss_peak_load_bytes", "rss_after_load_bytes", "device_memory_before_load_bytes",
                  "device_memory_peak_load_bytes", "device_memory_after_load_bytes")
"""The published per-process fields of ``BenchRecord`` (``results_schema.records.load_metrics``) summarized per label."""


def dominated_by(capacity: Sequence[float], throughput: Sequence[float], labels: Sequence[str]) -> list[list[str]]:
    """Per point, the labels of the points that strictly dominate it (>= both, > one); NaN never dominates."""
    out = []
    for i, (c, t) in enumerate(zip(capacity, throughput, strict=True)):
        doms = []
        for j, (c2, t2) in enumerate(zip(capacity, throughput, strict=True)):
            if j != i and not np.isnan([c, t, c2, t2]).any() and c2 >= c and t2 >= t and (c2 > c or t2 > t):
                doms.append(str(labels[j]))
        out.append(doms)
    return out


def record_metrics(data: RunData) -> pd.DataFrame:
    """One row per case process: ``KEY`` + ``repeat`` + ``RECORD_METRICS`` (NaN where a record lacks them) +
    ``device_memory_source``."""
    rows = [(r.phase, r.label, r.repeat, *(getattr(r, f) for f in RECORD_METRICS), r.device_memory_source)
            for _p, _l, cr in data.case_runs for r in [cr.record]]
    df = pd.DataFrame.from_records(rows, columns=[*KEY, "repeat", *RECORD_METRICS, "device_memory_source"])
    for f in RECORD_METRICS:
        df[f] = df[f].astype("float64")
    return df.set_index([*KEY, "repeat"])


def _add_record_metrics(out: pd.DataFrame, data: RunData, keys: list[tuple[str, str]]) -> None:
    """Per-label medians of the per-process published fields; each process's P50 from its record when it has
    one, else from its rounds (type 7).

    A record's ``round_latency_p50_s`` equals its rounds' type-7 P50 (``BenchRecord`` validates it), so
    the two sources agree; ``ValueError`` if they do not (a frame not read through the schema). Missing
    values stay NaN (never 0); ``device_memory_source`` joins the distinct sources of a label.
    """
    m = record_metrics(data)
    p50 = data.rounds.groupby(KEY + ["repeat"], sort=False)["elapsed_s"].quantile(0.5)
    p50.index = p50.index.set_names([*KEY, "repeat"])
    rec = m["round_latency_p50_s"].dropna()
    both = pd.concat([rec, p50], axis=1, join="inner")
    if not np.allclose(both.iloc[:, 0], both.iloc[:, 1], rtol=1e-6, atol=1e-9):
        raise ValueError("round_latency_p50_s of a record disagrees with the P50 of its rounds")
    p50 = rec.combine_first(p50)
    per_label = p50.groupby(level=[0, 1]).median()
    out["round_latency_p50_median_s"] = [float(per_label.get(k, np.nan)) for k in keys]
    med = m.groupby(level=[0, 1])[list(RECORD_METRICS)].median()
    out["round_latency_p95_median_s"] = [float(med["round_latency_p95_s"].get(k, np.nan)) for k in keys]
    for f in RECORD_METRICS:
        if not f.startswith("round_latency_"):
            out[f"{f}_median"] = [float(med[f].get(k, np.nan)) for k in keys]
    sources = m.groupby(level=[0, 1])["device_memory_source"].agg(
        lambda v: ",".join(sorted({str(x) for x in v if isinstance(x, str)})))
    out["device_memory_source"] = [sources.get(k, "") for k in keys]


def published_summary(data: RunData, *, capacity_axis: str = "offloaded_bytes") -> pd.DataFrame:
    """``PUBLISHED_COLUMNS`` per (phase, label); Pareto on ``capacity_axis`` (one of ``CAPACITY_AXES``).

    Raises:
        ValueError: unknown ``capacity_axis``.
    """
    out = aggregate(data, capacity_axis=capacity_axis)
    if out.empty:
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)
    out["kv_gain_bytes"] = out["kv_gain_gib"].astype("Float64") * float(GIB)
    runs = data.runs.sort_values(["phase", "label", "repeat"], kind="stable")
    listed = runs.groupby(KEY, sort=False)["throughput_tok_s"].agg(lambda v: ",".join(f"{x:.6g}" for x in v))
    keys = list(zip(out["phase"], out["label"], strict=True))
    out["runs_tok_s"] = [listed.get(k, "") for k in keys]
    out["published_stdev_tok_s"] = [0.0 if int(n) == 1 else float(sd)
                                    for n, sd in zip(out["processes"], out["throughput_stdev_tok_s"], strict=True)]
    pooled = data.rounds.groupby(KEY, sort=False)["throughput_tok_s"].mean()
    out["pooled_round_throughput_mean_tok_s"] = [float(pooled.get(k, np.nan)) for k in keys]
    base = out[out["implementation"] == "baseline"].groupby("phase")["pooled_round_throughput_mean_tok_s"].first()
    out["pooled_change_pct"] = (out["pooled_round_throughput_mean_tok_s"] / out["phase"].map(base).astype("float64")
                                - 1.0) * 100.0
    _add_record_metrics(out, data, keys)
    excess = out["kv_gain_bytes"] - out["released_bytes"].astype("Float64")
    out["kv_gain_exceeds_released"] = (excess > KV_GIB_LOG_RESOLUTION * GIB).astype("boolean")
    out["pareto_axis"] = capacity_axis
    doms: dict[int, set[str]] = {i: set() for i in out.index}
    for _, sub in out.groupby("phase", sort=False):
        base_idx = list(sub.index[sub["implementation"] == "baseline"])
        for impl in sub["implementation"].unique():
            idx = base_idx + ([] if impl == "baseline" else list(sub.index[sub["implementation"] == impl]))
            cap = out.loc[idx, capacity_axis].astype("Float64").astype(float).tolist()
            tp = out.loc[idx, "throughput_median_tok_s"].astype(float).tolist()
            for i, by in zip(idx, dominated_by(cap, tp, out.loc[idx, "label"].tolist()), strict=True):
                doms[i] |= set(by)
    out["dominated_by"] = [",".join(sorted(doms[i])) for i in out.index]
    return out[PUBLISHED_COLUMNS]


def main(argv: Sequence[str] | None = None) -> int:
    from analysis.load import load_run

    ap = argparse.ArgumentParser(prog="python -m analysis.published", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--capacity-axis", default="offloaded_bytes", choices=CAPACITY_AXES)
    ap.add_argument("--out", default=None, help="CSV file to write (default: print the table)")
    a = ap.parse_args(argv)
    run_dir = Path(a.run_dir)
    if not run_dir.is_dir():
        print(f"error: {run_dir} is not a run directory", file=sys.stderr)
        return 2
    table = published_summary(load_run(run_dir), capacity_axis=a.capacity_axis)
    if a.out:
        table.to_csv(a.out, index=False)
    else:
        print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
