"""What a throughput run could resolve: each label's minimum detectable cost, found by simulating ``decide``.

What is modelled: the minimum detectable effect (MDE) of a label against its phase's reference arm: the
smallest cost ``d`` (percent of the reference's throughput) that the production verdict rule
(``analysis.comparison.verdict_rule.decide``, the rule every table calls) calls ``slower`` in ``POWER`` (80%)
of runs of the same design (``n_a`` label processes vs ``n_b`` reference processes) at the noise the run
measured (``analysis.comparison.variance``: the SD of one process's value, per arm).

Why simulation and not the textbook formula ``(z_{1-alpha/2} + z_power) * sqrt(s_a^2/n_a + s_b^2/n_b)``: the
rule is a t interval on a handful of log values with estimated variances and degrees of freedom (Welch, widened
to the pooled t, 1 df with two processes on a side) and an equivalence margin checked first, so its power is not
that of a z-test with known variances (with 4 vs 4 processes the formula is off by tens of percent).

How: ``SIM_DATASETS`` datasets are drawn (seeded) with process values ``exp(sd * z)``, ``z`` standard normal;
``decide(a, b)`` runs once on each at no cost. Scaling ``a`` by ``c = 1 - d/100`` shifts the interval of
``mean(log a) - mean(log b)`` by ``log c`` and leaves its width alone, so each percent bound maps to
``c * (bound + 100) - 100``, an increasing affine map; so the verdict on ``c * a`` vs ``b`` is ``slower`` exactly when
``c * (hi + 100) < 100`` and ``c * (lo + 100) < 100 - margin`` (not inside the margin, below 0). Each dataset
thus has one threshold cost above which it is called ``slower``, and the MDE is the ``POWER`` quantile of the
thresholds: the power curve of ``decide`` itself, from one ``decide`` call per dataset. The tests check it by
calling ``decide`` at the MDE on fresh data (normal and two-cluster process effects).

The MDE's range: the variance of the difference, ``V = s_a^2/n_a + s_b^2/n_b``, has Welch-Satterthwaite
degrees of freedom ``nu = V^2 / ((s_a^2/n_a)^2/df_a + (s_b^2/n_b)^2/df_b)`` (Satterthwaite 1946); its
chi-square interval at the run's confidence scales both SDs, and the range spans the MDEs at the two ends and
at the estimate. The MDE is not monotone in the noise: at a very low noise a cost smaller than the equivalence
margin is called ``equivalent`` (the margin is checked first), so there the MDE rises to about the margin.

Shape: process effects are simulated normal (four processes cannot show an arm's shape). For an arm split into
two clusters of processes the stated MDE is conservative: simulated at a two-cluster arm (clusters +-8%, rounds 2%),
the rule calls the stated MDE ``slower`` about 90% of the time, not 80% (``tests/analysis/test_variance_power.py``).

What is deliberately not modelled: ``faster`` (an offload is a cost), multiple comparisons, a drift shared by
both arms (the design's rotation spreads it), withheld verdicts (a contended run resolves nothing).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparison.variance import ESTIMATOR, Components, arm_components, chi2_quantile, reference_mask, sd_pct
from analysis.comparison.verdict_rule import CONFIDENCE, DEFAULT_MARGIN_PCT, decide, decide_paired, satterthwaite_df
from results_schema.codec.scalars import finite_or_null

__all__ = ["POWER", "SIM_DATASETS", "SIM_SEED", "detectable_cost_pct", "detectable_effects", "detectable_paired_cost_pct",
           "mde_row", "power_lines", "slower_thresholds_pct"]

POWER = 0.80
"""Power at which the MDE is stated (the usual 80%, Cohen 1988)."""
SIM_DATASETS = 400
"""Simulated datasets per MDE: the power at the stated MDE is then within about 2 points (binomial SE)."""
MAX_SD_LOG = 3.0
"""Process SD (log units) beyond which no cost below 100% is resolved: processes an e^3 = 20x factor apart at one SD
(the upper end of a 1-3 df interval reaches it on a contended run); returned as ``inf`` without simulating, whose
exp and interval would overflow there. At 3.0 itself the MDE of 2 vs 2 processes is already above 90%."""
SIM_SEED = 5252
"""Seed of the simulated datasets (the MDE of a run is reproducible)."""


def slower_thresholds_pct(a: np.ndarray | Sequence[Sequence[float]], b: np.ndarray | Sequence[Sequence[float]], *,
                          margin_pct: float = DEFAULT_MARGIN_PCT, confidence: float = CONFIDENCE,
                          paired: bool = False) -> np.ndarray:
    """Per dataset, the smallest cost (percent) above which ``decide(a_k * (1 - d/100), b_k)`` is ``slower``.

    Args:
        a, b: datasets, ``a[k]`` and ``b[k]`` the label's and the reference's process values (any unit,
            positive), each with >= 2 values (paired: one per block, ``a[k][j]`` and ``b[k][j]`` of block ``j``).
        margin_pct: the verdicts' equivalence margin.
        confidence: the interval's two-sided confidence (a sequential look's level,
            ``analysis.comparison.sequential``).
        paired: judge each dataset with ``decide_paired`` instead of ``decide`` (the paired interval shifts by
            ``log c`` under the same scaling, so the same threshold argument holds).

    Returns:
        Array of thresholds (percent, may be negative when the dataset is already ``slower``); ``inf`` where
        ``decide`` gives no interval.
    """
    out = np.empty(len(a))
    rule = decide_paired if paired else decide
    for k, (ak, bk) in enumerate(zip(a, b, strict=True)):
        d = rule(list(ak), list(bk), margin_pct=margin_pct, confidence=confidence)
        if not (math.isfinite(d.ci_low_pct) and math.isfinite(d.ci_high_pct)):
            out[k] = math.inf
            continue
        # a bound at -100% (the interval's exp underflows: A is negligible beside B) holds at every scale c > 0
        c_hi = 100.0 / (d.ci_high_pct + 100.0) if d.ci_high_pct > -100.0 else math.inf
        c_lo = (100.0 - margin_pct) / (d.ci_low_pct + 100.0) if d.ci_low_pct > -100.0 else math.inf
        out[k] = 100.0 * (1.0 - min(c_hi, c_lo))
    return out


@functools.lru_cache(maxsize=256)
def detectable_cost_pct(n_a: int, sd_a: float, n_b: int, sd_b: float, *, margin_pct: float = DEFAULT_MARGIN_PCT,
                        power: float = POWER, datasets: int = SIM_DATASETS, seed: int = SIM_SEED,
                        confidence: float = CONFIDENCE) -> float:
    """The MDE: the cost (percent) that ``decide`` calls ``slower`` with probability ``power`` (module docstring).

    Args:
        n_a, n_b: processes of the label and of the reference (>= 2 each).
        sd_a, sd_b: SD of one process's log throughput (``sqrt(Components.process)``), >= 0.
        margin_pct: the verdicts' equivalence margin (percent).
        power: in (0, 1).
        datasets, seed: simulation size and seed.
        confidence: the verdicts' two-sided confidence (a sequential design's last look passes its own level).

    Returns:
        Percent of the reference's throughput (``inf`` when no cost below 100% reaches the power, or an SD exceeds
        ``MAX_SD_LOG``).

    Raises:
        ValueError: fewer than 2 processes on a side, a negative or non-finite SD, a power outside (0, 1).
    """
    if n_a < 2 or n_b < 2:
        raise ValueError(f"an MDE needs >= 2 processes per side (got {n_a} and {n_b}): a single process has no interval")
    if not (math.isfinite(sd_a) and math.isfinite(sd_b) and sd_a >= 0 and sd_b >= 0) or not 0 < power < 1:
        raise ValueError(f"detectable_cost_pct: SDs {sd_a!r}, {sd_b!r} must be finite >= 0, power {power!r} in (0, 1)")
    if max(sd_a, sd_b) > MAX_SD_LOG:
        return math.inf
    rng = np.random.default_rng(seed)
    a = np.exp(sd_a * rng.standard_normal((datasets, n_a)))
    b = np.exp(sd_b * rng.standard_normal((datasets, n_b)))
    thresholds = np.sort(slower_thresholds_pct(a, b, margin_pct=margin_pct, confidence=confidence))
    q = float(thresholds[min(datasets - 1, math.ceil(power * datasets) - 1)])  # the power quantile (inverted CDF)
    return q if q < 100.0 else math.inf


@functools.lru_cache(maxsize=256)
def detectable_paired_cost_pct(blocks: int, sd_d: float, *, margin_pct: float = DEFAULT_MARGIN_PCT,
                               power: float = POWER, datasets: int = SIM_DATASETS, seed: int = SIM_SEED,
                               confidence: float = CONFIDENCE) -> float:
    """The MDE of the paired rule (``decide_paired`` over ``blocks`` blocks): the cost (percent) it calls ``slower``
    with probability ``power`` when the per-block log ratio has SD ``sd_d`` (module docstring's method, each
    dataset ``blocks`` log ratios ``sd_d * z``, the reference side 1).

    Args:
        blocks: paired blocks (>= 2).
        sd_d: SD of one block's log ratio (label process vs the same block's baseline process), >= 0.
        margin_pct, power, datasets, seed, confidence: as ``detectable_cost_pct``.

    Returns:
        Percent of the reference's throughput (``inf`` when no cost below 100% reaches the power, or ``sd_d`` exceeds
        ``MAX_SD_LOG``).

    Raises:
        ValueError: fewer than 2 blocks, a negative or non-finite SD, a power outside (0, 1).
    """
    if blocks < 2:
        raise ValueError(f"a paired MDE needs >= 2 blocks (got {blocks}): a single block has no interval")
    if not (math.isfinite(sd_d) and sd_d >= 0) or not 0 < power < 1:
        raise ValueError(f"detectable_paired_cost_pct: SD {sd_d!r} must be finite >= 0, power {power!r} in (0, 1)")
    if sd_d > MAX_SD_LOG:
        return math.inf
    rng = np.random.default_rng(seed)
    a = np.exp(sd_d * rng.standard_normal((datasets, blocks)))
    thresholds = np.sort(slower_thresholds_pct(a, np.ones_like(a), margin_pct=margin_pct, confidence=confidence,
                                               paired=True))
    q = float(thresholds[min(datasets - 1, math.ceil(power * datasets) - 1)])
    return q if q < 100.0 else math.inf


def mde_row(phase: str, label: str, comp: Components, ref: Components, *, margin_pct: float = DEFAULT_MARGIN_PCT,
            confidence: float = CONFIDENCE, processes: tuple[int, int] | None = None) -> dict[str, Any]:
    """One ``results_schema.records.summary.DetectableEffectRow`` dict: the label's MDE vs the reference, its range.

    Args:
        phase, label: the arm.
        comp, ref: the label's and the reference's ``Components``.
        margin_pct, confidence: of the verdicts.
        processes: ``(n_a, n_b)`` of the design judged (default: the processes measured).
    """
    n_a, n_b = processes or (comp.processes, ref.processes)
    va, vb = comp.process / n_a, ref.process / n_b
    nu = satterthwaite_df([(va, comp.df_between), (vb, ref.df_between)])
    mde = detectable_cost_pct(n_a, math.sqrt(comp.process), n_b, math.sqrt(ref.process), margin_pct=margin_pct)
    lo = hi = mde
    if math.isfinite(nu) and va + vb > 0:
        alpha = 1.0 - confidence
        k_lo = math.sqrt(nu / chi2_quantile(1.0 - alpha / 2.0, nu))
        k_hi = math.sqrt(nu / chi2_quantile(alpha / 2.0, nu))
        ends = [detectable_cost_pct(n_a, k * math.sqrt(comp.process), n_b, k * math.sqrt(ref.process),
                                    margin_pct=margin_pct) for k in (k_lo, k_hi)]
        lo, hi = min(mde, *ends), max(mde, *ends)
    return {"phase": phase, "label": label, "processes": n_a, "reference_processes": n_b,
            "mde_pct": finite_or_null(mde), "mde_low_pct": finite_or_null(lo), "mde_high_pct": finite_or_null(hi),
            "df": None if not math.isfinite(nu) else nu, "power": POWER, "confidence": confidence,
            "margin_pct": float(margin_pct)}


def detectable_effects(runs: pd.DataFrame, rounds: pd.DataFrame, *,
                       margin_pct: float = DEFAULT_MARGIN_PCT) -> list[dict[str, Any]]:
    """``mde_row`` of every label of every phase that is not part of its phase's reference arm, where the label
    and the reference have >= 2 processes each (``analysis.comparison.variance.arm_components``)."""
    out: list[dict[str, Any]] = []
    if runs.empty or rounds.empty:
        return out
    for phase in dict.fromkeys(str(p) for p in runs["phase"]):
        pr = runs[runs["phase"] == phase]
        ref_labels = set(pr.loc[reference_mask(pr), "label"].astype(str))
        arms = arm_components(runs, rounds, phase)
        ref = arms.get("reference")
        for label, comp in arms.items():
            if label == "reference" or label in ref_labels or comp is None or ref is None:
                continue
            out.append(mde_row(phase, label, comp, ref, margin_pct=margin_pct))
    return out


def _range(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return "no cost below 100%"
    if hi is None:
        return f"costs of {lo:.0f}% or more (at the noise's upper end no cost below 100%)"
    return f"costs of {lo:.0f}-{hi:.0f}%" if round(lo) != round(hi) else f"costs of {lo:.0f}%"


def power_lines(variance: Sequence[Any], effects: Sequence[Any], decision: Sequence[Any]) -> list[str]:
    """The lines every report prints beside the noise floor (console, Markdown, HTML).

    One line per arm (``variance same_runtime/baseline: between processes SD 2.5% [0.0-9.6%] (3 df), rounds SD
    2.1% [1.5-3.3%] (14 df), one process SD 2.6%``), then one per label with its verdict (``resolving power
    same_runtime/current_g2_n1: inconclusive; this run could resolve costs of 9-21% (MDE 13% at 95%
    confidence, 80% power, 4 vs 4 processes, ...)``; a row with a ``method``, a phase paired by block
    (``analysis.comparison.paired_aa``), names it instead: ``..., 80% power, paired t, 4 blocks vs baseline; ...``).

    Args:
        variance: ``VarianceComponentsRow`` objects or dicts.
        effects: ``DetectableEffectRow`` objects or dicts.
        decision: ``DecisionRow`` objects or dicts (``phase``, ``label``, ``verdict``).
    """
    lines = []
    for v in variance:
        g = functools.partial(_get, v)
        wl, wh = g("within_var_low"), g("within_var_high")
        within = (f"rounds SD {g('within_sd_pct'):.1f}% [{_sd(wl)}-{_sd(wh)}%] ({g('df_within')} df)"
                  if wl is not None and wh is not None else "one round per process")
        lines.append(f"variance {g('phase')}/{g('arm')}: between processes SD {g('between_sd_pct'):.1f}% "
                     f"[{_sd(g('between_var_low'))}-{_sd(g('between_var_high'))}%] ({g('df_between')} df), "
                     f"{within}, one process SD {g('process_sd_pct'):.1f}% ({g('processes')} processes, "
                     f"{g('rounds')} rounds; intervals {g('confidence'):.0%})")
    verdicts = {(_get(r, "phase"), _get(r, "label")): _get(r, "verdict") for r in decision}
    for e in effects:
        g = functools.partial(_get, e)
        mde, df = g("mde_pct"), g("df")
        mde_s = "none below 100%" if mde is None else f"{mde:.1f}%"
        df_s = "" if df is None else f", Satterthwaite {df:.1f} df"
        verdict = verdicts.get((g("phase"), g("label")), "no verdict")
        method = _opt(e, "method")
        design = (f"{method}; range from the SD of the per-block log ratio, {df:g} df; decide_paired simulated"
                  if method else f"{g('processes')} vs {g('reference_processes')} reference processes; range from "
                  f"the noise's interval{df_s}; decide simulated")
        lines.append(f"resolving power {g('phase')}/{g('label')}: {verdict}; this run could resolve "
                     f"{_range(g('mde_low_pct'), g('mde_high_pct'))} (MDE {mde_s} at {g('confidence'):.0%} "
                     f"confidence, {g('power'):.0%} power, {design})")
    if variance:
        lines.append(f"variance estimator: {ESTIMATOR}")
    return lines


def _sd(var: float | None) -> str:
    """A log variance as the printed SD percent (``>999`` beyond: an interval bound with 1-3 df can be huge)."""
    if var is None:
        return "nan"
    sd = sd_pct(var)
    return ">999" if sd > 999 else f"{sd:.1f}"


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _opt(obj: Any, name: str) -> Any:
    """``_get`` or None where the row lacks the field (a summary written before it)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
