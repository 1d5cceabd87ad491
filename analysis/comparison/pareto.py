"""Pareto front (strict dominance) and knee over (capacity, throughput) points.

What is modelled: two objectives, both maximised -- capacity (released bytes,
or KV-cache gain) and throughput. Point p dominates q iff p >= q in both and
p > q in at least one; the front is every non-dominated point (ties on both
objectives are all kept). The knee is the planner's knee (``KNEE_RULE``): the
largest release before the marginal throughput cost per released byte jumps;
it always releases memory (never the baseline). ``python -m analysis pareto FILE.csv``
applies it to any table (``label,capacity_bytes,throughput_tok_s``).

What is deliberately not modelled: noise. Dominance is on medians; whether a
difference is real is ``analysis.comparison.compare``'s business.
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


JUMP_FACTOR = 2.0
"""A step's marginal cost per released byte "jumps" when it exceeds this multiple of the average cost
per byte paid so far (for the first step: of the whole front) and also the front's average cost."""

KNEE_RULE = (
    "knee = the largest release before the marginal throughput cost per released byte jumps: walk the "
    "Pareto front from the smallest release (the baseline, the reference) to the largest; a step's marginal "
    "cost is the throughput lost per byte released between consecutive front points; the front's average "
    "cost is the throughput lost per byte from the smallest to the largest release; a step jumps when its "
    "marginal cost exceeds {jump:g} x the average cost per byte of the steps before it (for the first step: "
    "{jump:g} x the front's average) and also the front's average; the knee is the point before the first "
    "jump. The knee always releases memory: it is never the smallest release (the baseline). When the very "
    "first step jumps (a front that falls fast from the start) the knee is the first release (the least "
    "throughput given up for any memory released). No jump, or a front losing less than the "
    "{flat:g}% equivalence margin of its first point's throughput: the largest release. Defined for fronts of "
    "3 or more points."
)
"""The knee rule in words (``str.format(jump=..., flat=...)``); stated in every report."""


def knee_rule_text(jump_factor: float = JUMP_FACTOR, flat_pct: float | None = None) -> str:
    """``KNEE_RULE`` with its parameters filled in."""
    if flat_pct is None:
        from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT

        flat_pct = DEFAULT_MARGIN_PCT
    return KNEE_RULE.format(jump=jump_factor, flat=flat_pct)


def knee_index(capacity: Sequence[float], throughput: Sequence[float], mask: Sequence[bool], *,
               jump_factor: float = JUMP_FACTOR, flat_pct: float | None = None) -> int | None:
    """Index (into the inputs) of the planner's knee of the front (``KNEE_RULE``), or None.

    Args:
        capacity: per point, released bytes (larger is better).
        throughput: per point, tok/s (larger is better).
        mask: front membership (``pareto_mask``); only flagged points are considered.
        jump_factor: a step is a jump when its cost per byte exceeds this multiple of the average
            cost per byte paid before it (first step: of the whole front) and the front's average
            (``JUMP_FACTOR``).
        flat_pct: a front whose total throughput loss is below this percentage of its first
            point's throughput has no measurable cost; default ``analysis.comparison.verdict_rule.DEFAULT_MARGIN_PCT``.

    Returns:
        The knee's index, or None when the front has fewer than 3 distinct points. Never the
        front's smallest release (the baseline): a knee releases memory. Points with equal capacity
        on the front (equal throughput too, else one would dominate) count once; the first of them
        is returned.

    Why not the distance to the chord (Kneedle, Satopaa et al. 2011): on a convex front that falls
    fast (throughput halving each time the offloaded layers double) the point farthest from the
    chord lies deep in the tail, keeping about a fifth of the throughput; on a concave front both
    rules agree (the first step steeper than the chord is where the distance peaks).
    """
    if flat_pct is None:
        from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT

        flat_pct = DEFAULT_MARGIN_PCT
    seen: dict[float, int] = {}
    for i, m in enumerate(mask):
        if m and float(capacity[i]) not in seen:
            seen[float(capacity[i])] = i
    order = sorted(seen.items())
    if len(order) < 3:
        return None
    cs = [c for c, _ in order]
    ts = [float(throughput[i]) for _, i in order]
    total_loss = ts[0] - ts[-1]
    if total_loss <= 0 or (ts[0] > 0 and total_loss / ts[0] * 100.0 < flat_pct):
        return order[-1][1]
    average = total_loss / (cs[-1] - cs[0])
    tol = 1 + 1e-12
    for k in range(1, len(order)):
        step = (ts[k - 1] - ts[k]) / (cs[k] - cs[k - 1])
        so_far = average if k == 1 else (ts[0] - ts[k - 1]) / (cs[k - 1] - cs[0])
        if step > jump_factor * so_far * tol and step > average * tol:
            return order[max(k - 1, 1)][1]  # never the reference (smallest release): a knee releases memory
    return order[-1][1]


def front_and_knee(labels: Sequence[str], capacity: Sequence[float], throughput: Sequence[float]) -> dict:
    """``{"front": [labels on the front, by increasing capacity], "knee": label or None}``.

    Raises:
        ValueError: lengths differ, a label repeats, or a value is not a finite number.
    """
    if not (len(labels) == len(capacity) == len(throughput)):
        raise ValueError("labels, capacity and throughput must have the same length")
    dup = sorted({lb for lb in labels if list(labels).count(lb) > 1})
    if dup:
        raise ValueError(f"labels must be unique; repeated: {dup}")
    for name, vals in (("capacity_bytes", capacity), ("throughput_tok_s", throughput)):
        for lb, v in zip(labels, vals, strict=True):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"{name} of {lb!r} is {v!r}: must be a finite number")
    mask = pareto_mask(capacity, throughput)
    front = sorted((i for i, m in enumerate(mask) if m), key=lambda i: (capacity[i], -throughput[i], i))
    k = knee_index(capacity, throughput, mask)
    return {"front": [labels[i] for i in front], "knee": None if k is None else labels[k]}


def read_front_csv(path) -> tuple[list[str], list[float], list[float]]:
    """Read ``label,capacity_bytes,throughput_tok_s`` rows (header required; other columns ignored).

    Raises:
        ValueError: missing columns, no rows, or a value that is not a finite number (naming row and value).
        FileNotFoundError: no such file.
    """
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        need = ["label", "capacity_bytes", "throughput_tok_s"]
        have = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in need if c not in have]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the header must name {', '.join(need)} "
                             f"(found {have})")
        labels: list[str] = []
        cap: list[float] = []
        thr: list[float] = []
        for n, row in enumerate(reader, start=2):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
            labels.append(row["label"])
            for name, out in (("capacity_bytes", cap), ("throughput_tok_s", thr)):
                try:
                    v = float(row[name])
                except ValueError:
                    raise ValueError(f"{path}:{n}: {name} {row[name]!r} is not a number") from None
                if not math.isfinite(v) or v < 0:
                    raise ValueError(f"{path}:{n}: {name} {row[name]!r} must be a finite number >= 0")
                out.append(v)
    if not labels:
        raise ValueError(f"{path}: no data rows")
    return labels, cap, thr
