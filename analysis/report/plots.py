"""The report's PNG plots: capacity vs throughput (Pareto front), retention vs offloaded layers and, for a choose
run, predicted vs measured retention (``plot_choice``).

What is modelled: ``plot_pareto`` and ``plot_retention`` draw a summary frame (``analysis.report.tables.build``'s
``summary``) with matplotlib (Agg backend), ``plot_choice`` a ``analysis.report.choice_view.ChoiceView``; ``save_png`` writes a figure atomically
(``results_schema.records.files.write_bytes_atomic``). Released bytes are accounted bytes (evidence), not measured memory.

What is deliberately not modelled: the interactive figures (``analysis.report.html_figures``).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.report.choice_view import ChoiceView  # noqa: E402
from analysis.report.tables import is_cpu_run  # noqa: E402
from offload.selection import case_label  # noqa: E402
from results_schema.records.files import write_bytes_atomic  # noqa: E402


def save_png(fig: Figure, path: Path, *, bbox_inches: str | None = "tight") -> None:
    """Render ``fig`` as PNG (dpi 110; ``bbox_inches`` as matplotlib's ``savefig``) in memory, replace
    ``path`` atomically (mode 0644) and close ``fig``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches=bbox_inches)
    write_bytes_atomic(path, buf.getvalue())
    plt.close(fig)


IMPL_COLORS = {"baseline": "black", "current": "tab:blue", "official": "tab:orange", "sync": "tab:green",
               "overlay": "tab:red"}
IMPL_MARKERS = {"baseline": "o", "current": "s", "official": "^", "sync": "D", "overlay": "v"}


def point_label(r) -> str:
    """``baseline`` or ``(G,N)`` (``(G,N,kK)`` when the prefetch step is not 1): ``case_label(style="point")``."""
    return case_label(r["implementation"], r["group_size"], r["num_in_group"], r.get("prefetch_step", 1),
                      style="point")


def _annotate(ax, points: list[tuple[float, float, str, str]], fontsize: float = 7.0) -> None:
    """Annotate ``(x, y, text, color)`` points without overlaying labels.

    Each label goes right of its point; when its (approximate) box would overlap a label already
    placed, it is moved up or down in steps of one text line until it is free.
    """
    ax.autoscale_view()
    to_pt = 72.0 / ax.figure.dpi
    h = fontsize + 2.0
    placed: list[tuple[float, float, float, float]] = []  # boxes in points: x0, y0, x1, y1
    steps = [0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6]
    for x, y, text, color in points:
        px, py = (v * to_pt for v in ax.transData.transform((x, y)))
        w = 0.62 * fontsize * len(text)
        dy = 2.0
        for k in steps:
            dy = 2.0 + k * h
            box = (px + 5, py + dy, px + 5 + w, py + dy + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append((px + 5, py + dy, px + 5 + w, py + dy + h))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), fontsize=fontsize, color=color,
                    va="bottom")


def _verdict_tag(r) -> str:
    """`` inconclusive`` / `` excluded`` suffixes of a plotted point (same rule as the tables)."""
    tag = ""
    v = r.get("vs_baseline_verdict")
    if isinstance(v, str) and v not in ("reference", ""):
        tag += f" {v}"
    ex = r.get("front_excluded")
    if isinstance(ex, str) and ex:
        tag += " EXCLUDED"
    return tag


def _margin_of(summary: pd.DataFrame) -> float | None:
    if "vs_baseline_margin_pct" in summary and summary["vs_baseline_margin_pct"].notna().any():
        return float(summary["vs_baseline_margin_pct"].dropna().iloc[0])
    return None


def _set_title(ax: Axes, summary: pd.DataFrame, title: str, rule: str) -> None:
    """``title``, plus a second line with the verdict margin and ``rule`` when the summary has verdicts."""
    margin = _margin_of(summary)
    ax.set_title(title + ("" if margin is None else f"\nverdict vs baseline, margin ±{margin:g}%{rule}"),
                 fontsize=9 if margin is not None else None)


def plot_pareto(summary: pd.DataFrame, ax=None, *, cpu: bool | None = None):
    """Capacity (released MiB, accounted by evidence) vs median throughput; front per implementation highlighted.

    Every point is annotated with its (G,N); implementations have distinct markers and sizes, so
    coincident points of different implementations stay visible (concentric), and labels of nearby
    points are stacked. ``cpu`` (default: from ``summary["runtime"]``) adds the CPU caveat.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5))
    phases = list(dict.fromkeys(summary["phase"]))
    fills = ["full", "none"]
    impls = list(dict.fromkeys(summary["implementation"]))
    notes = []
    for pi, (phase, ph) in enumerate(summary.groupby("phase", sort=False)):
        for impl, sub in ph.groupby("implementation", sort=False):
            color = IMPL_COLORS.get(impl, "gray")
            x = sub["released_bytes"].astype(float) / 2**20
            y = sub["throughput_median_tok_s"].astype(float)
            size = 90 - 25 * (impls.index(impl) % 3)
            hollow = fills[pi % 2] == "none"
            ax.scatter(x, y, s=size, marker=IMPL_MARKERS.get(impl, "P"), alpha=0.75,
                       facecolors="none" if hollow else color, edgecolors=color, linewidths=1.2,
                       label=f"{phase}: {impl}" if len(phases) > 1 else impl, zorder=3)
            front = sub[sub["pareto"]]
            if impl != "baseline" and not front.empty:
                base = ph[ph["implementation"] == "baseline"]
                f = pd.concat([base[base["pareto"]], front]).sort_values("released_bytes")
                ax.plot(f["released_bytes"].astype(float) / 2**20, f["throughput_median_tok_s"], "-",
                        c=color, lw=1.5, alpha=0.6, zorder=2)
                ax.scatter(front["released_bytes"].astype(float) / 2**20, front["throughput_median_tok_s"],
                           facecolors="none", edgecolors=color, s=220, lw=1.5, zorder=2)
            for _, r in sub.iterrows():
                text = point_label(r) + (" knee" if bool(r.get("knee", False)) else "") + _verdict_tag(r)
                notes.append((float(r["released_bytes"]) / 2**20, float(r["throughput_median_tok_s"]), text, color))
    ax.scatter([], [], s=220, facecolors="none", edgecolors="gray", lw=1.5, label="Pareto front (ringed)")
    _annotate(ax, notes)
    xl = "released bytes (MiB, accounted by evidence: offloaded - static buffers; not measured)"
    if cpu:
        xl += "\nCPU runtime: host = device RAM, nothing is freed (RSS / KV capacity unchanged)"
    ax.set_xlabel(xl, fontsize=9)
    ax.margins(x=0.1)
    ax.set_ylabel("median process throughput (tok/s)")
    _set_title(ax, summary, "Capacity vs throughput (points: (G,N); Pareto front ringed)" + (" [CPU]" if cpu else ""),
               "; knee: last release before the cost per byte jumps; EXCLUDED: invalid or tokens differ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig or ax.figure


def _dodged_x(summary: pd.DataFrame, group_keys: list) -> dict:
    """x of every row (by index): its layer count, dodged so that points sharing a count
    (any phase / implementation / (G,N)) each get their own x, in ``group_keys`` order."""
    order = {key: i for i, key in enumerate(group_keys)}
    ranked = summary.assign(_g=[order[(p, i)] for p, i in zip(summary["phase"], summary["implementation"],
                                                               strict=True)])
    ranked = ranked.sort_values(["num_selected_layers", "_g", "group_size", "num_in_group"])
    dodge = {}
    for n, same in ranked.groupby("num_selected_layers", sort=False):
        k = len(same)
        width = min(0.18, 0.8 / k)
        for i, idx in enumerate(same.index):
            dodge[idx] = float(n) + width * (i - (k - 1) / 2)
    return dodge


def plot_retention(summary: pd.DataFrame, ax=None, *, cpu: bool | None = None):
    """Retention vs number of offloaded layers (evidence): one scatter per phase and implementation.

    Each point is annotated with its (G,N); points with equal layer counts are dodged horizontally
    (never joined, so no segment can be mistaken for an error bar). Min..max bars are drawn only for
    labels with more than one process, and the legend says so.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5))
    phases = list(dict.fromkeys(summary["phase"]))
    groups = list(summary.groupby(["phase", "implementation"], sort=False))
    dodge = _dodged_x(summary, [key for key, _g in groups])
    notes, any_bars = [], False
    for (phase, impl), sub in groups:
        color = IMPL_COLORS.get(impl, "gray")
        x = pd.Series([dodge[i] for i in sub.index], index=sub.index)
        y = sub["retention"].astype(float)
        ax.scatter(x, y, marker=IMPL_MARKERS.get(impl, "P"), color=color, s=45, zorder=3,
                   label=f"{phase}: {impl}" if len(phases) > 1 else impl)
        rep = sub["processes"].astype(int) > 1
        if rep.any():
            any_bars = True
            base = sub.loc[rep, "baseline_throughput_median_tok_s"].astype(float)
            lo = y[rep] - sub.loc[rep, "throughput_min_tok_s"].astype(float) / base
            hi = sub.loc[rep, "throughput_max_tok_s"].astype(float) / base - y[rep]
            ax.errorbar(x[rep], y[rep], yerr=[lo, hi], fmt="none", ecolor=color, capsize=3, lw=1, zorder=2)
        for (_, r), xi in zip(sub.iterrows(), x, strict=True):
            n = int(r["processes"])
            notes.append((xi, float(r["retention"]), point_label(r) + (f" n={n}" if n > 1 else "")
                          + _verdict_tag(r), color))
    if any_bars:
        ax.errorbar([], [], yerr=[[], []], fmt="none", ecolor="gray", capsize=3,
                    label="bar: process min..max (labels with > 1 process)")
    else:
        ax.plot([], [], " ", label="1 process per label: no spread bars")
    ax.axhline(1.0, color="gray", lw=0.8)
    _annotate(ax, notes)
    ax.margins(x=0.12)
    ax.set_xlabel("offloaded layers (evidence; equal counts dodged horizontally)")
    ax.set_ylabel("throughput retention vs phase baseline")
    _set_title(ax, summary, "Retention vs offloaded layers (points: (G,N))" + (" [CPU runtime]" if cpu else ""),
               ": inconclusive when n=1, retention > 1.0 or the CI is wider than the margin")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig or ax.figure



def plot_choice(view: ChoiceView):
    """A choose run's predicted vs measured retention (the PNG of ``analysis.report.html_choice.choice_figure``):
    every distinct setting of the last decision with predictions at its predicted released GiB with its interval
    (grey: below the need), the verified settings as diamonds at their measured retention (red: missed their
    interval), the recommended one as a star, a dashed line at the need and a grey one at retention 1."""
    fig, ax = plt.subplots(figsize=(8, 5))
    pts = view.points
    y = [p.retention for p in pts]
    ax.errorbar([p.released_gib for p in pts], y, fmt="none", ecolor="tab:blue", alpha=0.3, lw=1, zorder=1,
                yerr=[[r - p.retention_low for p, r in zip(pts, y, strict=True)],
                      [p.retention_high - r for p, r in zip(pts, y, strict=True)]])
    ax.scatter([p.released_gib for p in pts], y, s=16, zorder=2, label="predicted (every distinct setting)",
               c=["tab:blue" if p.meets_need else "tab:gray" for p in pts])
    vs = view.drawn()
    ax.scatter([x for _v, x, _y in vs], [y for _v, _x, y in vs], marker="D", s=60, zorder=4,
               c=["tab:red" if v.within is False else "tab:green" for v, _x, _y in vs], edgecolors="white",
               label="verified: measured (red: MISSED its interval)")
    _annotate(ax, [(x, y, v.label, "black") for v, x, y in vs])
    r = view.recommended
    if r is not None and r.at is not None:
        ax.scatter([r.at[0]], [r.at[1]], marker="*", s=380, c="gold", edgecolors="black", zorder=3,
                   label=f"recommended: {r.label} (measured)")
    ax.axvline(view.need_gib, color="tab:red", ls="--", lw=1.2, label=f"need {view.need_gib:.4g} GiB")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("released GiB (predicted: offloaded - static slots)")
    ax.set_ylabel("retention vs baseline")
    hw = "" if view.half_width_pct is None else f", interval ±{view.half_width_pct:.1f}%"
    ax.set_title(f"Choose, then confirm: predicted ({view.drawn_stage}, {view.drawn_form}{hw}) vs measured",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig
