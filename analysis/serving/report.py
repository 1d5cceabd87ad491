"""Serving report rendering (``analysis.serving.summary``): Markdown tables and the latency / front plots.

What is modelled: ``render_markdown`` (validity, SLO, per-rate latency table, SLO rates and front,
current vs official verdicts on P99 TPOT); ``plot_latency`` (pooled P50 / P99 TTFT, TPOT, ITL vs achieved
rate: the percentile table's numbers and names, a P99 its n cannot resolve named as the max) and ``plot_front``
(released MiB vs the highest rate meeting the SLO); figure layout by ``analysis.report.figure_layout``.

What is deliberately not modelled: computing the tables (``analysis.serving.summary``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.report.figure_layout import LEGEND_FONTSIZE, PointLabel, finish, legend_outside, new_figure, wrap
from analysis.serving.request_checks import ServingValidation

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
    return _inf(x) == rate


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
             "baselines of its own block, paired t interval over blocks, floor = the widest baseline spread inside a "
             "block; design processes: unpaired t interval over processes, floor = the baselines' spread over the run; "
             "95% intervals, except a sequential label's: its stopping look's level, named in its row; slower / "
             "faster only beyond the floor, equivalent only inside the margin, never widened to the floor):",
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


def stat_name(kind: str, p: float) -> str:
    """What a pooled percentile row is called: ``P99`` when its sample resolves it, else its ``kind`` (``max`` /
    ``min``), decided by ``analysis.serving.stats.extreme_kind`` when the row was computed (the tables' rule)."""
    return f"P{p:g}" if kind == "percentile" else kind


def _line_name(label: str, p: float, rows: pd.DataFrame) -> str:
    """Legend entry of one label's curve of percentile ``p``: its ``stat_name`` (both where its rates differ) and n."""
    names = list(dict.fromkeys(stat_name(k, p) for k in rows["kind"]))
    lo, hi = int(rows["n"].min()), int(rows["n"].max())
    n = f"n {lo}" if lo == hi else f"n {lo}-{hi}"
    what = names[0] if len(names) == 1 else f"P{p:g} where n resolves it, else {'/'.join(names[1:] or names)}"
    return f"{label}: {what} ({n})"


def pct_gid(phase: str, label: str, metric: str, p: float, rate: float) -> str:
    """``gid`` of the error bar of one pooled percentile's 95% bootstrap interval in ``plot_latency``."""
    return f"ci:{phase}/{label}/{metric}/P{p:g}/{_rate_txt(rate)}"


PCT_CI_LEGEND = "bar: 95% bootstrap interval over requests (the percentile table's; none for a max / min)"
EXTREME_LEGEND = "hollow marker: the sample's max (its n cannot resolve the percentile), as the tables print it"


def _latency_curve(ax, table: pd.DataFrame, pct: pd.DataFrame, key: tuple, m: str, p: int, style: dict) -> bool:
    """One label's curve of percentile ``p`` of metric ``m`` (pooled rows of ``pct``) vs its achieved rate; True when
    some point is an extreme (drawn hollow)."""
    phase, label = key
    if pct.empty:
        return False
    rows = pct[(pct["phase"] == phase) & (pct["label"] == label) & (pct["metric"] == m) & (pct["percentile"] == p)]
    ach = {_inf(r["rate_rps"]): float(r["achieved_req_s"]) for _i, r in table[(table["phase"] == phase)
                                                                             & (table["label"] == label)].iterrows()}
    rows = rows.assign(_rate=[_inf(x) for x in rows["rate_rps"]]).sort_values("_rate")
    rows = rows[[r in ach for r in rows["_rate"]]]
    if rows.empty:
        return False
    x = [ach[r] for r in rows["_rate"]]
    (line,) = ax.plot(x, rows["value_ms"], style["ls"], color=style["color"], alpha=style["alpha"], lw=1.2,
                      label=_line_name(label, p, rows))
    line.set_gid(f"curve:{phase}/{label}/P{p:g}")
    ext = (rows["kind"] != "percentile").to_numpy()
    ax.scatter([xi for xi, e in zip(x, ext, strict=True) if not e], rows.loc[~ext, "value_ms"], s=22,
               marker=style["marker"], color=style["color"], zorder=3)
    ax.scatter([xi for xi, e in zip(x, ext, strict=True) if e], rows.loc[ext, "value_ms"], s=30, marker="o",
               facecolors="none", edgecolors=style["color"], zorder=3)
    for xi, (_i, r) in zip(x, rows.iterrows(), strict=True):
        if r["kind"] == "percentile" and _finite(r["ci_low_ms"]) and _finite(r["ci_high_ms"]):
            lo, hi = float(r["ci_low_ms"]), float(r["ci_high_ms"])
            eb = ax.errorbar([xi], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="none", ecolor=style["color"],
                             alpha=style["alpha"], capsize=2, lw=0.8, zorder=2)
            eb.lines[2][0].set_gid(pct_gid(phase, label, m, p, r["_rate"]))
    return bool(ext.any())


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float, np.floating)) and math.isfinite(float(v))


def plot_latency(table: pd.DataFrame, pct: pd.DataFrame) -> Figure:
    """P50 (dashed, x) and P99 (solid, o) TTFT, TPOT and ITL vs achieved request rate, one curve per label.

    Args:
        table: ``rate_table`` rows (achieved rate per phase, label and rate: medians over repeats).
        pct: ``analysis.serving.stats.percentile_rows`` (the requests of every repeat pooled): the values drawn,
            the numbers the tables print. A percentile its n cannot resolve is drawn hollow and named as the
            sample's max (or min) with its n (``stat_name``); a resolved one carries its 95% bootstrap interval
            over requests (``pct_gid``).
    """
    fig, axes = new_figure(3, figsize=(15, 4.6))
    keys = list(dict.fromkeys(zip(table["phase"], table["label"], strict=True)))
    extreme = False
    for ax, m in zip(axes, ("ttft", "tpot", "itl"), strict=True):
        for i, key in enumerate(keys):
            color = f"C{i % 10}"
            extreme |= _latency_curve(ax, table, pct, key, m, 99, {"ls": "-", "marker": "o", "color": color,
                                                                  "alpha": 1.0})
            extreme |= _latency_curve(ax, table, pct, key, m, 50, {"ls": "--", "marker": "x", "color": color,
                                                                  "alpha": 0.6})
        ax.set_xlabel("achieved request rate (req/s)")
        ax.set_ylabel(f"{NAMES[m]} (ms)")
        ax.set_title(f"{NAMES[m]} vs load (requests of every repeat pooled)", fontsize=10)
        ax.grid(alpha=0.3)
    curves = _legend_curves(axes, ("ttft", "tpot", "itl"))
    handles: list[Any] = [h for h, _per in curves]
    labels = [_legend_entry(per) for _h, per in curves]
    handles.append(axes[0].errorbar([], [], yerr=[[], []], fmt="none", ecolor="gray", capsize=2))
    labels.append(wrap(PCT_CI_LEGEND, fig, LEGEND_FONTSIZE, share=0.15))
    if extreme:
        handles.append(axes[0].scatter([], [], s=30, facecolors="none", edgecolors="gray"))
        labels.append(wrap(EXTREME_LEGEND, fig, LEGEND_FONTSIZE, share=0.15))
    fig.legend(handles, labels, loc="outside right upper", fontsize=LEGEND_FONTSIZE)
    return finish(fig)


def _legend_curves(axes: Any, metrics: tuple[str, ...]) -> list[tuple[Any, dict[str, list[str]]]]:
    """Each curve of ``plot_latency`` once (the first panel's line as its handle), with the name it has in each panel
    (``_line_name``) -> the panels (metric names) where it has that name."""
    found: dict[str, tuple[Any, dict[str, list[str]]]] = {}
    for ax, m in zip(axes, metrics, strict=True):
        for ln in ax.lines:
            gid = ln.get_gid() or ""
            if gid.startswith("curve:"):
                found.setdefault(gid, (ln, {}))[1].setdefault(ln.get_label(), []).append(NAMES[m])
    return list(found.values())


def _legend_entry(per: dict[str, list[str]]) -> str:
    """One legend entry for a curve drawn in several panels: its ``_line_name`` where every panel names it alike
    (``baseline: max (n 96)``), else each name with its panels (``baseline: TTFT/TPOT max (n 96); ITL P99 (n 2976)``):
    the shared legend never calls one panel's statistic by another panel's name."""
    names = list(per)
    if len(names) == 1:
        return names[0]
    label = names[0].split(": ", 1)[0]
    return f"{label}: " + "; ".join(f"{'/'.join(ms)} {name.split(': ', 1)[1]}" for name, ms in per.items())


def plot_front(slo: pd.DataFrame) -> Figure:
    """Released MiB (evidence) vs highest rate meeting the SLO; front points highlighted, labels off the markers."""
    fig, (ax,) = new_figure(figsize=(7.5, 4.5))
    finite = slo[[not (math.isnan(x) or math.isinf(x)) for x in slo["slo_rate_rps"]]]
    rate = [0.0 if math.isnan(x) else x for x in slo["slo_rate_rps"]]
    ax.scatter(slo["released_bytes"] / 2**20, rate, color="grey", label="label (meeting no rate: drawn at 0)")
    f = slo[slo["on_front"]]
    ax.scatter(f["released_bytes"] / 2**20, [0.0 if math.isnan(x) else x for x in f["slo_rate_rps"]],
               color="C3", s=80, facecolors="none", label="front")
    ax.set_xlabel("released MiB (evidence)")
    ax.set_ylabel("highest request rate meeting the SLO (req/s)")
    ax.set_title("released capacity vs SLO rate" + ("" if len(finite) == len(slo) else " (inf/none shown at 0)"))
    ax.margins(x=0.15, y=0.15)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    labels = [PointLabel(float(r["released_bytes"]) / 2**20, y, str(r["label"]))
              for (_i, r), y in zip(slo.iterrows(), rate, strict=True)]
    return finish(fig, [(ax, labels)])
