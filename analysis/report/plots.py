"""The report's PNG plots: capacity vs throughput (Pareto front), retention vs offloaded layers and, for a choose
run, predicted vs measured retention (``plot_choice``).

What is modelled: ``plot_pareto`` and ``plot_retention`` draw a summary frame (``analysis.report.tables.build``'s
``summary``) with matplotlib (Agg backend), ``plot_choice`` a ``analysis.report.choice_view.ChoiceView``; ``save_png``
writes a figure atomically (``results_schema.codec.files.write_bytes_atomic``). Released bytes are accounted bytes
(evidence), not measured memory. Every point that carries a verdict draws the verdict's own interval, read from the
summary field the tables print (``vs_baseline_ci_*_pct`` through ``analysis.comparison.decision.retention_interval``;
a verified setting's predicted interval from ``choice.json``), each error-bar collection tagged with a ``gid``
(``ci_gid``, ``verified_gid``) so a test can read it back; layout, legends, footer and labels follow
``analysis.report.figure_layout``.

What is deliberately not modelled: the interactive figures (``analysis.report.html_figures``).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis.comparison.compare import FIXED_CI_NAME  # noqa: E402
from analysis.comparison.decision import RETENTION_CI_NAME, retention_interval  # noqa: E402
from analysis.report.choice_view import ChoiceView  # noqa: E402
from analysis.report.figure_layout import (  # noqa: E402
    DPI,
    LEGEND_FONTSIZE,
    PointLabel,
    finish,
    footer,
    legend_outside,
    new_figure,
    wrap,
)
from analysis.report.tables import is_cpu_run  # noqa: E402
from offload.selection import case_label  # noqa: E402
from results_schema.codec.files import write_bytes_atomic  # noqa: E402


def save_png(fig: Figure, path: Path, *, bbox_inches: str | None = "tight") -> None:
    """Render ``fig`` as PNG (``DPI``; ``bbox_inches`` as matplotlib's ``savefig``) in memory, replace
    ``path`` atomically (mode 0644) and close ``fig``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches=bbox_inches)
    write_bytes_atomic(path, buf.getvalue())
    plt.close(fig)


IMPL_COLORS = {"baseline": "black", "current": "tab:blue", "official": "tab:orange", "sync": "tab:green",
               "overlay": "tab:red"}
IMPL_MARKERS = {"baseline": "o", "current": "s", "official": "^", "sync": "D", "overlay": "v"}


def point_label(r) -> str:
    """``baseline`` or ``(G,N)`` (``(G,N,kK)`` when the prefetch step is not 1): ``case_label(style="point")``."""
    return case_label(r["implementation"], r["group_size"], r["num_in_group"], r.get("prefetch_step", 1),
                      style="point")


def _point_key(r, n_phases: int) -> str:
    """A point's name in the legend: its label (``phase: label`` when several phases), unique where ``(G,N)`` is not
    (a speed control is a baseline point)."""
    return f"{r['phase']}: {r['label']}" if n_phases > 1 else str(r["label"])


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


def _set_title(fig: Figure, ax: Axes, summary: pd.DataFrame, title: str, rule: str) -> None:
    """``title``, plus the verdict margin and ``rule`` (wrapped) when the summary has verdicts."""
    margin = _margin_of(summary)
    if margin is not None:
        title += "\n" + wrap(f"verdict vs baseline, margin ±{margin:g}%{rule}", fig, 9, share=0.9)
    ax.set_title(title, fontsize=9 if margin is not None else None)


CI_LEGEND = f"bar: {RETENTION_CI_NAME} (t interval over processes; the verdict's interval, as the tables print it)"
"""Legend entry of the verdict intervals in ``plot_retention`` (and, scaled, ``plot_pareto``)."""


def ci_gid(phase: str, label: str) -> str:
    """``gid`` of the error-bar collection that draws the verdict interval of ``(phase, label)``."""
    return f"ci:{phase}/{label}"


SEQ_CI_LEGEND = "bar of {point}: retention {name} (the sequential verdict's interval, its stopping look's level)"
"""Legend entry of a sequential phase's label (``analysis.comparison.sequential_verdict``: its own level and look)."""


def _verdict_interval(ax: Axes, x: float, r, scale: float, color: str) -> str | None:
    """Draw ``(phase, label)``'s verdict interval (``retention_interval`` of its ``vs_baseline_ci_*_pct``, times
    ``scale``) at ``x`` as an error bar with ``gid`` ``ci_gid``; returns the interval's name for the legend
    (``FIXED_CI_NAME`` for the fixed rule, a sequential look's ``CI<level>% at look k (...)``), None when the row
    has no interval."""
    ci = retention_interval(r.get("vs_baseline_ci_low_pct"), r.get("vs_baseline_ci_high_pct"))
    if ci is None:
        return None
    lo, hi = ci[0] * scale, ci[1] * scale
    eb = ax.errorbar([x], [(lo + hi) / 2], yerr=[[(hi - lo) / 2]], fmt="none", ecolor=color, capsize=3, lw=1.2,
                     zorder=2)
    eb.lines[2][0].set_gid(ci_gid(r["phase"], r["label"]))
    name = r.get("vs_baseline_ci_name")
    return name if isinstance(name, str) and name else FIXED_CI_NAME


def _ci_legend(ax: Axes, fig: Figure, names: dict[str, str], suffix: str = "") -> None:
    """One legend entry per interval kind drawn: ``CI_LEGEND`` for the fixed rule's, one per sequential label
    naming its look's level (``names``: point text -> ``_verdict_interval``'s name)."""
    entries = [CI_LEGEND + suffix] if FIXED_CI_NAME in names.values() else []
    entries += [SEQ_CI_LEGEND.format(point=p, name=n) + suffix for p, n in names.items() if n != FIXED_CI_NAME]
    for text in entries:
        ax.errorbar([], [], yerr=[[], []], fmt="none", ecolor="gray", capsize=3,
                    label=wrap(text, fig, LEGEND_FONTSIZE, share=0.3))


def plot_pareto(summary: pd.DataFrame, *, cpu: bool | None = None, note: str = "") -> Figure:
    """Capacity (released MiB, accounted by evidence) vs median throughput; front per implementation highlighted.

    Every point is annotated with its (G,N) (``figure_layout.place_labels``); implementations have distinct markers
    and sizes, so coincident points of different implementations stay visible (concentric). A label with a verdict
    vs its baseline carries the verdict's interval on the throughput axis: its ``retention_interval`` times the
    phase baseline's median (``baseline_throughput_median_tok_s``). ``cpu`` (default: from ``summary["runtime"]``)
    adds the CPU caveat; ``note`` (the provenance line) is the footer.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig, (ax,) = new_figure()
    phases = list(dict.fromkeys(summary["phase"]))
    fills = ["full", "none"]
    impls = list(dict.fromkeys(summary["implementation"]))
    notes, ci_names = [], {}
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
            for (_, r), xi in zip(sub.iterrows(), x, strict=True):
                scale = float(r.get("baseline_throughput_median_tok_s", float("nan")))
                name = _verdict_interval(ax, xi, r, scale, color)
                if name is not None:
                    ci_names[_point_key(r, len(phases))] = name
                text = point_label(r) + (" knee" if bool(r.get("knee", False)) else "") + _verdict_tag(r)
                notes.append(PointLabel(xi, float(r["throughput_median_tok_s"]), text, color))
    ax.scatter([], [], s=220, facecolors="none", edgecolors="gray", lw=1.5, label="Pareto front (ringed)")
    _ci_legend(ax, fig, ci_names, " x the baseline's median tok/s")
    xl = "released bytes (MiB, accounted by evidence: offloaded - static buffers; not measured)"
    if cpu:
        xl += "\nCPU runtime: host = device RAM, nothing is freed (RSS / KV capacity unchanged)"
    ax.set_xlabel(xl, fontsize=9)
    ax.margins(x=0.15, y=0.1)
    ax.set_ylabel("median process throughput (tok/s)")
    _set_title(fig, ax, summary, "Capacity vs throughput (points: (G,N); Pareto front ringed)" + (" [CPU]" if cpu else ""),
               "; knee: last release before the cost per byte jumps; EXCLUDED: invalid or tokens differ")
    ax.grid(alpha=0.3)
    legend_outside(ax)
    footer(fig, note)
    return finish(fig, [(ax, notes)])


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


MINMAX_LEGEND = "thin grey tick left of a point: process min..max (spread, not the verdict's interval)"


def _min_max_tick(ax: Axes, x: float, r) -> bool:
    """A thin grey tick at ``x`` - 0.03 from the label's process min to max retention (> 1 process only)."""
    base = float(r["baseline_throughput_median_tok_s"])
    if int(r["processes"]) < 2 or not base > 0:
        return False
    ax.vlines([x - 0.03], float(r["throughput_min_tok_s"]) / base, float(r["throughput_max_tok_s"]) / base,
              colors="0.6", lw=0.8, zorder=1)
    return True


def plot_retention(summary: pd.DataFrame, *, cpu: bool | None = None, note: str = "") -> Figure:
    """Retention vs number of offloaded layers (evidence): one scatter per phase and implementation.

    Each point is annotated with its (G,N); points with equal layer counts are dodged horizontally
    (never joined, so no segment can be mistaken for an error bar). A label with a verdict vs its baseline
    carries the verdict's own interval (``retention_interval`` of its ``vs_baseline_ci_*_pct``: the numbers the
    tables print) as an error bar in its colour; labels with more than one process also get their process
    min..max as a thin grey tick beside the point. The legend names both.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig, (ax,) = new_figure()
    phases = list(dict.fromkeys(summary["phase"]))
    groups = list(summary.groupby(["phase", "implementation"], sort=False))
    dodge = _dodged_x(summary, [key for key, _g in groups])
    notes, ci_names, any_tick = [], {}, False
    for (phase, impl), sub in groups:
        color = IMPL_COLORS.get(impl, "gray")
        sub = sub[sub["retention"].astype(float).map(math.isfinite)]  # no baseline in its phase: no retention, no point
        if sub.empty:
            continue
        x = pd.Series([dodge[i] for i in sub.index], index=sub.index)
        ax.scatter(x, sub["retention"].astype(float), marker=IMPL_MARKERS.get(impl, "P"), color=color, s=45,
                   zorder=3, label=f"{phase}: {impl}" if len(phases) > 1 else impl)
        for (_, r), xi in zip(sub.iterrows(), x, strict=True):
            name = _verdict_interval(ax, xi, r, 1.0, color)
            if name is not None:
                ci_names[_point_key(r, len(phases))] = name
            any_tick |= _min_max_tick(ax, xi, r)
            n = int(r["processes"])
            notes.append(PointLabel(xi, float(r["retention"]), point_label(r) + (f" n={n}" if n > 1 else "")
                                    + _verdict_tag(r), color))
    _ci_legend(ax, fig, ci_names)
    if any_tick:
        ax.vlines([], [], [], colors="0.6", lw=0.8, label=wrap(MINMAX_LEGEND, fig, LEGEND_FONTSIZE, share=0.3))
    if not notes:
        ax.plot([], [], " ", label="no baseline case: no retention to plot")
    elif not ci_names and not any_tick:
        ax.plot([], [], " ", label="1 process per label: no interval, no spread")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.margins(x=0.12, y=0.1)
    ax.set_xlabel("offloaded layers (evidence; equal counts dodged horizontally)")
    ax.set_ylabel("throughput retention vs phase baseline")
    _set_title(fig, ax, summary, "Retention vs offloaded layers (points: (G,N))" + (" [CPU runtime]" if cpu else ""),
               ": inconclusive when n=1, retention > 1.0 or the CI is wider than the margin")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if not notes:
        ax.set_xticks([])  # no point: no layer counts to mark
    ax.grid(alpha=0.3)
    legend_outside(ax)
    footer(fig, note)
    return finish(fig, [(ax, notes)])


VERIFIED_CI_LEGEND = "bar beside a verified setting: the predicted interval it is judged against (choice.json)"


def verified_gid(label: str) -> str:
    """``gid`` of the error bar of a verified setting's predicted interval in ``plot_choice``."""
    return f"verified:{label}"


def plot_choice(view: ChoiceView, *, note: str = "") -> Figure:
    """A choose run's predicted vs measured retention (the PNG of ``analysis.report.html_choice.choice_figure``):
    every distinct setting of the last decision with predictions at its predicted released GiB with its interval
    (grey: below the need), the verified settings as diamonds at their measured retention (red: missed their
    interval) beside the predicted interval their verdict (inside / MISSED) is judged against (``gid``
    ``verified_gid``), the recommended one as a star, a dashed line at the need and a grey one at retention 1.
    Labels of the verified settings are placed off every marker (``figure_layout.place_labels``)."""
    fig, (ax,) = new_figure()
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
    xs = [p.released_gib for p in pts] + [x for _v, x, _y in vs]
    dx = 0.012 * ((max(xs) - min(xs)) or max(abs(xs[0]), 1e-9))
    for v, x, _y in vs:
        eb = ax.errorbar([x + dx], [(v.retention_low + v.retention_high) / 2],
                         yerr=[[(v.retention_high - v.retention_low) / 2]], fmt="none", capsize=4, lw=1.6, zorder=3,
                         ecolor="tab:red" if v.within is False else "tab:green")
        eb.lines[2][0].set_gid(verified_gid(v.label))
    if vs:
        ax.errorbar([], [], yerr=[[], []], fmt="none", ecolor="tab:green", capsize=4, lw=1.6,
                    label=wrap(VERIFIED_CI_LEGEND, fig, LEGEND_FONTSIZE, share=0.3))
    r = view.recommended
    if r is not None and r.at is not None:
        ax.scatter([r.at[0]], [r.at[1]], marker="*", s=380, c="gold", edgecolors="black", zorder=3,
                   label=f"recommended: {r.label} (measured)")
    ax.axvline(view.need_gib, color="tab:red", ls="--", lw=1.2, label=f"need {view.need_gib:.4g} GiB")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.margins(x=0.08, y=0.1)
    ax.set_xlabel("released GiB (predicted: offloaded - static slots)")
    ax.set_ylabel("retention vs baseline")
    hw = "" if view.half_width_pct is None else f", interval ±{view.half_width_pct:.1f}%"
    ax.set_title(wrap(f"Choose, then confirm: predicted ({view.drawn_stage}, {view.drawn_form}{hw}) vs measured",
                      fig, 10, share=0.7), fontsize=10)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    footer(fig, note)
    return finish(fig, [(ax, [PointLabel(x, y, v.label) for v, x, y in vs])])
