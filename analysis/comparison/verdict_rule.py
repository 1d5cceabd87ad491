"""The verdict rule of every comparison: percentile bootstrap interval and equivalence margin.

What is modelled: ``bootstrap_delta`` (difference of medians with a seeded percentile bootstrap
95% interval, Efron & Tibshirani 1993, ch. 13), ``bootstrap_median`` (its paired form: the median of
per-block differences, resampling blocks), ``verdict`` (interval of the relative difference vs
an equivalence margin, Schuirmann 1987: inconclusive / equivalent / faster / slower), ``verdict_text``
and ``decide`` (the rule applied to two groups of per-process values). The rule and its worked
examples are stated in ``analysis.comparison.compare``'s docstring; every table, plot, report and recommendation
calls these functions.

What is deliberately not modelled: which groups are compared (``analysis.comparison.compare``).
"""

from __future__ import annotations

import math
from typing import SupportsFloat, TypeGuard
from dataclasses import dataclass

import numpy as np

from results_schema.rules.number_rule import NumberRange

BOOTSTRAP_SAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20260

DEFAULT_MARGIN_PCT = 5.0
"""Default equivalence margin (percent of B's median). Chosen as the spread seen between repeated
processes of one vLLM throughput case on one machine (a few percent); give ``margin_pct`` per
comparison (``python -m analysis report --margin-pct``) where a tighter or looser claim is wanted."""

MARGIN_PCT_RANGE = NumberRange(low=0, low_open=True, unit="percent")
"""Where an equivalence margin has a meaning: a finite percentage > 0 (``--margin-pct`` of every command)."""


def bootstrap_delta(a, b, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED,
                    confidence: float = CONFIDENCE) -> tuple[float, float, float, float, float]:
    """Median difference ``median(a) - median(b)`` with a percentile bootstrap CI.

    Args:
        a, b: samples (tok/s), each of length >= 1.
        samples: bootstrap draws.
        seed: RNG seed (numpy ``default_rng``).
        confidence: interval coverage.

    Returns:
        ``(delta, ci_low, ci_high, ci_low_pct, ci_high_pct)``; percent bounds are of
        ``(median_a* - median_b*) / median_b*`` per draw. With fewer than two values on
        either side the interval is ``(-inf, inf)`` reported as NaN bounds.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    delta = float(np.median(a) - np.median(b))
    if a.size < 2 or b.size < 2:
        return delta, float("nan"), float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, size=(samples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(samples, b.size))], axis=1)
    d = ma - mb
    pct = d / mb * 100.0
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    return (delta, float(np.percentile(d, lo_q)), float(np.percentile(d, hi_q)), float(np.percentile(pct, lo_q)),
            float(np.percentile(pct, hi_q)))


VERDICTS = ("faster", "slower", "equivalent", "inconclusive")


def _finite(x: object) -> TypeGuard[float]:
    """True for a finite number (anything ``float`` accepts); False for None, NaN, inf, non-numbers."""
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


def verdict(ci_low_pct: float | None, ci_high_pct: float | None, *,
            margin_pct: float = DEFAULT_MARGIN_PCT) -> str:
    """The verdict for "A vs B" from the CI of ``(A - B) / B`` in percent (see the module docstring).

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


def verdict_text(v: str, ci_low_pct: float | None, ci_high_pct: float | None, *,
                 margin_pct: float = DEFAULT_MARGIN_PCT) -> str:
    """``v`` with its interval and margin (3 significant digits), e.g. ``inconclusive (CI95 -50.0%..+100.0%, margin ±5%)``."""
    ci = (f"CI95 {float(ci_low_pct):+.1f}%..{float(ci_high_pct):+.1f}%"
          if _finite(ci_low_pct) and _finite(ci_high_pct) else "no CI")
    return f"{v} ({ci}, margin ±{float(margin_pct):.3g}%)"


def bootstrap_median(xs, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED,
                     confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Median of ``xs`` with a seeded percentile bootstrap interval (resampling its values).

    The paired form of ``bootstrap_delta``: ``xs`` are per-block differences (percent), one per block of
    a blocked design (``analysis.serving.stats.block_verdict``); resampling blocks keeps each pair whole.

    Args:
        xs: values, length >= 1.
        samples, seed, confidence: as ``bootstrap_delta``.

    Returns:
        ``(median, ci_low, ci_high)``; NaN bounds with fewer than two values. With three values the
        95% interval is their range (a resample's median is the smallest value with probability 7/27).
    """
    a = np.asarray(xs, dtype=float)
    med = float(np.median(a))
    if a.size < 2:
        return med, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = np.median(a[rng.integers(0, a.size, size=(samples, a.size))], axis=1)
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100
    return med, float(np.percentile(draws, lo_q)), float(np.percentile(draws, hi_q))


@dataclass(frozen=True)
class Decision:
    """A verdict with what it rests on (``decide``'s result).

    Attributes:
        verdict: one of ``VERDICTS``.
        delta_pct: ``(median(A) - median(B)) / median(B)`` in percent.
        ci_low_pct, ci_high_pct: bootstrap CI of that difference (NaN without one).
        margin_pct: equivalence margin used.
        n_a, n_b: sample counts.
        text: ``verdict_text`` (verdict, interval, margin).
    """

    verdict: str
    delta_pct: float
    ci_low_pct: float
    ci_high_pct: float
    margin_pct: float
    n_a: int
    n_b: int
    text: str


def decide(a, b, *, margin_pct: float = DEFAULT_MARGIN_PCT, higher_is_better: bool = True,
           samples: int = BOOTSTRAP_SAMPLES, seed: int = SEED) -> Decision:
    """Bootstrap the median difference of ``a`` vs ``b`` and apply ``verdict``.

    Args:
        a, b: per-process values (tok/s, or seconds for a latency), each non-empty.
        margin_pct: equivalence margin (percent of B's median, > 0).
        higher_is_better: False for latencies (TTFT, TPOT): ``faster`` then means A is lower.
        samples, seed: bootstrap draws and RNG seed (``bootstrap_delta``).

    Returns:
        ``Decision``; ``delta_pct`` and the interval are of ``A - B`` as measured (not negated).

    Raises:
        ValueError: an empty sample, a non-positive median of B, or a bad margin.
    """
    check_margin(margin_pct)
    if len(a) == 0 or len(b) == 0:
        raise ValueError(f"decide needs at least one value per side (got {len(a)} and {len(b)})")
    mb = float(np.median(np.asarray(b, dtype=float)))
    if not mb > 0:
        raise ValueError(f"median of B is {mb}: relative differences need a positive reference")
    delta, _lo, _hi, lo_p, hi_p = bootstrap_delta(a, b, samples=samples, seed=seed)
    v = verdict(lo_p, hi_p, margin_pct=margin_pct) if higher_is_better else \
        verdict(-hi_p, -lo_p, margin_pct=margin_pct)
    return Decision(v, delta / mb * 100.0, lo_p, hi_p, float(margin_pct), len(a), len(b),
                    verdict_text(v, lo_p, hi_p, margin_pct=margin_pct))
