"""Serving report rendering (``analysis.serving.summary``): Markdown tables and the latency / front plots.

What is modelled: ``render_markdown`` (validity, SLO, per-rate latency table, SLO rates and front,
current vs official verdicts on P99 TPOT); ``plot_latency`` (P50 / P99 TTFT, TPOT, ITL vs achieved
rate) and ``plot_front`` (released MiB vs the highest rate meeting the SLO).

What is deliberately not modelled: computing the tables (``analysis.serving.summary``).
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.serving.request_checks import ServingValidation  # noqa: E402

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
                    slo_def: dict[str, float] | None, *, cpu: bool = False) -> str:
    """The serving Markdown: validity line, per-rate table, SLO-rate front, verdicts (``cpu``: add the CPU note)."""
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
    if not table.empty:
        lines += ["", "| label | rate req/s | achieved req/s | out tok/s | TTFT P50/P99 ms | TPOT P50/P99 ms | "
                  "ITL P50/P99 ms | E2E P99 ms | goodput req/s | SLO | offloader | wrapped layers | offloaded B |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _i, r in table.iterrows():
            lines.append(
                f"| {r['label']} | {_rate_txt(r['rate_rps'])} | {_f(r['achieved_req_s'], 2)} | {_f(r['output_tok_s'])} | "
                f"{_f(r['ttft_p50_ms'])} / {_f(r['ttft_p99_ms'])} | {_f(r['tpot_p50_ms'])} / {_f(r['tpot_p99_ms'])} | "
                f"{_f(r['itl_p50_ms'])} / {_f(r['itl_p99_ms'])} | {_f(r['e2el_p99_ms'])} | "
                f"{_f(r['goodput_req_s'], 2)} | {'met' if r['meets_slo'] else 'missed'} | "
                f"{str(r['offloader_class']).rsplit('.', 1)[-1]} | {r['wrapped_layers'] or '–'} | "
                f"{int(r['offloaded_bytes']):,} |")
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
    return "\n".join(lines) + "\n"


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
