"""Where a throughput run's noise lives: between-process and within-process variance of each arm.

What is modelled: per phase and per arm (a label; the phase's reference -- its undelayed baselines pooled, as
the verdicts pool them -- is one more arm) the one-way random-effects model of the log throughput of measured
round ``j`` of case process ``i``::

    y_ij = mu + b_i + e_ij,   b_i ~ (0, s2_between),   e_ij ~ (0, s2_within)

``b_i`` is what one process carries for all its rounds (its memory layout, placement, warm-up state);
``e_ij`` is round-to-round noise inside one process. Logs make the components relative (an SD of 0.03 is
about 3% of the throughput) and comparable across arms.

Estimator: the ANOVA (method of moments) estimator of Searle, Casella and McCulloch, *Variance Components*
(Wiley 1992), §3.5 (balanced) and §3.6 (unbalanced, with ``n0``): with ``a`` processes, ``N`` rounds in all,
``n_i`` rounds of process ``i``::

    MSW = sum_ij (y_ij - ybar_i)^2 / (N - a)                    s2_within  = MSW
    MSB = sum_i n_i (ybar_i - ybar)^2 / (a - 1)                 s2_between = max(0, (MSB - MSW) / n0)
    n0  = (N - sum_i n_i^2 / N) / (a - 1)

truncated at 0 (a negative estimate means "no between-process variance seen"). The variance of one process's
value (the value a verdict resamples: its throughput over its measured rounds) is
``s2_process = s2_between + s2_within / n0`` (``= max(MSB, MSW) / n0``).

Uncertainty, at ``CONFIDENCE`` (the verdicts' confidence):

* ``s2_within``: chi-square interval with ``N - a`` degrees of freedom, ``[df MSW / q_hi, df MSW / q_lo]``;
* ``s2_process``: chi-square interval with ``a - 1`` degrees of freedom on ``MSB / n0`` (exact for balanced
  normal data, Searle et al. §3.5d): **with 4 processes it has 3 degrees of freedom** and spans about 0.32x
  to 13.9x the estimate (SD 0.57x to 3.7x) -- four processes say little about the between-process level;
* ``s2_between``: that interval less ``MSW / n0``, truncated at 0 (``MSW`` taken as known: it has the larger
  degrees of freedom). Approximate; stated as such.

Chi-square quantiles are computed here (regularized incomplete gamma, Numerical Recipes 3rd ed. §6.2, and
bisection), so no statistics library is needed; ``chi2_quantile(0.025, 3)`` = 0.2158 and
``chi2_quantile(0.975, 3)`` = 9.348 as in any table.

What is deliberately not modelled: levels above the process (runs, hosts: ``analysis catalog`` compares runs),
drift inside a process (``analysis.load.window_drift_pct``), and which source makes a process differ.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparison.verdict_rule import CONFIDENCE
from results_schema.rules.floor_rule import is_floor_baseline, is_speed_control

__all__ = ["ESTIMATOR", "Components", "arm_components", "between_only", "chi2_quantile", "components", "control_mask",
           "reference_mask", "variance_components"]

ESTIMATOR = ("one-way random-effects ANOVA on log tok/s of measured rounds, processes as groups (method of "
             "moments truncated at 0; Searle, Casella & McCulloch 1992, §3.5-3.6); intervals: chi-square with "
             "a-1 df (process level) and N-a df (rounds)")
"""The estimator in words, as every output names it."""


def _gammp(a: float, x: float) -> float:
    """Regularized lower incomplete gamma P(a, x) (Numerical Recipes 3rd ed. §6.2: series below a+1,
    Lentz's continued fraction above)."""
    if x <= 0:
        return 0.0
    gln = math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return total * math.exp(-x + a * math.log(x) - gln)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return 1.0 - math.exp(-x + a * math.log(x) - gln) * h


@functools.lru_cache(maxsize=4096)
def chi2_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of the chi-square distribution with ``df`` degrees of freedom (bisection on its CDF;
    cached: a pure function of its arguments, asked again for every arm of every simulated probe).

    Raises:
        ValueError: ``p`` outside (0, 1) or ``df`` not > 0.
    """
    if not (0.0 < p < 1.0) or not df > 0:
        raise ValueError(f"chi2_quantile(p={p!r}, df={df!r}): needs 0 < p < 1 and df > 0")
    lo, hi = 0.0, max(1.0, df)
    while _gammp(df / 2.0, hi / 2.0) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _gammp(df / 2.0, mid / 2.0) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _chi2_interval(estimate: float, df: float, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    return (df * estimate / chi2_quantile(1.0 - alpha / 2.0, df), df * estimate / chi2_quantile(alpha / 2.0, df))


class Components:
    """Variance components of one arm (see the module docstring); variances of log tok/s.

    Attributes:
        processes: ``a``; rounds: ``N``; n0: Searle's average rounds per process.
        df_between: ``a - 1``; df_within: ``N - a``.
        between, within, process: the estimates ``s2_between``, ``s2_within``, ``s2_process``.
        between_low/high, within_low/high, process_low/high: their intervals at ``confidence``.
    """

    def __init__(self, groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> None:
        ys = [np.log(np.asarray(g, dtype=float)) for g in groups if len(g)]
        if len(ys) < 2 or any(not np.all(np.isfinite(y)) for y in ys):
            raise ValueError(f"variance components need >= 2 processes with positive finite rounds (got {len(ys)})")
        n = np.array([len(y) for y in ys], dtype=float)
        self.processes, self.rounds = len(ys), int(n.sum())
        self.df_between, self.df_within = self.processes - 1, self.rounds - self.processes
        grand = float(np.concatenate(ys).mean())
        msb = float(sum(ni * (y.mean() - grand) ** 2 for ni, y in zip(n, ys, strict=True))) / self.df_between
        ssw = float(sum(((y - y.mean()) ** 2).sum() for y in ys))
        msw = ssw / self.df_within if self.df_within > 0 else 0.0
        self.n0 = float((n.sum() - (n ** 2).sum() / n.sum()) / self.df_between)
        self.confidence = confidence
        self.within = msw
        self.between = max(0.0, (msb - msw) / self.n0)
        self.process = max(msb, msw) / self.n0
        self.within_low, self.within_high = (_chi2_interval(msw, self.df_within, confidence)
                                             if self.df_within > 0 else (math.nan, math.nan))
        self.process_low, self.process_high = _chi2_interval(msb / self.n0, self.df_between, confidence)
        self.between_low = max(0.0, self.process_low - msw / self.n0)
        self.between_high = max(0.0, self.process_high - msw / self.n0)


def between_only(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, int]:
    """The between-process variance of positive ``values`` (one per process, no rounds: serving), in log units.

    Returns:
        ``(variance, low, high, df)``: the sample variance of the logs (``n - 1`` df, the one-level case of the
        ANOVA estimator) and its chi-square interval at ``confidence``.

    Raises:
        ValueError: fewer than 2 values, or a value that is not positive and finite.
    """
    y = np.log(np.asarray(values, dtype=float))
    if y.size < 2 or not np.all(np.isfinite(y)):
        raise ValueError(f"between-process variance needs >= 2 positive finite values (got {list(values)})")
    var = float(np.var(y, ddof=1))
    lo, hi = _chi2_interval(var, y.size - 1, confidence)
    return var, lo, hi, int(y.size - 1)


def components(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE) -> Components:
    """``Components`` of per-process round throughputs ``groups`` (tok/s, one sequence per process).

    Raises:
        ValueError: fewer than 2 processes, or a round throughput that is not positive and finite.
    """
    return Components(groups, confidence)


def reference_mask(runs: pd.DataFrame) -> pd.Series:
    """Rows of ``runs`` that form their phase's reference arm: the baseline processes (``implementation ==
    baseline``) that are no speed control (no ``step_delay_ms``): ``results_schema.rules.floor_rule.is_floor_baseline``
    per row. Every verdict vs "the baseline" pools these."""
    return _arm_mask(runs, is_floor_baseline)


def control_mask(runs: pd.DataFrame) -> pd.Series:
    """Rows of ``runs`` that are speed-control processes: ``results_schema.rules.floor_rule.is_speed_control`` per
    row (a baseline with a ``step_delay_ms``)."""
    return _arm_mask(runs, is_speed_control)


def _arm_mask(runs: pd.DataFrame, rule: Callable[[str, float | None], bool]) -> pd.Series:
    delay = (runs["step_delay_ms"].fillna(0.0).astype(float) if "step_delay_ms" in runs
             else pd.Series(0.0, index=runs.index))
    return pd.Series([rule(i, d) for i, d in zip(runs["implementation"], delay, strict=True)], index=runs.index,
                     dtype=bool)


def _groups(rounds: pd.DataFrame, keys: set[tuple[str, int]]) -> list[list[float]]:
    sub = rounds[[(lb, int(r)) in keys for lb, r in zip(rounds["label"], rounds["repeat"], strict=True)]]
    return [g["throughput_tok_s"].astype(float).tolist() for _, g in sub.groupby(["label", "repeat"], sort=True)]


def arm_components(runs: pd.DataFrame, rounds: pd.DataFrame, phase: str) -> dict[str, Components | None]:
    """``label -> Components`` of every arm of ``phase`` (None with fewer than 2 processes), plus the key
    ``"reference"`` for the pooled reference arm (``reference_mask``) when the phase has one.

    Args:
        runs, rounds: ``RunData.runs`` / ``RunData.rounds`` (``throughput_tok_s`` per measured round).
        phase: the phase.
    """
    pr, rr = runs[runs["phase"] == phase], rounds[rounds["phase"] == phase]
    arms: dict[str, set[tuple[str, int]]] = {}
    for lb, rep in zip(pr["label"], pr["repeat"], strict=True):
        arms.setdefault(str(lb), set()).add((str(lb), int(rep)))
    ref = pr[reference_mask(pr)]
    if not ref.empty:
        arms["reference"] = {(str(lb), int(rep)) for lb, rep in zip(ref["label"], ref["repeat"], strict=True)}
    out: dict[str, Components | None] = {}
    for arm, keys in arms.items():
        groups = _groups(rr, keys)
        out[arm] = components(groups) if len(groups) >= 2 else None
    return out


def sd_pct(var: float) -> float:
    """A log-scale variance as an SD in percent (``100 * (exp(sd) - 1)``; a negative variance counts as 0)."""
    return 100.0 * math.expm1(math.sqrt(max(var, 0.0)))


def variance_components(runs: pd.DataFrame, rounds: pd.DataFrame) -> list[dict[str, Any]]:
    """One ``results_schema.records.summary.VarianceComponentsRow`` dict per (phase, arm) with >= 2 processes.

    Variances are of log tok/s; ``*_sd_pct`` are their SDs as percent of the throughput.
    """
    out: list[dict[str, Any]] = []
    if runs.empty or rounds.empty:
        return out
    for phase in dict.fromkeys(str(p) for p in runs["phase"]):
        for arm, c in arm_components(runs, rounds, phase).items():
            if c is None:
                continue
            out.append({
                "phase": phase, "arm": arm, "processes": c.processes, "rounds": c.rounds, "n0": c.n0,
                "df_between": c.df_between, "df_within": c.df_within, "confidence": c.confidence,
                "between_var": c.between, "between_var_low": c.between_low, "between_var_high": c.between_high,
                "within_var": c.within,
                "within_var_low": None if math.isnan(c.within_low) else c.within_low,
                "within_var_high": None if math.isnan(c.within_high) else c.within_high,
                "process_var": c.process, "process_var_low": c.process_low, "process_var_high": c.process_high,
                "between_sd_pct": sd_pct(c.between), "within_sd_pct": sd_pct(c.within),
                "process_sd_pct": sd_pct(c.process),
            })
    return out
