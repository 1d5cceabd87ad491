"""The noise term of a choose run's prediction interval, from the probe's pooled between-process variance.

What is modelled: every probe arm (the baseline and each calibration setting: a label) measures ``n_k``
uncontended processes of one setting; their log tok/s (one value per process) differ only by process noise, so each
arm with ``n_k >= 2`` gives the one-level ANOVA estimate of the between-process variance with ``n_k - 1`` degrees
of freedom (``analysis.comparison.variance.between_only``), and the arms, assumed to share one variance (logs make
it relative), are pooled weighted by their degrees of freedom::

    s2 = sum_k df_k s2_k / df,    df = sum_k (n_k - 1) = processes - arms

(the pooled variance of a one-way layout, Searle, Casella & McCulloch, *Variance Components*, Wiley 1992, §3.5:
MSW of the arms as groups; one pooled estimate, so its df are exact and no Satterthwaite approximation,
``analysis.comparison.verdict_rule.satterthwaite_df``, is needed). A new process's retention against the probe
baseline (its tok/s over ``baseline_tok_s``, the median of ``n_b`` baseline processes) then has log-scale error
variance ``s2 (1 + c / n_b)``, ``c = 1`` for ``n_b <= 2`` (a median of two is their mean) and ``c = pi / 2``
above (the median's asymptotic variance relative to the mean's, an upper bound for small ``n_b``: 1.35 at 3), and
the noise half-width at ``CONFIDENCE`` is the t prediction interval (Student's t quantile at ``df``,
``analysis.comparison.verdict_rule.t_quantile``)::

    half = t_{1 - alpha/2}(df) * s * sqrt(1 + c / n_b)      (log units; printed as percent, 100 * half)

which ``offload_tools.choice`` combines with the fit's worst point error (``sqrt(noise^2 + residual^2)``).

Floor: ``DF_FLOOR`` = 2 degrees of freedom. Below it (the default probe: 2 baselines and one process per
calibration setting, 4 processes in 3 arms, 1 df) the SD is not bounded: the chi-square interval of one df spans
0.45x to 31.9x the estimate (``chi2_quantile``), and t at 1 df is 12.7 against 4.3 at 2. There the half-width is
still the t interval at the df there are (honest, wide), never narrower than the baselines' range (the noise term
before this rule, ``results_schema.rules.spread_rule.spread_pct``), and the decision line says the df are below the
floor with the SD's upper bound; with 0 df (no arm repeated) only the range is left.

What is deliberately not modelled: variance that differs between arms (one pooled SD), within-process rounds (a
process's value is its throughput over its measured rounds), the calibration points' own noise in the fit (the
fit's worst point error carries it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from analysis.comparison.variance import between_only, chi2_quantile
from analysis.comparison.verdict_rule import CONFIDENCE, t_quantile
from results_schema.rules.spread_rule import spread_pct

__all__ = ["DF_FLOOR", "ProbeNoise", "noise_text", "probe_noise"]

DF_FLOOR = 2
"""Degrees of freedom below which the pooled SD is not bounded (module docstring)."""


@dataclass(frozen=True)
class ProbeNoise:
    """The noise term of one choice (module docstring).

    Attributes:
        half_width_pct: the noise half-width (percent of the predicted retention), the choice's ``noise_pct``.
        sd_pct: pooled SD of log tok/s x 100 (about percent of throughput); nan with 0 df.
        df: its degrees of freedom, ``processes - arms`` over the repeated arms.
        processes, arms: uncontended probe processes and arms (labels) it pooled.
        baselines: baseline processes (``n_b``).
        t: the t quantile used (nan with 0 df).
        range_pct: the baselines' range over their median (percent): the floor of ``half_width_pct`` below DF_FLOOR.
        confidence: the interval's level.
    """

    half_width_pct: float
    sd_pct: float
    df: int
    processes: int
    arms: int
    baselines: int
    t: float
    range_pct: float
    confidence: float

    @property
    def sd_high_pct(self) -> float:
        """The SD's upper confidence bound at ``confidence`` (chi-square at ``df``,
        ``analysis.comparison.variance.chi2_quantile``; percent); nan with 0 df."""
        if self.df == 0:
            return math.nan
        return self.sd_pct * math.sqrt(self.df / chi2_quantile((1.0 - self.confidence) / 2.0, self.df))

    @property
    def below_floor(self) -> bool:
        """True when ``df < DF_FLOOR``."""
        return self.df < DF_FLOOR


def probe_noise(arms: Mapping[str, Sequence[float]], baseline: str = "baseline",
                confidence: float = CONFIDENCE) -> ProbeNoise:
    """The pooled noise term of probe ``arms`` (``label -> per-process tok/s``, uncontended processes only).

    Raises:
        ValueError: no ``baseline`` arm, or a throughput that is not positive and finite (``between_only``).
    """
    if not arms.get(baseline):
        raise ValueError(f"probe noise needs the {baseline!r} arm (got arms {sorted(arms)})")
    parts = [between_only(list(xs), confidence) for xs in arms.values() if len(xs) >= 2]
    df = sum(p[3] for p in parts)
    base = list(arms[baseline])
    n_b = len(base)
    rng = spread_pct(base) or 0.0
    processes, n_arms = sum(len(xs) for xs in arms.values()), len(arms)
    if df == 0:
        return ProbeNoise(rng, math.nan, 0, processes, n_arms, n_b, math.nan, rng, confidence)
    s2 = sum(p[0] * p[3] for p in parts) / df
    c = 1.0 if n_b <= 2 else math.pi / 2.0
    t = t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    half = 100.0 * t * math.sqrt(s2 * (1.0 + c / n_b))
    if df < DF_FLOOR:
        half = max(half, rng)
    return ProbeNoise(half, 100.0 * math.sqrt(s2), df, processes, n_arms, n_b, t, rng, confidence)


def noise_text(n: ProbeNoise) -> str:
    """The decision line's words for ``n``: the df, the pooled SD, the t quantile, and the floor when below it."""
    head = f"noise +-{n.half_width_pct:.1f}% from {n.processes} probe processes in {n.arms} arms"
    if n.df == 0:
        return (f"{head}: 0 df (no arm repeated), no SD estimated: the baselines' range {n.range_pct:.1f}%, not a "
                f"bound on the noise")
    core = (f"{head}: pooled SD {n.sd_pct:.2f}% of log tok/s, {n.df} df, t({n.df}) = {n.t:.3f} at "
            f"{n.confidence:.0%} x sqrt(1 + {'1' if n.baselines <= 2 else 'pi/2'}/{n.baselines} baselines)")
    if not n.below_floor:
        return core
    return (f"{core}; {n.df} df is below the floor of {DF_FLOOR}: the SD's {n.confidence:.0%} upper bound is "
            f"{n.sd_high_pct:.1f}%, so the interval is the t interval at {n.df} df, never narrower than the baselines' "
            f"range {n.range_pct:.1f}%")
