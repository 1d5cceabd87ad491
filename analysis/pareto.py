"""Pareto front (strict dominance) and knee over (capacity, throughput) points.

What is modelled: two objectives, both maximised -- capacity (released bytes,
or KV-cache gain) and throughput. Point p dominates q iff p >= q in both and
p > q in at least one; the front is every non-dominated point (ties on both
objectives are all kept). The knee is the front point farthest from the
straight line joining the front's two extremes after min-max normalisation of
both axes (the "Kneedle" idea, Satopaa et al. 2011), defined only for fronts
of three or more points.

What is deliberately not modelled: noise. Dominance is on medians; whether a
difference is real is ``analysis.compare``'s business.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def pareto_mask(capacity: Sequence[float], throughput: Sequence[float]) -> list[bool]:
    """True for each point not strictly dominated by another.

    Args:
        capacity: per point, larger is better (bytes).
        throughput: per point, larger is better (tok/s).

    Returns:
        One flag per point, same order. NaN points are never on the front.
    """
    pts = list(zip(capacity, throughput, strict=True))
    out = []
    for i, (c, t) in enumerate(pts):
        if any(map(_isnan, (c, t))):
            out.append(False)
            continue
        dominated = any(
            (c2 >= c and t2 >= t and (c2 > c or t2 > t))
            for j, (c2, t2) in enumerate(pts)
            if j != i and not any(map(_isnan, (c2, t2)))
        )
        out.append(not dominated)
    return out


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def knee_index(capacity: Sequence[float], throughput: Sequence[float], mask: Sequence[bool]) -> int | None:
    """Index (into the inputs) of the knee of the front, or None when the front has < 3 points.

    Raises nothing; ties in distance go to the larger capacity.
    """
    idx = [i for i, m in enumerate(mask) if m]
    if len(idx) < 3:
        return None
    cs = [float(capacity[i]) for i in idx]
    ts = [float(throughput[i]) for i in idx]
    cmin, cmax, tmin, tmax = min(cs), max(cs), min(ts), max(ts)
    if cmax == cmin or tmax == tmin:
        return None
    xs = [(c - cmin) / (cmax - cmin) for c in cs]
    ys = [(t - tmin) / (tmax - tmin) for t in ts]
    order = sorted(range(len(idx)), key=lambda k: xs[k])
    a, b = order[0], order[-1]
    x1, y1, x2, y2 = xs[a], ys[a], xs[b], ys[b]
    norm = math.hypot(x2 - x1, y2 - y1)
    best, best_d = None, -1.0
    for k in order[1:-1]:
        d = abs((y2 - y1) * xs[k] - (x2 - x1) * ys[k] + x2 * y1 - y2 * x1) / norm
        if d > best_d or (d == best_d and best is not None and cs[k] > cs[best]):
            best, best_d = k, d
    return None if best is None else idx[best]
