"""Noise-aware comparisons: current vs official per (G, N), long window, spaced vs adjacent, cross-stack.

What is modelled: the difference of medians between two groups of case
processes, ``delta = median(A) - median(B)`` (tok/s), with a percentile
bootstrap 95% confidence interval (Efron & Tibshirani 1993, ch. 13): each group
is resampled with replacement independently (``BOOTSTRAP_SAMPLES`` draws,
seeded, so reports are reproducible), the statistic is recomputed per draw,
and the 2.5th / 97.5th percentiles bound it. The same is done over pooled
measured rounds. The verdict for A vs B is ``faster`` only when the whole
process-level interval is above zero, ``slower`` only when it is below zero,
``equivalent`` when an interval exists and contains zero -- so a small delta
inside the process spread is never called a speed-up. Fewer than two processes
on either side gives no interval and the verdict ``inconclusive`` (never
``equivalent``: a large delta measured once is not evidence of equality); the
row's ``note`` names the process counts.
With three processes per side (the seed's designs) the percentile interval of
a median difference spans from the smallest to the largest pairwise
difference, so ``faster`` then means every process of A beat every process of
B; the pooled-round interval is reported beside it as a second opinion (it
treats rounds as independent although rounds of one process share its load
and placement, so it is narrower than the truth and never decides the verdict).
"Paired" means paired by (G, N, prefetch_step, offload_params) within a phase;
processes are resampled independently on each side.

What is deliberately not modelled: multiple-comparison correction across
(G, N) points; the intervals are per point. Cross-stack rows (native vs
same-runtime) compare different software stacks and are labelled as such;
they carry no verdict about the offloader alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import RunData

BOOTSTRAP_SAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20260

POINT_KEY = ["group_size", "num_in_group", "prefetch_step", "offload_params"]


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


def verdict(ci_low: float, ci_high: float) -> str:
    """``faster`` iff the interval is above 0, ``slower`` iff below, ``equivalent`` iff it contains 0.

    No interval (NaN bound: fewer than two samples on a side) -> ``inconclusive``.
    """
    if ci_low is None or ci_high is None or np.isnan(ci_low) or np.isnan(ci_high):
        return "inconclusive"
    if ci_low > 0:
        return "faster"
    if ci_high < 0:
        return "slower"
    return "equivalent"


def _pair_row(phase, a_label, b_label, a_thr, b_thr, a_rounds, b_rounds) -> dict:
    delta, lo, hi, lo_p, hi_p = bootstrap_delta(a_thr, b_thr)
    pdelta, plo, phi, _, _ = bootstrap_delta(a_rounds, b_rounds)
    b_med = float(np.median(b_thr))
    v = verdict(lo, hi)
    return {
        "phase": phase, "a_label": a_label, "b_label": b_label, "a_processes": len(a_thr),
        "b_processes": len(b_thr), "a_median_tok_s": float(np.median(a_thr)), "b_median_tok_s": b_med,
        "delta_tok_s": delta, "delta_pct": delta / b_med * 100.0, "ci_low_tok_s": lo, "ci_high_tok_s": hi,
        "ci_low_pct": lo_p, "ci_high_pct": hi_p, "verdict": v,
        "pooled_delta_tok_s": pdelta, "pooled_ci_low_tok_s": plo, "pooled_ci_high_tok_s": phi,
        "pooled_verdict": verdict(plo, phi),
        "note": "" if min(len(a_thr), len(b_thr)) >= 2 else
        f"no CI: fewer than 2 processes on a side (n={len(a_thr)} vs {len(b_thr)})",
    }


def _samples(data: RunData, phase: str, label: str) -> tuple[list[float], list[float]]:
    runs, rounds = data.runs, data.rounds
    thr = runs.loc[(runs["phase"] == phase) & (runs["label"] == label), "throughput_tok_s"].tolist()
    rnd = rounds.loc[(rounds["phase"] == phase) & (rounds["label"] == label), "throughput_tok_s"].tolist()
    return thr, rnd


PAIR_COLUMNS = [
    "phase", "group_size", "num_in_group", "prefetch_step", "offload_params", "a_label", "b_label", "a_processes",
    "b_processes", "a_median_tok_s", "b_median_tok_s", "delta_tok_s", "delta_pct", "ci_low_tok_s", "ci_high_tok_s",
    "ci_low_pct", "ci_high_pct", "verdict", "pooled_delta_tok_s", "pooled_ci_low_tok_s", "pooled_ci_high_tok_s",
    "pooled_verdict", "note",
]


def compare_implementations(data: RunData, summary: pd.DataFrame, a: str = "current", b: str = "official",
                            phases=None) -> pd.DataFrame:
    """Paired A-vs-B rows per (phase, G, N, prefetch_step, offload_params) present for both.

    ``verdict`` reads "A is faster/slower/equivalent than B".
    """
    rows = []
    for phase, sub in summary.groupby("phase", sort=False):
        if phases is not None and phase not in phases:
            continue
        sa = sub[sub["implementation"] == a]
        sb = sub[sub["implementation"] == b]
        for _, ra in sa.iterrows():
            match = sb
            for k in POINT_KEY:
                match = match[match[k] == ra[k]]
            for _, rb in match.iterrows():
                at, ar = _samples(data, phase, ra["label"])
                bt, br = _samples(data, phase, rb["label"])
                row = _pair_row(phase, ra["label"], rb["label"], at, bt, ar, br)
                row.update({k: ra[k] for k in POINT_KEY})
                rows.append(row)
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def long_window_table(data: RunData, summary: pd.DataFrame, *, long_phase: str = "long_window",
                      short_phase: str = "same_runtime") -> pd.DataFrame:
    """Current vs official in the long-window phase next to the same point's same-runtime verdict.

    Columns: the pair columns of the long-window phase plus ``short_verdict`` and
    ``confirms`` (True when both verdicts agree). Empty when the phase is absent.
    """
    if long_phase not in set(summary["phase"]):
        return pd.DataFrame(columns=PAIR_COLUMNS + ["short_verdict", "confirms"])
    lw = compare_implementations(data, summary, phases={long_phase})
    sr = compare_implementations(data, summary, phases={short_phase})
    short = {tuple(r[k] for k in POINT_KEY): r["verdict"] for _, r in sr.iterrows()}
    lw["short_verdict"] = [short.get(tuple(r[k] for k in POINT_KEY), "absent") for _, r in lw.iterrows()]
    lw["confirms"] = lw["short_verdict"] == lw["verdict"]
    return lw


def _adjacent(layers: str) -> bool:
    idx = [int(x) for x in layers.split(",") if x != ""]
    return any(b - a == 1 for a, b in zip(idx, idx[1:]))


SPACED_COLUMNS = ["phase", "implementation", "num_selected_layers", "adjacent_label", "spaced_label",
                  "adjacent_layers", "spaced_layers", "adjacent_median_tok_s", "spaced_median_tok_s",
                  "delta_tok_s", "delta_pct", "ci_low_tok_s", "ci_high_tok_s", "verdict", "note"]


def spaced_vs_adjacent(data: RunData, summary: pd.DataFrame) -> pd.DataFrame:
    """Same layer count, adjacent (some consecutive selected layers) vs spaced (none consecutive).

    Layer sets come from evidence. ``verdict`` reads "adjacent is faster/slower/equivalent than spaced".
    """
    rows = []
    offl = summary[(summary["implementation"] != "baseline") & (summary["num_selected_layers"] > 0)]
    for (phase, impl, n), sub in offl.groupby(["phase", "implementation", "num_selected_layers"], sort=False):
        adj = [r for _, r in sub.iterrows() if _adjacent(r["selected_layers"])]
        spa = [r for _, r in sub.iterrows() if not _adjacent(r["selected_layers"])]
        for ra in adj:
            for rs in spa:
                at, ar = _samples(data, phase, ra["label"])
                st, sr = _samples(data, phase, rs["label"])
                p = _pair_row(phase, ra["label"], rs["label"], at, st, ar, sr)
                rows.append({
                    "phase": phase, "implementation": impl, "num_selected_layers": int(n),
                    "adjacent_label": ra["label"], "spaced_label": rs["label"],
                    "adjacent_layers": ra["selected_layers"], "spaced_layers": rs["selected_layers"],
                    "adjacent_median_tok_s": p["a_median_tok_s"], "spaced_median_tok_s": p["b_median_tok_s"],
                    "delta_tok_s": p["delta_tok_s"], "delta_pct": p["delta_pct"], "ci_low_tok_s": p["ci_low_tok_s"],
                    "ci_high_tok_s": p["ci_high_tok_s"], "verdict": p["verdict"], "note": p["note"],
                })
    return pd.DataFrame(rows, columns=SPACED_COLUMNS)


CROSS_COLUMNS = ["comparison", "implementation", "group_size", "num_in_group", "native_phase", "native_runtime",
                 "native_label", "native_median_tok_s", "native_retention", "same_runtime_phase",
                 "same_runtime_runtime", "same_runtime_label", "same_runtime_median_tok_s", "same_runtime_retention",
                 "retention_difference"]


def native_vs_same_runtime(summary: pd.DataFrame, *, native_phase: str = "native",
                           same_phase: str = "same_runtime") -> pd.DataFrame:
    """Auxiliary cross-stack table: each native-phase label next to the same (impl, G, N) on the same runtime.

    Retention is vs each phase's own baseline; ``comparison`` is always ``cross-stack``.
    """
    nat = summary[summary["phase"] == native_phase]
    same = summary[summary["phase"] == same_phase]
    rows = []
    for _, rn in nat.iterrows():
        m = same[(same["implementation"] == rn["implementation"]) & (same["group_size"] == rn["group_size"])
                 & (same["num_in_group"] == rn["num_in_group"])]
        for _, rs in m.iterrows():
            rows.append({
                "comparison": "cross-stack", "implementation": rn["implementation"], "group_size": rn["group_size"],
                "num_in_group": rn["num_in_group"], "native_phase": native_phase, "native_runtime": rn["runtime"],
                "native_label": rn["label"], "native_median_tok_s": rn["throughput_median_tok_s"],
                "native_retention": rn["retention"], "same_runtime_phase": same_phase,
                "same_runtime_runtime": rs["runtime"], "same_runtime_label": rs["label"],
                "same_runtime_median_tok_s": rs["throughput_median_tok_s"], "same_runtime_retention": rs["retention"],
                "retention_difference": rn["retention"] - rs["retention"],
            })
    return pd.DataFrame(rows, columns=CROSS_COLUMNS)


CONFIRM_COLUMNS = ["long_phase", "short_phase", "label", "implementation", "group_size", "num_in_group",
                   "long_rounds_per_process", "long_median_tok_s", "short_median_tok_s", "long_retention",
                   "short_retention", "retention_difference", "confirms_direction"]

CONFIRMATION_PHASES = (("long_window", "same_runtime"), ("confirmation", "parameter_optimization"))
"""(long-window phase, phase it confirms) pairs of the seed's designs."""


def confirmation_table(summary: pd.DataFrame, pairs=CONFIRMATION_PHASES) -> pd.DataFrame:
    """Each label of a long-window / confirmation phase next to the same label in the phase it confirms.

    Retention is vs each phase's own baseline (phases ran at different times, so raw tok/s are not
    compared across them); ``confirms_direction`` is True when both retentions are on the same side
    of 1.0 (or both equal to it).
    """
    rows = []
    phases = set(summary["phase"])
    for long_phase, short_phase in pairs:
        if long_phase not in phases or short_phase not in phases:
            continue
        lp = summary[summary["phase"] == long_phase]
        sp = summary[summary["phase"] == short_phase].set_index("label")
        for _, r in lp.iterrows():
            if r["label"] not in sp.index:
                continue
            s = sp.loc[r["label"]]
            lr, sr = float(r["retention"]), float(s["retention"])
            rows.append({
                "long_phase": long_phase, "short_phase": short_phase, "label": r["label"],
                "implementation": r["implementation"], "group_size": r["group_size"],
                "num_in_group": r["num_in_group"],
                "long_rounds_per_process": float(r["rounds"]) / float(r["processes"]),
                "long_median_tok_s": r["throughput_median_tok_s"], "short_median_tok_s": s["throughput_median_tok_s"],
                "long_retention": lr, "short_retention": sr, "retention_difference": lr - sr,
                "confirms_direction": (lr > 1) == (sr > 1) and (lr < 1) == (sr < 1),
            })
    return pd.DataFrame(rows, columns=CONFIRM_COLUMNS)
