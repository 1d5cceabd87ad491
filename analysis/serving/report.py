"""Serving report rendering (``analysis.serving.summary``): Markdown tables and the latency / front plots.

What is modelled: ``render_markdown`` (validity, SLO, per-rate latency table, SLO rates and front,
current vs official verdicts on P99 TPOT); ``plot_latency`` (P50 / P99 TTFT, TPOT, ITL vs achieved
rate) and ``plot_front`` (released MiB vs the highest rate meeting the SLO).

What is deliberately not modelled: computing the tables (``analysis.serving.summary``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.serving.request_checks import ServingValidation  # noqa: E402

NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}

@dataclass(frozen=True)
class SummaryFrames:
    """The tables of ``analysis.serving.stats`` and ``analysis.serving.outputs`` (frames of their row dicts)."""

    percentiles: pd.DataFrame
    baseline_verdicts: pd.DataFrame
    order: pd.DataFrame
    outputs: pd.DataFrame


def _rate_txt(r: float) -> str:
    return "inf" if math.isinf(r) else f"{r:g}"


def _f(v: Any, d: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{v:,.{d}f}"
    return str(v)


def render_markdown(table: pd.DataFrame, slo: pd.DataFrame, verd: pd.DataFrame, val: ServingValidation,
                    slo_def: dict[str, float] | None, *, cpu: bool = False, extra: SummaryFrames | None = None) -> str:
    """The serving Markdown: validity line, per-rate table, SLO-rate front, verdicts (``cpu``: add the CPU note);
    with ``extra``: outputs under load, verdicts vs the baseline's floor, percentiles with n, rate order."""
    lines = [f"serving: {'VALID' if val.valid else 'INVALID'} ({len(val.errors)} error(s), "
             f"{len(val.warnings)} warning(s))"]
    lines += [f"  error: {e}" for e in val.errors[:20]]
    lines += [f"  warning: {w}" for w in val.warnings[:20]]
    if slo_def:
        lines += ["", f"SLO: TTFT <= {slo_def['ttft_ms']:g} ms and TPOT <= {slo_def['tpot_ms']:g} ms per request; a rate "
                  f"meets it when no request failed and >= {slo_def['attainment']:.0%} of requests are good. TPOT = "
                  "(E2E - TTFT) / (output tokens - 1) per request; ITL = every chunk gap pooled over requests "
                  "(vLLM's definitions). Medians over repeats."]
    if not table.empty and int(table["repeats"].min()) < 2:
        lines += ["Fewer than 2 repeats for some label: its numbers are single measurements; a difference between "
                  "labels is not a verdict (verdicts need >= 2 processes per side)."]
    if not table.empty and cpu:
        from analysis.report.tables import CPU_NOTE

        lines += [CPU_NOTE]
    if not table.empty and "prefix_caching" in table:
        pc = sorted(set(table["prefix_caching"]))
        lines += [f"Prefix caching: {'on' if pc == [True] else 'off' if pc == [False] else 'mixed'}; distinct "
                  f"prompts per rate: {int(table['distinct_prompts'].min())}-{int(table['distinct_prompts'].max())} "
                  f"of {int(table['num_prompts'].max())} (vLLM's random dataset; warm-up requests reuse the first "
                  "prompt and are excluded)."]
    pct = extra.percentiles if extra is not None else pd.DataFrame()
    lines += _rate_table_md(table, pct)
    if not slo.empty:
        lines += ["", "| label | released B | highest rate meeting the SLO (req/s) | achieved req/s there | front |",
                  "|---|---|---|---|---|"]
        for _i, r in slo.iterrows():
            rate = "none" if math.isnan(r["slo_rate_rps"]) else _rate_txt(r["slo_rate_rps"])
            lines.append(f"| {r['label']} | {int(r['released_bytes']):,} | {rate} | "
                         f"{_f(r['slo_achieved_req_s'], 2)} | {'yes' if r['on_front'] else ''} |")
    if not verd.empty:
        lines += ["", "| G | N | rate req/s | current P99 TPOT ms | official P99 TPOT ms | verdict |",
                  "|---|---|---|---|---|---|"]
        for _i, r in verd.iterrows():
            lines.append(f"| {r['group_size']} | {r['num_in_group']} | {_rate_txt(r['rate_rps'])} | "
                         f"{_f(r['a_p99_tpot_ms'])} ({r['a_repeats']}) | {_f(r['b_p99_tpot_ms'])} ({r['b_repeats']}) | "
                         f"{r['verdict_text']} |")
    elif not table.empty:
        lines += ["", "current vs official on P99 TPOT: no pair (the phase has no official cases)."]
    if extra is not None:
        lines += _outputs_md(extra.outputs) + _baseline_md(extra.baseline_verdicts) + _pct_md(pct) + \
            _order_md(extra.order)
    return "\n".join(lines) + "\n"


def _rate_table_md(table: pd.DataFrame, pct: pd.DataFrame) -> list[str]:
    """The per-rate table, its latencies pooled over repeats with their n."""
    if table.empty:
        return []
    lines = ["", "Latencies pool the requests of every repeat at a rate (n = the sample: requests, for ITL "
             "chunk gaps); a percentile n cannot resolve is printed as the sample's max (P99 of fewer than "
             "100 requests is the slowest request).",
             "", "| label | rate req/s | repeats | achieved req/s | out tok/s | TTFT P50 / P99 ms | "
             "TPOT P50 / P99 ms | ITL P50 / P99 ms | E2E P99 ms | goodput req/s | SLO | offloader | "
             "wrapped layers | offloaded B |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _i, r in table.iterrows():
        lat = {m: _pooled(pct, r, m) for m in NAMES}
        slo_txt = "met" if r["meets_slo"] else ("missed" if r.get("slo_supported", True) else
                                                f"no verdict (n {int(r['completed_requests'])})")
        lines.append(
            f"| {r['label']} | {_rate_txt(r['rate_rps'])} | {int(r['repeats'])} | {_f(r['achieved_req_s'], 2)} | "
            f"{_f(r['output_tok_s'])} | {lat['ttft']} | {lat['tpot']} | {lat['itl']} | "
            f"{_pooled(pct, r, 'e2el', (99,))} | {_f(r['goodput_req_s'], 2)} | {slo_txt} | "
            f"{str(r['offloader_class']).rsplit('.', 1)[-1]} | {r['wrapped_layers'] or '–'} | "
            f"{int(r['offloaded_bytes']):,} |")
    return lines


def _pct_txt(row: Any) -> str:
    """``12.3`` / ``max 40.1`` with ``(n 32)``."""
    v = _f(row["value_ms"])
    return (f"{v} (n {int(row['n'])})" if row["kind"] == "percentile" else f"{row['kind']} {v} (n {int(row['n'])})")


def _pooled(pct: pd.DataFrame, r: Any, metric: str, ps: tuple[int, ...] = (50, 99)) -> str:
    """The pooled percentiles ``ps`` of ``metric`` at the table row's label and rate, each with its n."""
    if pct.empty:
        return "–"
    rate = r["rate_rps"]
    sel = pct[(pct["phase"] == r["phase"]) & (pct["label"] == r["label"]) & (pct["metric"] == metric)]
    sel = sel[[_same_rate(x, rate) for x in sel["rate_rps"]]]
    out = []
    for p in ps:
        got = sel[sel["percentile"] == p]
        out.append(_pct_txt(got.iloc[0]) if not got.empty else "–")
    return " / ".join(out)


def _same_rate(x: Any, rate: float) -> bool:
    x = math.inf if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
    return x == rate


def _outputs_md(out: pd.DataFrame) -> list[str]:
    if out.empty:
        return []
    lines = ["", "Outputs under load: each completed request's output token ids (SHA-256) vs the baseline "
             "processes' for the same prompt at the same rate (greedy, seeded, fixed length); where the baselines "
             "disagree among themselves (floor), a case may differ on no more requests than the floor. Speed "
             "controls (baselines whose every forward sleeps, no byte moved) count as baselines here.",
             "", "| label | repeat | rate req/s | position | compared | mismatched requests | floor | status |",
             "|---|---|---|---|---|---|---|---|"]
    for _i, r in out.iterrows():
        mm = list(r["mismatched"])
        lines.append(f"| {r['label']} | {r['repeat']} | {_rate_txt(_inf(r['rate_rps']))} | {r['position']} | "
                     f"{r['compared']} | {mm if mm else '–'} | {len(r['floor'])} | {r['status']} |")
    return lines


def _inf(x: Any) -> float:
    return math.inf if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _baseline_md(b: pd.DataFrame) -> list[str]:
    if b.empty:
        return []
    lines = ["", "Offload vs baseline per serving metric (per-process P50; design blocks: each process against the "
             "baselines of its own block, bootstrap over blocks, floor = the widest baseline spread inside a block; "
             "design processes: bootstrap over processes, floor = the baselines' spread over the run; slower / "
             "faster only beyond the floor, equivalent inside max(5%, floor)):",
             "", "| label | rate req/s | metric | label ms (processes) | baseline ms (processes) | verdict |",
             "|---|---|---|---|---|---|"]
    for _i, r in b.iterrows():
        lines.append(f"| {r['label']} | {_rate_txt(_inf(r['rate_rps']))} | {NAMES[r['metric']]} P50 | "
                     f"{_f(r['a_median_ms'], 2)} ({r['a_processes']}) | {_f(r['b_median_ms'], 2)} ({r['b_processes']}) | "
                     f"{r['verdict_text']} |")
    return lines


def _pct_md(pct: pd.DataFrame) -> list[str]:
    if pct.empty:
        return []
    lines = ["", "Percentiles with their sample (requests of every repeat pooled; 95% bootstrap interval over "
             "requests; an extreme has none):", "",
             "| label | rate req/s | metric | P50 [CI] | P90 [CI] | P99 [CI] |", "|---|---|---|---|---|---|"]
    for (label, rate, metric), g in pct.groupby(["label", "rate_rps", "metric"], sort=False, dropna=False):
        cells = []
        for p in (50, 90, 99):
            got = g[g["percentile"] == p]
            if got.empty:
                cells.append("–")
                continue
            row = got.iloc[0]
            ci = (f" [{_f(row['ci_low_ms'])}..{_f(row['ci_high_ms'])}]" if row["kind"] == "percentile" else "")
            cells.append(_pct_txt(row) + ci)
        lines.append(f"| {label} | {_rate_txt(_inf(rate))} | {NAMES[metric]} | " + " | ".join(cells) + " |")
    return lines


def _order_md(order: pd.DataFrame) -> list[str]:
    if order.empty:
        return ["", "Rate order: every process ran the rates in one order (no position to compare)."]
    hits = order[order["effect"]]
    lines = ["", f"Rate order: rates rotated per repeat; {len(hits)} of {len(order)} (label, rate, metric) differ by "
             "their position in the sweep beyond the same-position floor" + (":" if len(hits) else ".")]
    for _i, r in hits.iterrows():
        meds = ", ".join(f"pos {p}: {_f(v, 2)}" for p, v in zip(r["positions"], r["position_medians_ms"], strict=True))
        lines.append(f"  order effect: {r['label']} at {_rate_txt(_inf(r['rate_rps']))} req/s, {NAMES[r['metric']]} "
                     f"P50 ms {meds} ({'relative to the baselines at each position: ' if r.get('relative') else ''}"
                     f"spread {r['spread_pct']:.1f}% > floor {r['floor_pct']:.1f}%)")
    return lines


def plot_latency(table: pd.DataFrame) -> Figure:
    """P50 (dashed) and P99 (solid) TTFT, TPOT and ITL vs achieved request rate, one line per label."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, m, name in zip(axes, ("ttft", "tpot", "itl"), ("TTFT", "TPOT", "ITL"), strict=True):
        for i, ((_ph, label), g) in enumerate(table.groupby(["phase", "label"], sort=False)):
            g = g.sort_values("rate_rps")
            color = f"C{i % 10}"
            ax.plot(g["achieved_req_s"], g[f"{m}_p99_ms"], "o-", color=color, label=f"{label} P99")
            ax.plot(g["achieved_req_s"], g[f"{m}_p50_ms"], "x--", color=color, alpha=0.6, label=f"{label} P50")
        ax.set_xlabel("achieved request rate (req/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} vs load")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_front(slo: pd.DataFrame) -> Figure:
    """Released MiB (evidence) vs highest rate meeting the SLO; front points highlighted."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    finite = slo[[not (math.isnan(x) or math.isinf(x)) for x in slo["slo_rate_rps"]]]
    rate = [0.0 if math.isnan(x) else x for x in slo["slo_rate_rps"]]
    ax.scatter(slo["released_bytes"] / 2**20, rate, color="grey", label="label (meeting no rate: drawn at 0)")
    f = slo[slo["on_front"]]
    ax.scatter(f["released_bytes"] / 2**20, [0.0 if math.isnan(x) else x for x in f["slo_rate_rps"]],
               color="C3", s=80, facecolors="none", label="front")
    for (_i, r), y in zip(slo.iterrows(), rate, strict=True):
        ax.annotate(r["label"], (r["released_bytes"] / 2**20, y), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("released MiB (evidence)")
    ax.set_ylabel("highest request rate meeting the SLO (req/s)")
    ax.set_title("released capacity vs SLO rate" + ("" if len(finite) == len(slo) else " (inf/none shown at 0)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
