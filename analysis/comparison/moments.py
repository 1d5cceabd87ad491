"""The median, mean and sample variance of a few floats, equal to numpy's, without numpy's per-call cost.

The verdict rule (``analysis.comparison.verdict_rule``) takes the median of 2-12 values and the mean and variance
of their logs per arm,
and its simulations (``analysis.comparison.power``, the coverage tests) call it hundreds of thousands of times; on
arrays that small ``ndarray.mean`` / ``ndarray.var`` spend their time in numpy's Python wrappers (about 10 us a
pair here, 1.5 us in Python). The sums below add in numpy's order, so the values are numpy's, not merely close:
numpy reduces a contiguous float64 array by pairwise summation (``pairwise_sum`` in numpy's
``_core/src/umath/loops_utils.h.src``): fewer than 8 values left to right from 0; up to 128 in eight interleaved
partial sums combined ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the remainder; above 128 the two
halves (the first a multiple of 8 values). ``ndarray.var(ddof=1)`` is the sum of the squared deviations from the
mean (``sum / n``) divided by ``n - 1`` (numpy ``_core/_methods.py`` ``_var``). ``tests/analysis/test_moments.py``
compares them with numpy bit for bit on 1-299 values, so a numpy that sums otherwise fails there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["mean", "median", "pairwise_sum", "sample_variance"]


def _pairwise(v: Sequence[float], lo: int, n: int) -> float:
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += v[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = v[lo:lo + 8]
        i, end = 8, n - n % 8
        while i < end:
            j = lo + i
            r0 += v[j]
            r1 += v[j + 1]
            r2 += v[j + 2]
            r3 += v[j + 3]
            r4 += v[j + 4]
            r5 += v[j + 5]
            r6 += v[j + 6]
            r7 += v[j + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for k in range(lo + i, lo + n):
            res += v[k]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(v, lo, half) + _pairwise(v, lo + half, n - half)


def pairwise_sum(v: Sequence[float]) -> float:
    """``numpy.add.reduce`` of ``v`` as a float64 array (module docstring): 0.0 for no values. numpy adds the
    pairwise sum to its identity 0.0 (so eight or more ``-0.0`` sum to ``0.0``); so does this."""
    return 0.0 + _pairwise(v, 0, len(v))


def mean(v: Sequence[float]) -> float:
    """``numpy.mean`` of the floats ``v`` (non-empty; ZeroDivisionError for none)."""
    return pairwise_sum(v) / len(v)


def sample_variance(v: Sequence[float]) -> float:
    """``numpy.var(v, ddof=1)`` of the floats ``v`` (at least 2 values; ZeroDivisionError for one)."""
    m = mean(v)
    return pairwise_sum([(x - m) * (x - m) for x in v]) / (len(v) - 1)


def median(xs: Iterable[float]) -> float:
    """Median of ``xs`` as floats, exactly ``numpy.median``'s value (the middle value, or the mean of the two
    middle ones; NaN when a value is NaN). ``xs`` is non-empty (the callers check; IndexError for none)."""
    v = sorted(float(x) for x in xs)
    if any(math.isnan(x) for x in v):
        return math.nan
    k = len(v) // 2
    return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2.0
