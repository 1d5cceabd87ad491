"""Checks that a rendered matplotlib figure says what the tables say, read back through matplotlib's renderer.

What is modelled (for any figure of the report, present or future; ``tests/analysis/test_figures.py`` uses them):

* ``overlapping_texts(fig)``: pairs of visible, non-empty text artists (titles, axis and tick labels, legend
  entries, point labels, the footer) whose rendered boxes (``Text.get_window_extent(renderer)``) overlap;
* ``legend_covered_points(fig)``: data points (markers of scatter collections and lines, error-bar ends)
  transformed to display coordinates that lie inside a legend's box (axes and figure legends);
* ``drawn_intervals(fig, prefix)``: the ``(low, high)`` of every error-bar collection whose ``gid`` starts with
  ``prefix`` (the figure code tags each interval it draws, e.g. ``ci:<phase>/<label>``), read from the drawn
  segments;
* ``same_4_digits(a, b)``: equality to 4 significant digits.

Call them after the figure's own code has finished (the PNG writer saves exactly this state).

What is deliberately not modelled: overlap of lines with text (a leader line may cross a grid line).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox


def _renderer(fig: Figure):
    """The figure's renderer after a draw of its current state (drawn once, then only when changed)."""
    if fig.stale:
        fig.canvas.draw()
    return fig.canvas.get_renderer()


def text_boxes(fig: Figure) -> list[tuple[str, Bbox]]:
    """``(text, display box)`` of every visible, non-empty text artist of ``fig``."""
    r = _renderer(fig)
    hidden = _undrawn_tick_labels(fig)
    out = []
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip() and id(t) not in hidden:
            out.append((t.get_text(), t.get_window_extent(r)))
    return out


def _undrawn_tick_labels(fig: Figure) -> set[int]:
    """Ids of the tick labels matplotlib keeps but does not draw: their tick lies outside the axis' view."""
    out = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            tol = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - tol <= tick.get_loc() <= hi + tol:
                    out |= {id(tick.label1), id(tick.label2)}
    return out


def _overlap(a: Bbox, b: Bbox) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 0.5 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5


def overlapping_texts(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than half a pixel each way (none: the figure is readable)."""
    boxes = text_boxes(fig)
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if _overlap(ba, bb)]


def data_points(fig: Figure) -> list[tuple[float, float]]:
    """Every drawn data point of ``fig`` in display coordinates: scatter offsets, line vertices with a marker, and
    both ends of every error-bar segment."""
    _renderer(fig)
    pts: list[tuple[float, float]] = []
    for ax in fig.axes:
        for c in ax.collections:
            if isinstance(c, PathCollection) and len(c.get_offsets()):
                pts += [tuple(p) for p in c.get_offset_transform().transform(c.get_offsets())]
            elif isinstance(c, LineCollection):
                for seg in c.get_segments():
                    pts += [tuple(p) for p in c.get_transform().transform(seg)]
        for ln in ax.lines:
            if isinstance(ln, Line2D) and ln.get_marker() not in (None, "None", "", " ") and len(ln.get_xydata()):
                pts += [tuple(p) for p in ln.get_transform().transform(ln.get_xydata())]
    return [p for p in pts if all(math.isfinite(v) for v in p)]


def legend_covered_points(fig: Figure) -> list[tuple[float, float]]:
    """Data points inside the box of any legend of ``fig`` (none: no legend hides data)."""
    r = _renderer(fig)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    boxes = [lg.get_window_extent(r) for lg in legends]
    return [p for p in data_points(fig) if any(b.contains(*p) for b in boxes)]


def drawn_intervals(fig: Figure, prefix: str = "ci:") -> dict[str, tuple[float, float]]:
    """``gid -> (low, high)`` in data units of every error-bar collection tagged ``prefix...`` (one segment each)."""
    out = {}
    for ax in fig.axes:
        for c in ax.collections:
            gid = c.get_gid()
            if isinstance(c, LineCollection) and gid and gid.startswith(prefix):
                (seg,) = c.get_segments()
                ys = np.asarray(seg)[:, 1]
                out[gid] = (float(ys.min()), float(ys.max()))
    return out


def same_4_digits(a: float, b: float) -> bool:
    """``a`` and ``b`` equal to 4 significant digits."""
    return float(f"{a:.4g}") == float(f"{b:.4g}")
