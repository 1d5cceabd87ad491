"""Layout of the report's PNG figures: no text on text, no legend or label on a data point.

What is modelled: every figure is made by ``new_figure`` (matplotlib's constrained layout at the PNG's own
``DPI``, so what the layout measures is what ``save_png`` writes); its legend sits outside the axes
(``legend_outside``), so it covers no point; its provenance line is the figure's ``supxlabel`` (``footer``),
which the layout reserves room for under the axis labels; ``finish`` runs the layout once, freezes it and only
then places the point labels (``place_labels``): each label takes the first of a ring of offsets around its
point whose rendered box (``Text.get_window_extent``) stays inside the axes and meets no placed label, no
marker and no drawn interval; a label with no free offset takes the one that meets no text (a thin leader
line joins it to its point) and, failing that, the least overlapping one.

What is deliberately not modelled: a global optimum (labels are placed greedily, in the order given).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

DPI = 110
"""Dots per inch of every PNG (``analysis.report.plots.save_png``) and of the figure the layout measures."""
LEGEND_FONTSIZE = 7
LABEL_FONTSIZE = 7.0
CHAR_WIDTH_EM = 0.6
"""Average glyph width of the default sans-serif font in ems; sets where long titles and footers wrap."""


def new_figure(ncols: int = 1, *, figsize: tuple[float, float] = (8.0, 5.0)) -> tuple[Figure, list[Axes]]:
    """A figure with ``ncols`` axes in a row under constrained layout at ``DPI``."""
    fig, axes = plt.subplots(1, ncols, figsize=figsize, layout="constrained", dpi=DPI, squeeze=False)
    return fig, list(axes[0])


def wrap(text: str, fig: Figure, fontsize: float, *, share: float = 1.0) -> str:
    """``text`` wrapped (each of its lines) to ``share`` of ``fig``'s width at ``fontsize`` points."""
    width_pt = fig.get_figwidth() * 72.0 * share
    chars = max(20, int(width_pt / (fontsize * CHAR_WIDTH_EM)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def legend_outside(ax: Axes, **kw):
    """The legend of ``ax`` right of its axes (top-aligned), where it can cover no data point."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=LEGEND_FONTSIZE, **kw)


def footer(fig: Figure, note: str) -> None:
    """``note`` (the provenance line) once, at the bottom left, wrapped to the figure's width."""
    if note:
        fig.supxlabel(wrap(note, fig, 6), x=0.01, ha="left", fontsize=6, color="gray")


@dataclass(frozen=True)
class PointLabel:
    """A label for the data point ``(x, y)`` of an axes."""

    x: float
    y: float
    text: str
    color: str = "black"


OFFSETS_PT = [(dx, dy) for r in (6.0, 12.0, 20.0, 30.0, 42.0)
              for dx, dy in ((r, r * 0.25), (r, -r), (-r, r * 0.25), (-r, -r), (0.0, r), (0.0, -r - 4.0),
                             (r, r), (-r, r))]
"""Candidate offsets (points) of a label's anchor from its point, nearest first (``ha`` follows ``dx``'s sign)."""


def _overlap(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _contains(outer: Bbox, inner: Bbox) -> bool:
    return outer.x0 <= inner.x0 and inner.x1 <= outer.x1 and outer.y0 <= inner.y0 and inner.y1 <= outer.y1


def data_boxes(ax: Axes, renderer) -> list[Bbox]:
    """Display boxes of the drawn data of ``ax``: every marker (its size) and every segment of a line collection
    (error bars, interval ticks), padded by a pixel."""
    boxes = []
    pad = 1.0
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            offs = coll.get_offset_transform().transform(coll.get_offsets())
            sizes = coll.get_sizes() if len(coll.get_sizes()) else [36.0]
            for i, (px, py) in enumerate(offs):
                if not (np.isfinite(px) and np.isfinite(py)):  # a masked (NaN) point is not drawn
                    continue
                r = np.sqrt(sizes[i % len(sizes)]) / 2 * DPI / 72.0 + pad
                boxes.append(Bbox.from_extents(px - r, py - r, px + r, py + r))
        elif isinstance(coll, LineCollection):
            for seg in coll.get_segments():
                pts = coll.get_transform().transform(seg)
                boxes.append(Bbox.from_extents(pts[:, 0].min() - 2, pts[:, 1].min() - pad,
                                               pts[:, 0].max() + 2, pts[:, 1].max() + pad))
    for line in ax.lines:
        if isinstance(line, Line2D) and line.get_marker() not in (None, "None", "", " "):
            pts = line.get_transform().transform(line.get_xydata())
            r = line.get_markersize() / 2 * DPI / 72.0 + pad
            boxes += [Bbox.from_extents(px - r, py - r, px + r, py + r) for px, py in pts]
    return boxes


def _candidate(ax: Axes, renderer, ann: Annotation, dx: float, dy: float) -> Bbox:
    ann.set_position((dx, dy))
    ann.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
    ann.set_verticalalignment("bottom" if dy >= 0 else "top")
    return ann.get_window_extent(renderer)


def place_labels(ax: Axes, labels: Sequence[PointLabel], *, fontsize: float = LABEL_FONTSIZE) -> list[Annotation]:
    """Annotate ``labels`` on ``ax`` (module docstring); the axes' limits and the figure's layout must be final."""
    canvas = ax.figure.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        raise TypeError(f"place_labels measures text with the Agg renderer; the figure's canvas is {type(canvas)}")
    renderer = canvas.get_renderer()
    inside = ax.get_window_extent(renderer).padded(-2.0)
    marks = data_boxes(ax, renderer)
    placed: list[Bbox] = [t.get_window_extent(renderer) for t in ax.texts if t.get_text()]
    out = []
    for lb in labels:
        ann = ax.annotate(lb.text, (lb.x, lb.y), textcoords="offset points", xytext=(OFFSETS_PT[0]),
                          fontsize=fontsize, color=lb.color, annotation_clip=False)
        best, best_cost = OFFSETS_PT[0], float("inf")
        for dx, dy in OFFSETS_PT:
            box = _candidate(ax, renderer, ann, dx, dy)
            outside = 0.0 if _contains(inside, box) else 1e9
            text_cost = sum(_overlap(box, b) for b in placed)
            mark_cost = sum(_overlap(box, b) for b in marks)
            cost = outside + 1e6 * text_cost + mark_cost + 0.01 * (abs(dx) + abs(dy))
            if cost < best_cost:
                best, best_cost = (dx, dy), cost
            if outside == 0 and text_cost == 0 and mark_cost == 0:
                break
        placed.append(_candidate(ax, renderer, ann, *best))
        if abs(best[0]) > 14 or abs(best[1]) > 14:
            ax.annotate("", (lb.x, lb.y), xytext=best, textcoords="offset points",
                        arrowprops={"arrowstyle": "-", "color": lb.color, "lw": 0.5, "alpha": 0.6,
                                    "shrinkA": 0, "shrinkB": 3})
        out.append(ann)
    return out


def finish(fig: Figure, labelled: Sequence[tuple[Axes, Sequence[PointLabel]]] = ()) -> Figure:
    """Run the constrained layout once with every artist but the point labels, freeze it, place the labels.

    Each axes' limits are fixed first (labels never move the data), so the label boxes measured here are the
    boxes of the saved PNG (same ``DPI``).
    """
    for ax in fig.axes:
        ax.set_xlim(ax.get_xlim())
        ax.set_ylim(ax.get_ylim())
    fig.canvas.draw()
    fig.set_layout_engine("none")
    for ax, labels in labelled:
        place_labels(ax, labels)
    return fig
