"""``summary/sequential.png``: each label's interval over its looks (a sequential phase, ``docs/sequential.md``).

What is modelled: one panel per sequential phase; x = the look's blocks (processes per arm), y = retention vs the
phase baseline. Each label's point at a look is ``1 + center / 100`` of the recorded look
(``results_schema.records.sequential.LabelLook``) and its bar is the look's own interval, ``1 + low / 100`` ..
``1 + high / 100`` at the look's level (the numbers the look table prints; the legend names it), labels dodged
horizontally so bars never overlap, points never joined; each point is labelled with its verdict at that look. Dashed lines mark
``1 ± target``. Layout by ``analysis.report.figure_layout`` (constrained layout, legend outside the axes, one
footer, labels placed off every marker).

What is deliberately not modelled: the decision table's 95% interval (``retention.png`` draws it).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.report.figure_layout import (LEGEND_FONTSIZE, PointLabel, finish, footer, legend_outside,  # noqa: E402
                                           new_figure, wrap)
from results_schema.records.sequential import LookDecision  # noqa: E402

LOOK_CI_LEGEND = ("bar: the look's interval (t interval over processes, or paired by block, at the look's level, "
                  "e.g. CI96.9: the sequential verdict's interval, as the look table prints it)")
"""Legend entry of the look intervals."""
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
DODGE = 0.08
"""Horizontal offset between the labels of one look (blocks)."""


def look_gid(phase: str, label: str, look: int) -> str:
    """``gid`` of the error bar of ``label``'s interval at ``look`` (tests read it back)."""
    return f"look:{phase}:{label}:{look}"


def plot_looks(lines: Sequence[LookDecision], *, note: str = "") -> Figure:
    """The figure of ``lines`` (module docstring); one panel per phase.

    Raises:
        ValueError: no line (nothing to draw).
    """
    if not lines:
        raise ValueError("plot_looks: no look recorded")
    phases = list(dict.fromkeys(d.phase for d in lines))
    fig, axes = new_figure(len(phases), figsize=(8.0 * len(phases), 5.0))
    labelled: list[tuple[Axes, list[PointLabel]]] = []
    for ax, phase in zip(axes, phases, strict=True):
        mine = [d for d in lines if d.phase == phase]
        labels = list(dict.fromkeys(x.label for d in mine for x in d.labels))
        notes = []
        for i, label in enumerate(labels):
            color = COLORS[i % len(COLORS)]
            pts = [(d, x) for d in mine for x in d.labels if x.label == label]
            xs = [d.blocks + (i - (len(labels) - 1) / 2) * DODGE for d, _x in pts]
            ys = [1 + (x.center_pct or 0.0) / 100 for _d, x in pts]
            ax.plot(xs, ys, "o", color=color, label=label, zorder=3)  # never joined: no segment reads as a bar
            for xi, (d, x) in zip(xs, pts, strict=True):
                if x.ci_low_pct is not None and x.ci_high_pct is not None and x.center_pct is not None:
                    y = 1 + x.center_pct / 100
                    bar = ax.errorbar([xi], [y], yerr=[[y - (1 + x.ci_low_pct / 100)], [1 + x.ci_high_pct / 100 - y]],
                                      fmt="none", ecolor=color, capsize=3, zorder=2)
                    bar.lines[2][0].set_gid(look_gid(phase, label, d.look))
                notes.append(PointLabel(xi, 1 + (x.center_pct or 0.0) / 100, x.verdict, color))
        target = mine[0].target_pct
        for y in (1 - target / 100, 1 + target / 100):
            ax.axhline(y, color="gray", ls="--", lw=0.7)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.plot([], [], color="gray", ls="--", lw=0.7, label=f"1 ± target ({target:g}%)")
        ax.errorbar([], [], yerr=[[], []], fmt="none", ecolor="gray", capsize=3,
                    label=wrap(LOOK_CI_LEGEND, fig, LEGEND_FONTSIZE, share=0.3))
        ax.set_xticks(sorted({d.blocks for d in mine}))
        ax.margins(x=0.2, y=0.15)
        ax.set_xlabel("look: blocks (processes per arm)")
        ax.set_ylabel("throughput retention vs phase baseline")
        ax.set_title(wrap(f"{phase}: each label's interval at every look (looks {list(mine[0].looks)}, "
                          f"{mine[0].spending}-type alpha spending"
                          + (", paired t over blocks" if mine[0].pairing == "block" else "") + ")", fig, 9, share=0.7),
                     fontsize=9)
        ax.grid(alpha=0.3)
        legend_outside(ax)
        labelled.append((ax, notes))
    footer(fig, note)
    return finish(fig, labelled)
