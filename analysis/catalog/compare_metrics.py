"""Compare two catalogued runs on the per-record metrics and on the serving results (B vs A).

What is modelled: labels of runs A and B are paired by setting as in ``analysis.catalog.compare``
(phase, implementation, G, N, prefetch step, params; serving rows also by configured request rate and step
delay, so a speed control, a baseline whose every forward sleeps, never pools with the undelayed baseline).
For each pair and metric the per-process values (per-repeat values for serving) of B are compared with
A's by ``analysis.comparison.verdict_rule.unpaired_interval`` (the verdict rule's 95% t interval of ``B / A - 1``,
percent: ratio of geometric means; no interval where a value is 0) and ``analysis.comparison.verdict_rule.verdict``; for a lower-is-better metric
(latency, memory, load time) the interval is negated first, so "better" always means B is better than A.
Verdicts: better / worse / equivalent / inconclusive (fewer than two values on a side, or an interval
straddling the margin); ``withheld`` where a process of either side of a ``cases`` pair was contended (foreign
work on the host while it measured, ``host_load.contended``). A metric a run's records predate (NULL) gives no row.

Metrics: ``PER_RECORD`` (cases table: requests/s, P50 / P95 round latency, peak load RSS, load seconds)
and ``SERVING`` (serving_results: P99 TTFT / TPOT / ITL / E2E, goodput, SLO attainment).

What is deliberately not modelled: multiple-comparison correction across pairs and metrics.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.catalog.store import CatalogError, connect
from analysis.catalog.compare import resolve_run
from analysis.comparison.verdict_rule import unpaired_interval, verdict

PER_RECORD: dict[str, bool] = {"requests_per_s": True, "round_latency_p50_s": False, "round_latency_p95_s": False,
                               "rss_peak_load_bytes": False, "load_seconds": False}
"""cases column -> higher is better."""

SERVING: dict[str, bool] = {"ttft_p99_ms": False, "tpot_p99_ms": False, "itl_p99_ms": False, "e2el_p99_ms": False,
                            "goodput_req_s": True, "slo_attainment": True}
"""serving_results column -> higher is better."""

SETTING = ["implementation", "group_size", "num_in_group", "prefetch_step", "offload_params"]

COLUMNS = ["table", "phase", "label_a", "label_b", "request_rate", "metric", "n_a", "n_b", "median_a", "median_b",
           "delta_pct", "ci_low_pct", "ci_high_pct", "verdict"]

_WORDS = {"faster": "better", "slower": "worse", "equivalent": "equivalent", "inconclusive": "inconclusive"}


def metric_verdict(a: list[float], b: list[float], higher_is_better: bool,
                   margin_pct: float | None = None) -> tuple[float, float, float, str]:
    """``(delta_pct, ci_low_pct, ci_high_pct, verdict)`` of B vs A for one metric.

    Raises:
        CatalogError: a margin the verdict rule rejects, or an empty side.
    """
    if not a or not b:
        raise CatalogError(f"metric_verdict needs values on both sides (got {len(a)} and {len(b)})")
    iv = unpaired_interval(b, a)
    lo_p, hi_p = iv.low_pct, iv.high_pct
    med_a, med_b = float(pd.Series(a).median()), float(pd.Series(b).median())
    delta = (med_b - med_a) / med_a * 100.0 if med_a else math.nan
    lo, hi = (lo_p, hi_p) if higher_is_better else (-hi_p, -lo_p)
    try:
        v = verdict(lo, hi) if margin_pct is None else verdict(lo, hi, margin_pct=margin_pct)
    except ValueError as exc:
        raise CatalogError(str(exc)) from exc
    return delta, lo_p, hi_p, _WORDS[v]


def _rows(df: pd.DataFrame, a: str, b: str, metrics: dict[str, bool], key: list[str], table: str,
          margin_pct: float | None) -> list[dict]:
    out = []
    da, db = df[df["run_id"] == a], df[df["run_id"] == b]
    for k, ga in da.groupby(key, dropna=False):
        gb = db.loc[(db[key] == pd.Series(k, index=key)).all(axis=1)]
        if gb.empty:
            continue
        for m, higher in metrics.items():
            va, vb = ga[m].dropna().astype(float).tolist(), gb[m].dropna().astype(float).tolist()
            if not va or not vb:
                continue
            delta, lo, hi, v = metric_verdict(va, vb, higher, margin_pct)
            if "contended" in df and (ga["contended"].any() or gb["contended"].any()):
                v = "withheld"  # a value of a contended process (foreign work beside it): no verdict
            kd = dict(zip(key, k, strict=True))
            out.append({"table": table, "phase": kd["phase"], "label_a": ga["label"].iloc[0],
                        "label_b": gb["label"].iloc[0], "request_rate": kd.get("request_rate", ""), "metric": m,
                        "n_a": len(va), "n_b": len(vb), "median_a": float(pd.Series(va).median()),
                        "median_b": float(pd.Series(vb).median()), "delta_pct": delta, "ci_low_pct": lo,
                        "ci_high_pct": hi, "verdict": v})
    return out


def compare_metrics(db, run_a: str, run_b: str, *, margin_pct: float | None = None) -> pd.DataFrame:
    """B-vs-A rows (``COLUMNS``) for every paired label and metric of ``PER_RECORD`` and ``SERVING``.

    Raises:
        CatalogError: unknown or ambiguous run, missing catalog, a margin the verdict rule rejects.
    """
    con = connect(db, read_only=True)
    try:
        a, b = resolve_run(con, run_a), resolve_run(con, run_b)
        cases = con.execute(f"SELECT run_id, phase, label, {', '.join(SETTING + list(PER_RECORD))}, "
                            "coalesce(host_load_contended, false) AS contended FROM cases "
                            "WHERE run_id IN (?, ?)", [a, b]).df()
        serving = con.execute(f"SELECT run_id, phase, label, request_rate, {', '.join(SETTING + list(SERVING))}, "
                              "coalesce(step_delay_ms, 0) AS step_delay_ms "
                              "FROM serving_results WHERE run_id IN (?, ?)", [a, b]).df()
    finally:
        con.close()
    rows = _rows(cases, a, b, PER_RECORD, ["phase", *SETTING], "cases", margin_pct)
    rows += _rows(serving, a, b, SERVING, ["phase", *SETTING, "step_delay_ms", "request_rate"], "serving_results",
                  margin_pct)
    return pd.DataFrame(rows, columns=COLUMNS)
