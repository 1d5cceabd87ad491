"""Serving statistics with their sample: percentiles with n, verdicts against the baselines' floor, rate order.

What is modelled:

* ``percentile_rows``: per (phase, label, rate) and metric, the requests of every repeat pooled
  (``analysis.serving.recompute.samples_s``: TTFT / TPOT / E2E per request, ITL per gap), each
  percentile of ``LATENCY_PERCENTILES`` with its ``n``; a percentile that ``n`` cannot resolve is the sample's
  maximum (``n * (100 - p) / 100 < 1``: P99 of fewer than 100 requests) or minimum and is named so
  (``kind``), without an interval; the others carry a seeded percentile bootstrap 95% interval that
  resamples requests (``BOOTSTRAP_SAMPLES`` draws).
* ``baseline_verdicts``: each offload label vs the baseline, per metric and rate: one value per
  process (its P50 over its own requests), judged by one of two designs (``BaselineVerdictRow.design``):

  - ``blocks`` (``block_verdict``), where the phase runs its floor baselines at least twice in each of
    at least ``MIN_BLOCKS`` blocks (a block = the processes of one repeat index: they run next to each
    other in the schedule and sweep the rates in the same order, ``runners.planning.plan.schedule``).
    Each label process is compared with its own block's baselines (the ratio of its P50 to their
    median); the verdict interval is the paired t interval of those per-block log ratios with
    ``blocks - 1`` degrees of freedom (``analysis.comparison.verdict_rule.decide_paired``); the *floor* is
    the widest spread ``(max - min) / median`` of the baselines inside one block. A host that drifts over
    the run (docs/measurements/serving-2026-12-04.md) moves a block's baselines and its offload process
    together, so the drift widens neither the floor nor the interval (it does widen a floor taken across
    blocks, as the ``processes`` design takes it). Under no effect a false ``slower`` (likewise ``faster``)
    has probability at most 2.5% when the per-block log ratios are normal (t quantile 12.71 at 2 blocks,
    4.30 at 3: see ``block_verdict`` for what that lets 2 and 3 blocks call).
  - ``processes`` (``floor_verdict``) otherwise: the verdict rule of the throughput phase
    (``analysis.comparison.verdict_rule.decide``, lower is better, unpaired t interval over processes) with
    the floor the baselines' per-process spread at the same rate over the whole run.

  Either way ``equivalent`` means what it means for throughput (``analysis.comparison.verdict_rule.verdict``): the
  whole interval inside the margin (5%, or a sequential look's target), never widened to the floor; and a
  ``slower`` / ``faster`` is kept only when the whole interval lies beyond the floor (otherwise ``inconclusive``):
  an offload point is slower only by more than two runs of the baseline differ. The floor's baselines are the undelayed ones, pooled over
  their labels (``results_schema.rules.floor_rule.is_floor_baseline``; a twin baseline label is a second baseline process per block): a speed control (a
  baseline whose every forward sleeps, ``offload.controls``) is judged against them like an offload
  label, and its answer is known (``slower``; ``control_warnings`` names a rate where it did not come out). A verdict is ``withheld`` when a process of either side ran
  that rate beside foreign work (``RateResult.host_load.contended``, the throughput phase's rule).
* ``order_effects``: rates run in a rotated order (``runners.launching.serving_case.rotated``); per label,
  rate and metric, the median per-process P50 at each position it ran; an *order effect* when those
  medians spread by more than the floor: ``max(default margin, the spread of processes that ran that rate at
  the same position)``, over the label's own processes and over the floor baselines pooled across their
  labels (in the blocks design a block's two baselines run every rate at the same position). In the blocks
  design each position of a rate ran in another block, so position and the host's drift between blocks
  cannot be told apart: there the spread is that of the label's position medians *relative to the floor
  baselines' at the same position*, and an effect reads "the position changes this label more than it
  changes an unchanged server" (for a floor baseline itself, about 0 by construction).

What is deliberately not modelled: a hierarchical bootstrap (processes, then requests) for the
verdicts; tail percentiles as verdict metrics (P99 of one process is its maximum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analysis.comparison.noise_floor import spread_pct
from analysis.comparison.variance import between_only
from analysis.comparison.verdict_rule import CONFIDENCE, PAIRED, DEFAULT_MARGIN_PCT, decide, decide_paired, verdict_text
from analysis.serving.recompute import MS_PER_S, samples_s
from results_schema.codec.io import RecordError, StrictJSONError, read_json
from results_schema.records.serving import LATENCY_METRICS, LATENCY_PERCENTILES, ServingRequests, ServingRun
from results_schema.rules.floor_rule import is_floor_baseline

BOOTSTRAP_SAMPLES = 2000
SEED = 20261
VERDICT_METRICS = LATENCY_METRICS
"""Metrics with a verdict against the baseline (per-process P50 each)."""
MIN_BLOCKS = 2
"""Blocks (each with >= 2 floor baselines and the label) the ``blocks`` design needs; fewer -> ``processes``."""


def extreme_kind(n: int, p: float) -> str:
    """``max`` when fewer than one of ``n`` values lies above the p-th percentile, ``min`` when fewer than one
    lies below it, else ``percentile`` (P99 of 99 requests -> max; of 100 -> percentile; P50 of 1 -> max)."""
    if n * (100 - p) / 100 < 1:
        return "max"
    if n * p / 100 < 1:
        return "min"
    return "percentile"


def percentile_ci(xs: Sequence[float], p: float, *, samples: int = BOOTSTRAP_SAMPLES,
                  seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the p-th percentile of ``xs`` (resampling its values)."""
    a = np.asarray(xs, dtype=float)
    rng = np.random.default_rng(seed)
    draws = np.percentile(a[rng.integers(0, a.size, size=(samples, a.size))], p, axis=1)
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _requests(run_dir: Path, r: ServingRun) -> ServingRequests | None:
    try:
        return read_json(run_dir / r.rate.requests_path, ServingRequests)
    except (OSError, RecordError, StrictJSONError):
        return None  # named by analysis.serving.request_checks


def _key(r: ServingRun) -> tuple[str, str, float | None]:
    return r.phase, r.label, r.rate.request_rate_rps


def percentile_rows(run_dir: Path, runs: Sequence[ServingRun]) -> list[dict[str, Any]]:
    """``PercentileRow`` dicts (module docstring)."""
    pooled: dict[tuple[str, str, float | None], dict[str, list[float]]] = {}
    procs: dict[tuple[str, str, float | None], int] = {}
    for r in runs:
        reqs = _requests(run_dir, r)
        if reqs is None:
            continue
        k = _key(r)
        procs[k] = procs.get(k, 0) + 1
        dst = pooled.setdefault(k, {m: [] for m in LATENCY_METRICS})
        for m, xs in samples_s(reqs.requests).items():
            dst[m].extend(xs)
    rows = []
    for (phase, label, rate), by_metric in pooled.items():
        for m in LATENCY_METRICS:
            xs = by_metric[m]
            if not xs:
                continue
            for p in LATENCY_PERCENTILES:
                kind = extreme_kind(len(xs), p)
                lo, hi = percentile_ci(xs, p) if kind == "percentile" else (None, None)
                rows.append({"phase": phase, "label": label, "rate_rps": rate, "metric": m, "percentile": p,
                             "n": len(xs), "processes": procs[(phase, label, rate)], "kind": kind,
                             "value_ms": float(np.percentile(xs, p)) * MS_PER_S,
                             "ci_low_ms": None if lo is None else lo * MS_PER_S,
                             "ci_high_ms": None if hi is None else hi * MS_PER_S})
    return rows


_Proc = tuple[int, int, dict[str, float]]
"""One process at one rate: (position in its sweep, repeat index = block, {metric: P50 ms})."""


def _p50s(runs: Sequence[ServingRun]) -> dict[tuple[str, str, float | None], list[_Proc]]:
    """Per (phase, label, rate): ``(position, repeat, {metric: P50 ms})`` of each process."""
    out: dict[tuple[str, str, float | None], list[_Proc]] = {}
    for r in runs:
        out.setdefault(_key(r), []).append(
            (r.rate.index, r.repeat, {m: float(getattr(r.rate, m).p50_ms) for m in LATENCY_METRICS}))
    return out


def _contended(runs: Sequence[ServingRun]) -> dict[tuple[str, str, float | None], int]:
    """Per (phase, label, rate): processes whose rate ran beside foreign work (``RateResult.host_load``)."""
    out: dict[tuple[str, str, float | None], int] = {}
    for r in runs:
        out[_key(r)] = out.get(_key(r), 0) + int(r.rate.host_load is not None and r.rate.host_load.contended)
    return out


def _beyond_floor(v: str, lo: float, hi: float, floor: float) -> str:
    """``v`` unless it is a ``slower`` / ``faster`` whose interval does not clear the floor (then inconclusive;
    a NaN bound never clears it)."""
    if (v == "slower" and not lo > floor) or (v == "faster" and not hi < -floor):
        return "inconclusive"
    return v


def floor_verdict(a: Sequence[float], b: Sequence[float], floor_pct: float | None) -> dict[str, Any]:
    """The rule of ``baseline_verdicts`` for one metric (lower is better), as a ``BaselineVerdictRow`` part."""
    margin = DEFAULT_MARGIN_PCT  # equivalent: inside the margin; the floor only gates slower / faster
    d = decide(list(a), list(b), margin_pct=margin, higher_is_better=False)
    v = _beyond_floor(d.verdict, d.ci_low_pct, d.ci_high_pct, floor_pct or 0.0)
    floor_txt = "no floor (one baseline process)" if floor_pct is None else f"floor {floor_pct:.1f}%"
    text = (verdict_text(v, d.ci_low_pct, d.ci_high_pct, margin_pct=margin, higher_is_better=False, method=d.method)
            + f", {floor_txt}")
    fin = [x if math.isfinite(x) else None for x in (d.delta_pct, d.ci_low_pct, d.ci_high_pct)]
    return {"verdict": v, "margin_pct": margin, "delta_pct": fin[0], "ci_low_pct": fin[1], "ci_high_pct": fin[2],
            "verdict_text": text, "floor_pct": floor_pct, "design": "processes", "blocks": None}


def block_verdict(blocks: Sequence[tuple[Sequence[float], Sequence[float]]], *, unpaired: int = 0,
                  confidence: float = CONFIDENCE, margin_pct: float = DEFAULT_MARGIN_PCT) -> dict[str, Any]:
    """The ``blocks`` design for one metric (module docstring; lower is better), as a ``BaselineVerdictRow`` part.

    The rule: the project's paired verdict (``analysis.comparison.verdict_rule.decide_paired``: a t interval
    of the mean per-block log ratio, label median over the block's baseline median, with ``k - 1`` degrees
    of freedom); ``equivalent`` when the whole interval lies inside ``±margin_pct`` (the one meaning of the word,
    as for throughput: never widened to the floor), and a ``slower`` / ``faster`` is kept only when the whole
    interval lies beyond the floor (else ``inconclusive``). What ``k`` blocks can call: the half-width is ``t(k - 1) s / sqrt(k)``
    on the log scale (``s`` the SD of the per-block log ratios), ``t`` = 12.71 at 2 blocks (half-width about
    6.4 times the distance between the two blocks' differences) and 4.30 at 3 blocks, so 2 blocks call only a
    difference that both blocks repeat closely. Under no effect a false ``slower`` (likewise ``faster``) has
    probability at most 2.5% when the per-block log ratios are normal (simulated in
    ``tests/analysis/test_verdict_coverage.py``).

    Args:
        blocks: per block, (the label's P50s, >= 1; the block's floor-baseline P50s, >= 2), in ms.
        unpaired: the label's processes left out because their block lacks two baselines (named in the text).
        confidence: the interval's two-sided confidence (default 95%; a sequential serving look passes its own
            spent level, ``analysis.serving.sequential``).
        margin_pct: the equivalence margin (default ``DEFAULT_MARGIN_PCT``; a sequential look passes its design's
            target).

    Returns:
        verdict, margin, the median per-block difference (%) and the interval, the floor (widest
        within-block baseline spread, %), text.

    Raises:
        ValueError: a block with fewer than 2 baselines, no label value, or a baseline median <= 0.
    """
    labels, bases, floors = [], [], []
    for a, b in blocks:
        med_b = float(np.median(b))
        if len(b) < 2 or not a or not med_b > 0:
            raise ValueError(f"block_verdict: a block needs >= 2 baselines with a median > 0 and a label value, "
                             f"got {len(b)} baseline(s) (median {med_b}) and {len(a)} label value(s)")
        labels.append(float(np.median(a)))
        bases.append(med_b)
        floors.append(spread_pct(list(b)) or 0.0)
    floor = max(floors)
    margin = margin_pct
    d = decide_paired(labels, bases, margin_pct=margin, higher_is_better=False, confidence=confidence)
    lo, hi = d.ci_low_pct, d.ci_high_pct
    v = _beyond_floor(d.verdict, lo, hi, floor)
    diffs = [(x - y) / y * 100.0 for x, y in zip(labels, bases, strict=True)]
    k = len(blocks)
    text = (verdict_text(v, lo, hi, margin_pct=margin, higher_is_better=False, method=PAIRED, confidence=confidence)
            + f", paired in {k} blocks ({k - 1} df; per-block differences "
            f"{', '.join(f'{x:+.1f}%' for x in diffs)}), floor {floor:.1f}% (widest baseline spread inside a block)"
            + (f"; {unpaired} process(es) unpaired (their block lacks two baselines)" if unpaired else ""))
    fin = [x if math.isfinite(x) else None for x in (d.delta_pct, lo, hi)]
    return {"verdict": v, "margin_pct": margin, "delta_pct": fin[0], "ci_low_pct": fin[1], "ci_high_pct": fin[2],
            "verdict_text": text, "floor_pct": floor, "design": "blocks", "blocks": k}


def _by_block(procs: Sequence[_Proc]) -> dict[int, list[_Proc]]:
    """``procs`` grouped by repeat index (= block), in repeat order."""
    out: dict[int, list[_Proc]] = {}
    for p in sorted(procs, key=lambda p: p[1]):
        out.setdefault(p[1], []).append(p)
    return out


def _blocks(procs: Sequence[_Proc], base: Sequence[_Proc], m: str) -> list[tuple[list[float], list[float]]]:
    """Per repeat index where the label ran and >= 2 floor baselines ran: (label values, baseline values)."""
    base_at = _by_block(base)
    return [([x[m] for _pos, _r, x in mine], [x[m] for _pos, _r, x in base_at[rep]])
            for rep, mine in _by_block(procs).items() if len(base_at.get(rep, [])) >= 2]


def _floor_baselines(runs: Sequence[ServingRun]) -> tuple[set[tuple[str, str]], dict[tuple[str, float | None],
                                                                                      list[str]]]:
    """The (phase, label)s of the floor baselines (``results_schema.rules.floor_rule.is_floor_baseline``) and, per
    (phase, rate), their labels."""
    labels = {(r.phase, r.label) for r in runs if is_floor_baseline(r.implementation, r.step_delay_ms)}
    at: dict[tuple[str, float | None], list[str]] = {}
    for r in runs:
        if (r.phase, r.label) in labels and r.label not in at.setdefault((r.phase, r.rate.request_rate_rps), []):
            at[(r.phase, r.rate.request_rate_rps)].append(r.label)
    return labels, at


def baseline_verdicts(runs: Sequence[ServingRun]) -> list[dict[str, Any]]:
    """``BaselineVerdictRow`` dicts (module docstring); labels without a baseline at a rate are left out."""
    vals, hot = _p50s(runs), _contended(runs)
    floor_labels, floor_at = _floor_baselines(runs)
    rows = []
    for (phase, label, rate), procs in vals.items():
        if (phase, label) in floor_labels:
            continue
        bases = floor_at.get((phase, rate), [])
        base = [p for lb in bases for p in vals[(phase, lb, rate)]]
        if not base:
            continue
        busy = hot.get((phase, label, rate), 0) + sum(hot.get((phase, lb, rate), 0) for lb in bases)
        for m in VERDICT_METRICS:
            a = [x[m] for _pos, _r, x in procs]
            b = [x[m] for _pos, _r, x in base]
            if not (float(np.median(b)) > 0):
                continue
            blocks = _blocks(procs, base, m)
            if len(blocks) >= MIN_BLOCKS and all(float(np.median(bb)) > 0 for _aa, bb in blocks):
                verdict_row = block_verdict(blocks, unpaired=len(a) - sum(len(aa) for aa, _bb in blocks))
            else:
                verdict_row = floor_verdict(a, b, spread_pct(b))
            if busy:
                verdict_row.update(verdict="withheld", verdict_text=f"withheld: contended ({busy} of "
                                   f"{len(a) + len(b)} processes ran this rate beside foreign work)")
            rows.append({"phase": phase, "label": label, "rate_rps": rate, "metric": m, "a_processes": len(a),
                         "b_processes": len(b), "a_median_ms": float(np.median(a)), "b_median_ms": float(np.median(b)),
                         **verdict_row})
    return rows


def _interval_txt(v: dict[str, Any]) -> str:
    """``+12.2..+93.2% over 2 blocks`` (or ``none``) for a verdict row."""
    lo, hi = v.get("ci_low_pct"), v.get("ci_high_pct")
    if lo is None or hi is None:
        return "none"
    over = f" over {v['blocks']} blocks" if v.get("blocks") else ""
    return f"{lo:+.1f}..{hi:+.1f}%{over}"


def control_warnings(verdict_rows: Sequence[dict[str, Any]], runs: Sequence[ServingRun]) -> list[str]:
    """Warnings where a speed control's known answer did not come out: its TPOT verdict at a rate is neither
    ``slower`` nor ``withheld``. A step delay the timing rule cannot see means a cost of that size is out of the
    design's reach (the floor, or the interval over this few blocks or processes, is too wide); the warning
    names both (a warning: the control's outputs, not its timing, are what the output comparison rests on)."""
    delay = {(r.phase, r.label): r.step_delay_ms for r in runs if r.step_delay_ms}
    out = []
    for v in verdict_rows:
        ms = delay.get((v["phase"], v["label"]))
        if ms and v["metric"] == "tpot" and v["verdict"] not in ("slower", "withheld"):
            rate = "inf" if v["rate_rps"] is None or math.isinf(v["rate_rps"]) else f"{v['rate_rps']:g}"
            out.append(f"speed control {v['phase']}/{v['label']} at {rate} req/s: TPOT {v['verdict']} against the "
                       f"baselines, expected slower (every forward sleeps {ms:g} ms): the baselines' floor "
                       f"({v['floor_pct'] or 0:.1f}%) or the interval ({_interval_txt(v)}) is too wide here to "
                       "show a cost of that size")
    return out


def _same_position_spreads(procs: Sequence[_Proc], m: str) -> list[float]:
    """Spread of ``m`` among the processes that ran this rate at the same position, per position with >= 2."""
    out = []
    for q in sorted({pos for pos, _r, _x in procs}):
        s = spread_pct([x[m] for pos, _r, x in procs if pos == q])
        if s is not None:
            out.append(s)
    return out


def _blocked_design(base: Sequence[_Proc]) -> bool:
    """Whether the floor baselines ran >= 2 processes in each of >= ``MIN_BLOCKS`` repeats (the blocks design)."""
    return sum(1 for procs in _by_block(base).values() if len(procs) >= 2) >= MIN_BLOCKS


def _position_medians(procs: Sequence[_Proc], m: str, positions: Sequence[int]) -> list[float]:
    return [float(np.median([x[m] for pos, _r, x in procs if pos == q])) for q in positions]


def order_effects(runs: Sequence[ServingRun]) -> list[dict[str, Any]]:
    """``OrderEffectRow`` dicts for every (label, rate) that ran at two or more positions."""
    vals = _p50s(runs)
    _labels, floor_at = _floor_baselines(runs)
    rows = []
    for (phase, label, rate), procs in vals.items():
        positions = sorted({pos for pos, _r, _x in procs})
        if len(positions) < 2:
            continue
        b = [p for lb in floor_at.get((phase, rate), []) for p in vals[(phase, lb, rate)]]
        relative = _blocked_design(b) and set(positions) <= {pos for pos, _r, _x in b}
        for m in LATENCY_METRICS:
            meds = _position_medians(procs, m, positions)
            shown, rel = meds, False
            if relative:  # blocks: position and block coincide; judge the label relative to the baselines there
                bm = _position_medians(b, m, positions)
                if all(y > 0 for y in bm):
                    shown, rel = [x / y for x, y in zip(meds, bm, strict=True)], True
            spread = spread_pct(shown) or 0.0
            floor = max([DEFAULT_MARGIN_PCT, *_same_position_spreads(procs, m), *_same_position_spreads(b, m)])
            rows.append({"phase": phase, "label": label, "rate_rps": rate, "metric": m,
                         "positions": tuple(positions), "position_medians_ms": tuple(meds), "spread_pct": spread,
                         "floor_pct": floor, "effect": spread > floor, "relative": rel})
    return rows


def process_variance(runs: Sequence[ServingRun]) -> list[dict[str, Any]]:
    """``results_schema.records.serving_summary.ServingVarianceRow`` dicts: per (phase, label, rate, metric) with >= 2
    processes, the between-process variance of log P50 (``analysis.comparison.variance.between_only``: the process
    is the only level in serving) with its chi-square interval at the verdicts' confidence."""
    rows = []
    for (phase, label, rate), procs in _p50s(runs).items():
        if len(procs) < 2:
            continue
        for m in LATENCY_METRICS:
            xs = [p[2][m] for p in procs]
            if not all(x > 0 and math.isfinite(x) for x in xs):
                continue
            var, lo, hi, df = between_only(xs)
            rows.append({"phase": phase, "label": label, "rate_rps": rate, "metric": m, "processes": len(xs), "df": df,
                         "between_var": var, "between_var_low": lo, "between_var_high": hi,
                         "between_sd_pct": 100.0 * math.expm1(math.sqrt(var)), "confidence": CONFIDENCE})
    return rows


def variance_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One Markdown bullet per row: ``serving/baseline at 4 req/s, TTFT P50: between processes SD 3.1% [1.6-19.8%]
    (2 df)``."""
    out = []
    for r in rows:
        rate = "inf" if r["rate_rps"] is None or math.isinf(r["rate_rps"]) else f"{r['rate_rps']:g}"
        lo, hi = (100.0 * math.expm1(math.sqrt(r[k])) for k in ("between_var_low", "between_var_high"))
        out.append(f"- {r['phase']}/{r['label']} at {rate} req/s, {str(r['metric']).upper()} P50: between processes "
                   f"SD {r['between_sd_pct']:.1f}% [{lo:.1f}-{min(hi, 999.0):.1f}{'+' if hi > 999 else ''}%] "
                   f"({r['df']} df)")
    return out
