"""The verdict rule of every comparison: a t interval of the relative difference and an equivalence margin.

What is modelled:

* ``unpaired_interval`` (two groups of per-process values; the process is the unit, never a round): a t
  interval of the difference of mean *log* values, ``m = mean(log a) - mean(log b)``, mapped to percent as
  ``100 (exp(x) - 1)`` (the interval of the ratio of the groups' geometric means): Welch's, with the
  Welch-Satterthwaite degrees of freedom ``nu = V^2 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``,
  ``V = s_a^2/n_a + s_b^2/n_b`` (Welch 1947; Satterthwaite 1946), widened to the pooled (Student) t interval
  where that is wider (only possible with unequal counts; see the function). Under log-normal process noise
  (each process a log-normal value around its arm's centre) its coverage is nominal up to Welch's
  approximation, and a call needs both intervals to exclude 0.
* ``paired_interval`` (paired: one value per side per block, e.g. a serving block's label process against
  its block's baselines): the t interval of the mean per-block log ratio ``log(a_k / b_k)`` with ``k - 1``
  degrees of freedom (Student 1908); a block shares whatever both its arms ran under (drift, placement).
* ``verdict``: from the interval of ``(A - B) / B`` in percent and an equivalence margin ``m``:
  ``equivalent`` when the whole interval lies inside ``[-m, +m]`` (checked first: a difference smaller
  than the margin is never called a speed-up or a cost; the two one-sided tests idea, Schuirmann 1987,
  here at the interval's own confidence); else ``faster`` when it lies above 0, ``slower`` when below 0;
  else (or without an interval) ``inconclusive``. One meaning of ``equivalent`` for every caller.
* ``verdict_text``: the verdict in words with its interval and margin; an ``equivalent`` whose interval
  excludes 0 names the side (``equivalent (slower by 1.0-4.7%, inside ±5%; CI95 ...)``).
* ``decide`` / ``decide_paired``: the rule applied to two groups / to paired blocks, as a ``Decision``.

Every call takes ``confidence`` (default ``CONFIDENCE`` = 0.95), so a group-sequential design can ask for
the interval at its look's spent alpha. The error rates the rule was shown to have (A/A false
``slower``/``faster`` at most alpha + 2 simulation SEs, simulating ``decide`` and ``decide_paired`` at this
host's variance components, a two-cluster arm and a linear drift, 2-6 processes per side, 2-3 blocks) are in
``tests/analysis/test_verdict_coverage.py`` and ``docs/measurements/verdict-rule-2026-12-05.md`` (printed by
``scripts/verdict_power.py``). The percentile bootstrap of medians this replaced under-covered (6-7% false
calls at a nominal 5% with 4 vs 4 processes), and the serving blocks' range rule had no 95% coverage at all
(its own bound was 2/9 at 2 blocks).

What is deliberately not modelled: which groups are compared (``analysis.comparison.compare``), rounds as
samples (rounds of one process share its load and placement: the process is the unit), multiple-comparison
correction across labels, sequential looks (a caller spending alpha passes its own ``confidence``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import SupportsFloat, TypeGuard

import numpy as np

from analysis.comparison.moments import mean, median, sample_variance
from results_schema.rules.number_rule import NumberRange

CONFIDENCE = 0.95
"""Two-sided confidence of every interval a verdict rests on (alpha = 0.05: at most 2.5% false ``slower``
and 2.5% false ``faster`` under no effect)."""

DEFAULT_MARGIN_PCT = 5.0
"""Default equivalence margin (percent of B). Chosen as the spread seen between repeated processes of one
vLLM throughput case on one machine (a few percent); give ``margin_pct`` per comparison
(``python -m analysis report --margin-pct``) where a tighter or looser claim is wanted."""

MARGIN_PCT_RANGE = NumberRange(low=0, low_open=True, unit="percent")
"""Where an equivalence margin has a meaning: a finite percentage > 0 (``--margin-pct`` of every command)."""

WELCH = "Welch t"
POOLED = "pooled t"
PAIRED = "paired t"

VERDICTS = ("faster", "slower", "equivalent", "inconclusive")


def _finite(x: object) -> TypeGuard[float]:
    """True for a finite number (anything ``float`` accepts); False for None, NaN, inf, non-numbers."""
    if isinstance(x, float):
        return math.isfinite(x)
    if not isinstance(x, (SupportsFloat, str, bytes)):
        return False
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def check_margin(margin_pct: float) -> float:
    """Return ``margin_pct`` as float; ValueError (naming the value) unless finite and > 0."""
    if not _finite(margin_pct) or float(margin_pct) <= 0:
        raise ValueError(f"equivalence margin {margin_pct!r}: must be a finite percentage > 0 (e.g. 5)")
    return float(margin_pct)


def check_confidence(confidence: float) -> float:
    """Return ``confidence`` as float; ValueError (naming the value) unless 0 < confidence < 1."""
    if not _finite(confidence) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence {confidence!r}: must be a number strictly between 0 and 1 (e.g. 0.95)")
    return float(confidence)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz; Press et al.,
    Numerical Recipes, 3rd ed., section 6.4). The two half-steps of each iteration are written out (the
    simulations of the verdict rule evaluate it millions of times); ``abs(v) > tiny`` as ``v > tiny or v < -tiny``,
    which is the same for every float, NaN included."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if d > tiny or d < -tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        if not (c > tiny or c < -tiny):
            c = tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if d > tiny or d < -tiny else tiny)
        c = 1.0 + aa / c
        if not (c > tiny or c < -tiny):
            c = tiny
        dc = d * c
        h *= dc
        if abs(dc - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)`` for a, b > 0 and 0 <= x <= 1 (Numerical Recipes 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Upper tail ``P(T > t)`` of Student's t with ``df`` (> 0, real) degrees of freedom, for t >= 0:
    ``I_{df/(df+t^2)}(df/2, 1/2) / 2`` (Abramowitz & Stegun 26.7.1 with 26.5.2)."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


def f_sf(f: float, d1: float, d2: float) -> float:
    """Upper tail ``P(F > f)`` of the F distribution with ``(d1, d2)`` degrees of freedom (both > 0, real):
    ``I_{d2/(d2 + d1 f)}(d2/2, d1/2)`` (Abramowitz & Stegun 26.6.2 with 26.5.2); 1 for ``f <= 0``. Checked against
    the printed table values in ``tests/analysis/test_shared_time.py`` (4.76 at (3, 6), 4.10 at (2, 10): 5%)."""
    if f <= 0.0:
        return 1.0
    return _betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def _t_pdf(t: float, df: float) -> float:
    """Density of Student's t with ``df`` degrees of freedom at ``t``."""
    ln = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(ln - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def _t_start(p: float, z: float, df: float) -> float:
    """Start of :func:`t_quantile`'s Newton steps: the Cauchy quantile ``tan(pi (p - 1/2))`` at ``df`` 1, else the
    Cornish-Fisher expansion of t in the normal quantile ``z`` to ``1/df^4`` (Abramowitz & Stegun 26.7.5)."""
    if df == 1.0:
        return math.tan(math.pi * (p - 0.5))
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (real df > 0; ``inf`` = normal).

    Solved by safeguarded Halley steps on ``t_sf`` (Newton's step ``f / pdf`` corrected by the density's slope,
    ``pdf' = -pdf (df + 1) t / (df + t^2)``; bisection whenever a step leaves the bracket, doubling while there is no
    upper bound) until a step is below 1e-12 relative (no SciPy in the environment). A non-integer ``df`` between 1
    and 1000 (a Welch df) starts from the quantiles at the integers around it, interpolated in ``1/df`` (the quantile
    falls with ``df``, so they also bracket it): about 3.6 evaluations of ``t_sf`` per quantile, 6.1 with Newton
    steps from the normal quantile. Other ``df`` start from :func:`_t_start`. Accuracy: within 1e-10 relative of
    mpmath at 30 digits for ``p >= 0.5`` and df up to 1e3 (test), 1e-11 to 2e-10 at df 1e4-1e5 and up to 3e-8 at
    df 1e6-1e7 (``t_sf``'s own rounding; above 1e7 the normal quantile is returned); for ``p < 0.5`` the answer is
    ``-t_quantile(1 - p)``, so ``1 - p`` rounds it (5.7e-8 relative at p = 1e-9) and a ``p`` below about 1.1e-16 is
    refused as ``p = 1``. The verdict rule asks for ``p > 0.5`` and ``df >= 1``. Checked against the printed table
    values in the tests (12.706 at df 1, 4.303 at 2, 2.776 at 4, 1.960 at infinity). Memoized per ``(p, df)`` (a pure
    function; a look's or a simulation's quantiles repeat: a paired t's df is its blocks - 1).

    Raises:
        ValueError: ``p`` outside (0, 1) or ``df`` not > 0; or a quantile so far in a tail (at a df well below 1)
            that ``t^2 / df`` overflows (beyond about 1e152 at df 1e-3) before it is reached.
    """
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile(p={p!r}, df={df!r}): needs 0 < p < 1 and df > 0")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    z = NormalDist().inv_cdf(p)
    if p == 0.5 or math.isinf(df) or df > 1e7:
        return z
    tail = 1.0 - p
    lo, hi = 0.0, math.inf
    whole = math.floor(df)
    t_above, t_below = ((t_quantile(p, float(whole + 1)), t_quantile(p, float(whole))) if 1 <= whole < min(df, 1e3)
                        else (math.nan, math.nan))
    if t_above <= t_below:  # a Welch df; False (NaN) otherwise, or where t_sf's rounding inverts the two
        w = (1.0 / df - 1.0 / (whole + 1)) / (1.0 / whole - 1.0 / (whole + 1))
        x = t_above + w * (t_below - t_above)
        lo, hi = t_above, t_below
    else:
        x = _t_start(p, z, df)
        # at df < 1 the expansion's negative terms can win at a small z; it overflows at a tiny df
        if not 0.0 < x < math.inf:
            x = z
    for _ in range(200):
        f = t_sf(x, df) - tail
        if f > 0:
            lo = x
        else:
            hi = x
        pdf = _t_pdf(x, df)
        if not pdf > 0.0:  # t * t / df overflows: t_sf cannot be evaluated in floats out there
            raise ValueError(f"t_quantile(p={p!r}, df={df!r}): the quantile lies beyond {x:.3g}, where t^2 / df "
                             "overflows a float; the verdict rule asks for df >= 1")
        step = f / pdf
        halley = 1.0 - step * (df + 1.0) * x / (2.0 * (df + x * x))
        nxt = x + (step / halley if halley > 0.0 else step)  # a non-positive correction: Newton's step
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi) if math.isfinite(hi) else 2.0 * x
        if abs(nxt - x) < 1e-12 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return x


@dataclass(frozen=True)
class Interval:
    """A confidence interval of ``(A - B) / B`` in percent (``unpaired_interval`` / ``paired_interval``).

    Attributes:
        center_pct: ``100 (exp(mean log difference) - 1)``: the ratio of geometric means (unpaired) or the
            geometric mean per-block ratio (paired), minus 1, in percent.
        low_pct, high_pct: the interval's bounds (percent); NaN when there is none.
        df: degrees of freedom of the t quantile (Welch-Satterthwaite, or blocks - 1; inf when the
            difference has no spread; NaN without an interval).
        confidence: two-sided confidence.
        method: ``WELCH``, ``POOLED`` or ``PAIRED``.
        why: '' or why there is no interval (one line).
    """

    center_pct: float
    low_pct: float
    high_pct: float
    df: float
    confidence: float
    method: str
    why: str = ""


def _logs(xs: Sequence[float] | np.ndarray) -> list[float] | None:
    """``log`` of ``xs`` as floats (numpy's ``log``); None when a value is not finite and > 0 (a ratio needs
    positive values). A list: the moments of a few values are taken in Python (``analysis.comparison.moments``)."""
    v = [float(x) for x in xs]  # checked in Python: a comparison has a few values, numpy's per-call cost dominates
    if not v or not all(math.isfinite(x) and x > 0 for x in v):
        return None
    return np.log(np.asarray(v, dtype=float)).tolist()


def _from_log(m: float, half: float, df: float, confidence: float, method: str) -> Interval:
    return Interval(100.0 * math.expm1(m), 100.0 * math.expm1(m - half), 100.0 * math.expm1(m + half), df,
                    confidence, method)


def _none(method: str, confidence: float, why: str, center: float = math.nan) -> Interval:
    return Interval(center, math.nan, math.nan, math.nan, confidence, method, why)


def satterthwaite_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms (Satterthwaite 1946; Welch 1947).

    Args:
        parts: ``(term, df)`` per term, e.g. ``(s_a^2 / n_a, n_a - 1)``; a term or df <= 0 adds nothing below.

    Returns:
        ``(sum term)^2 / sum(term^2 / df)``; ``inf`` when every term is 0 (no spread: the t quantile is z's).
    """
    total = sum(t for t, _ in parts)
    denom = sum(t * t / df for t, df in parts if df > 0 and t > 0)
    return total * total / denom if denom > 0 else math.inf


def unpaired_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                      confidence: float = CONFIDENCE) -> Interval:
    """The interval of ``A / B - 1`` (percent) from per-process values: the wider of Welch's and the pooled t.

    Both are centred on ``m = mean(log a) - mean(log b)``: Welch's half-width ``t(nu) sqrt(V)`` with the
    Welch-Satterthwaite ``nu`` (module docstring), the pooled (Student) half-width
    ``t(n_a + n_b - 2) s_p sqrt(1/n_a + 1/n_b)``. With equal counts the two share the standard error and the
    pooled df is the larger, so the interval is Welch's. With unequal counts each alone misses its coverage
    somewhere (Welch where the smaller side's variance is underestimated: 6-14% false calls at 2 vs 6
    processes, two-cluster arms; pooled where the smaller side is the noisier); a call needs both to exclude
    0, so its false-call rate is at most the smaller of the two (simulated in the tests). With two processes
    on a side Welch takes 1 degree of freedom (Hsu's conservative ``min(n_a, n_b) - 1``): that side's spread
    rests on one difference, and two arms of two processes each drawn from two modes 15% apart are called
    in about 6% of A/A pairs with the Satterthwaite df.

    Args:
        a, b: per-process values (tok/s, or ms for a latency), each value > 0.
        confidence: two-sided confidence, 0 < confidence < 1.

    Returns:
        ``Interval`` (``method`` names the wider one: ``WELCH`` or ``POOLED``); no interval (NaN bounds, ``why``
        says which) with fewer than two values on a side or a value that is not finite and > 0. Both sides
        without spread: the point ``[center, center]``, df inf.

    Raises:
        ValueError: ``confidence`` outside (0, 1).
    """
    conf = check_confidence(confidence)
    la, lb = _logs(a), _logs(b)
    if la is None or lb is None:
        return _none(WELCH, conf, "a value is not a finite number > 0 (a ratio interval needs positive values)")
    m = mean(la) - mean(lb)
    na, nb = len(la), len(lb)
    if na < 2 or nb < 2:
        return _none(WELCH, conf, f"fewer than 2 processes on a side (n={na} vs {nb})", 100.0 * math.expm1(m))
    sa, sb = sample_variance(la), sample_variance(lb)
    v = sa / na + sb / nb
    if v <= 0.0:
        return _from_log(m, 0.0, math.inf, conf, WELCH)
    q = 0.5 + conf / 2.0
    df = satterthwaite_df([(sa / na, na - 1), (sb / nb, nb - 1)]) if min(na, nb) > 2 else 1.0
    half = t_quantile(q, df) * math.sqrt(v)
    if na != nb:
        df_p = float(na + nb - 2)
        half_p = t_quantile(q, df_p) * math.sqrt(((na - 1) * sa + (nb - 1) * sb) / df_p * (1.0 / na + 1.0 / nb))
        if half_p > half:
            return _from_log(m, half_p, df_p, conf, POOLED)
    return _from_log(m, half, df, conf, WELCH)


def paired_interval(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                    confidence: float = CONFIDENCE) -> Interval:
    """Paired t interval (``k - 1`` df) of the per-block ratio ``A_k / B_k - 1`` (percent; module docstring).

    Args:
        a, b: one value per block and side (``a[k]`` and ``b[k]`` ran in block ``k``), same length, each > 0.
        confidence: two-sided confidence, 0 < confidence < 1.

    Returns:
        ``Interval``; no interval with fewer than two blocks or a value that is not finite and > 0.

    Raises:
        ValueError: ``a`` and ``b`` of different lengths, or ``confidence`` outside (0, 1).
    """
    conf = check_confidence(confidence)
    if len(a) != len(b):
        raise ValueError(f"paired_interval: {len(a)} values of A vs {len(b)} of B; one of each per block")
    la, lb = _logs(a), _logs(b)
    if la is None or lb is None:
        return _none(PAIRED, conf, "a value is not a finite number > 0 (a ratio interval needs positive values)")
    d = [x - y for x, y in zip(la, lb, strict=True)]
    m = mean(d)
    if len(d) < 2:
        return _none(PAIRED, conf, f"fewer than 2 blocks ({len(d)})", 100.0 * math.expm1(m))
    se = math.sqrt(sample_variance(d)) / math.sqrt(len(d))
    if se <= 0.0:
        return _from_log(m, 0.0, math.inf, conf, PAIRED)
    df = float(len(d) - 1)
    return _from_log(m, t_quantile(0.5 + conf / 2.0, df) * se, df, conf, PAIRED)


def verdict(ci_low_pct: float | None, ci_high_pct: float | None, *,
            margin_pct: float = DEFAULT_MARGIN_PCT) -> str:
    """The verdict for "A vs B" from the interval of ``(A - B) / B`` in percent (see the module docstring).

    Args:
        ci_low_pct, ci_high_pct: interval bounds (percent of B); None/NaN = no interval.
        margin_pct: equivalence margin (percent, > 0).

    Returns:
        ``equivalent`` iff the whole interval lies in ``[-margin_pct, +margin_pct]``;
        else ``faster`` iff it is above 0, ``slower`` iff below 0; else (or without an
        interval) ``inconclusive``. "faster" reads "A is higher"; callers comparing a
        lower-is-better metric (latency) negate and swap the bounds first (``decide`` does).

    Raises:
        ValueError: a margin that is not a finite number > 0.
    """
    m = check_margin(margin_pct)
    if not (_finite(ci_low_pct) and _finite(ci_high_pct)):
        return "inconclusive"
    lo, hi = float(ci_low_pct), float(ci_high_pct)
    if -m <= lo and hi <= m:
        return "equivalent"
    if lo > 0:
        return "faster"
    if hi < 0:
        return "slower"
    return "inconclusive"


def interval_label(confidence: float = CONFIDENCE, method: str = "") -> str:
    """``CI95`` (or ``CI95 Welch t``): how the interval is named in every printed verdict."""
    pct = 100.0 * float(confidence)
    return f"CI{pct:.3g}" + (f" {method}" if method else "")


def verdict_text(v: str, ci_low_pct: float | None, ci_high_pct: float | None, *,
                 margin_pct: float = DEFAULT_MARGIN_PCT, higher_is_better: bool = True,
                 confidence: float = CONFIDENCE, method: str = "") -> str:
    """``v`` with its interval and margin, e.g. ``inconclusive (CI95 Welch t -50.0%..+100.0%, margin ±5%)``.

    An ``equivalent`` whose interval excludes 0 names its side first: ``equivalent (slower by 1.0-4.7%,
    inside ±5%; CI95 Welch t -4.7%..-1.0%)``. The bounds are of ``(A - B) / B`` as measured; for a
    lower-is-better metric (``higher_is_better=False``) a positive interval reads ``slower``.
    """
    lab = interval_label(confidence, method)
    if not (_finite(ci_low_pct) and _finite(ci_high_pct)):
        return f"{v} (no CI, margin ±{float(margin_pct):.3g}%)"
    lo, hi = float(ci_low_pct), float(ci_high_pct)
    ci = f"{lab} {lo:+.1f}%..{hi:+.1f}%"
    if v == "equivalent" and (lo > 0 or hi < 0):
        side = ("faster" if lo > 0 else "slower") if higher_is_better else ("slower" if lo > 0 else "faster")
        a, b = sorted((abs(lo), abs(hi)))
        return f"{v} ({side} by {a:.1f}-{b:.1f}%, inside ±{float(margin_pct):.3g}%; {ci})"
    return f"{v} ({ci}, margin ±{float(margin_pct):.3g}%)"


@dataclass(frozen=True)
class Decision:
    """A verdict with what it rests on (``decide``'s and ``decide_paired``'s result).

    Attributes:
        verdict: one of ``VERDICTS``.
        delta_pct: ``(median(A) - median(B)) / median(B)`` in percent (the medians every table prints;
            paired: the median per-block difference).
        ci_low_pct, ci_high_pct: the interval of ``(A - B) / B`` (percent; NaN without one), as measured.
        margin_pct: equivalence margin used.
        n_a, n_b: value counts (paired: blocks on each side).
        text: ``verdict_text`` (verdict, interval, margin).
        center_pct: the interval's centre (ratio of geometric means minus 1, percent).
        df: degrees of freedom of the interval (NaN without one).
        confidence: the interval's two-sided confidence.
        method: ``WELCH``, ``POOLED`` or ``PAIRED``.
    """

    verdict: str
    delta_pct: float
    ci_low_pct: float
    ci_high_pct: float
    margin_pct: float
    n_a: int
    n_b: int
    text: str
    center_pct: float = math.nan
    df: float = math.nan
    confidence: float = CONFIDENCE
    method: str = WELCH


def _decision(iv: Interval, delta_pct: float, n: tuple[int, int], margin_pct: float,
              higher_is_better: bool) -> Decision:
    lo, hi = iv.low_pct, iv.high_pct
    v = verdict(lo, hi, margin_pct=margin_pct) if higher_is_better else verdict(-hi, -lo, margin_pct=margin_pct)
    text = verdict_text(v, lo, hi, margin_pct=margin_pct, higher_is_better=higher_is_better,
                        confidence=iv.confidence, method=iv.method)
    return Decision(v, delta_pct, lo, hi, float(margin_pct), n[0], n[1], text, iv.center_pct, iv.df,
                    iv.confidence, iv.method)


def decide(a, b, *, margin_pct: float = DEFAULT_MARGIN_PCT, higher_is_better: bool = True,
           confidence: float = CONFIDENCE) -> Decision:
    """The verdict on two groups of per-process values: ``unpaired_interval`` then ``verdict``.

    Args:
        a, b: per-process values (tok/s, or seconds / ms for a latency), each non-empty.
        margin_pct: equivalence margin (percent of B, > 0).
        higher_is_better: False for latencies (TTFT, TPOT): ``faster`` then means A is lower.
        confidence: the interval's two-sided confidence (a sequential look passes its own).

    Returns:
        ``Decision``; ``delta_pct`` and the interval are of ``A - B`` as measured (not negated).
        ``inconclusive`` without an interval (one process on a side, a value <= 0).

    Raises:
        ValueError: an empty sample, a non-positive median of B, a bad margin or confidence.
    """
    check_margin(margin_pct)
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"decide needs at least one value per side (got {len(a)} and {len(b)})")
    mb = median(b)
    if not mb > 0:
        raise ValueError(f"median of B is {mb}: relative differences need a positive reference")
    iv = unpaired_interval(a, b, confidence=confidence)
    delta = (median(a) - mb) / mb * 100.0
    return _decision(iv, delta, (len(a), len(b)), margin_pct, higher_is_better)


def decide_paired(a, b, *, margin_pct: float = DEFAULT_MARGIN_PCT, higher_is_better: bool = True,
                  confidence: float = CONFIDENCE) -> Decision:
    """The verdict on paired blocks (``a[k]`` vs ``b[k]``): ``paired_interval`` then ``verdict``.

    Args:
        a, b: one value per block and side, same length (>= 1), each > 0 for an interval.
        margin_pct, higher_is_better, confidence: as ``decide``.

    Returns:
        ``Decision``; ``delta_pct`` is the median per-block difference ``(a_k - b_k) / b_k`` (percent).

    Raises:
        ValueError: empty or unequal lengths, a non-positive ``b_k``, a bad margin or confidence.
    """
    check_margin(margin_pct)
    if len(a) == 0 or len(a) != len(b):
        raise ValueError(f"decide_paired needs one value per block on each side (got {len(a)} and {len(b)})")
    bb = np.asarray(b, dtype=float)
    if not np.all(bb > 0):
        raise ValueError(f"decide_paired: a block's B value is {float(bb.min())}: relative differences need a "
                         "positive reference")
    iv = paired_interval(a, b, confidence=confidence)
    delta = median((x - y) / y for x, y in zip(map(float, a), bb.tolist(), strict=True)) * 100.0
    return _decision(iv, delta, (len(a), len(b)), margin_pct, higher_is_better)
