"""Noise-aware comparisons: current vs official per (G, N), long window, spaced vs adjacent, cross-stack.

What is modelled: two groups of case processes, one value per process (its throughput over its measured
rounds: the process is the unit of replication, never a round), compared by the project's verdict rule
(``analysis.comparison.verdict_rule``; the only one: every table, plot, report and recommendation of this
package calls it): a 95% t interval of the relative difference ``(A - B) / B`` in percent (the ratio of the
groups' geometric means minus 1: the wider of the Welch and the pooled t interval on log tok/s, Welch with
Welch-Satterthwaite degrees of freedom) and an equivalence margin ``m`` (``DEFAULT_MARGIN_PCT`` = 5%,
configurable per comparison):

1. no interval (fewer than two processes on a side) -> ``inconclusive``;
2. the whole interval inside ``[-m, +m]`` -> ``equivalent`` (the two one-sided tests idea of equivalence
   testing, Schuirmann 1987). This is checked first: an interval that excludes 0 but lies inside the margin
   is ``equivalent``, and its text names the side (``equivalent (slower by 1.0-4.7%, inside ±5%; ...)``); a
   real difference smaller than the margin is never called a speed-up;
3. the interval above 0 -> ``faster``; below 0 -> ``slower``;
4. otherwise (it contains 0 and reaches past the margin) -> ``inconclusive``, printed with its interval.

Processes [100, 140, 180] vs [90, 150, 200] tok/s give about -58%..+125%: ``inconclusive``; [100, 101, 99] vs
[100, 100, 100] give about -2.5%..+2.5%: ``equivalent`` under the default margin. Every printed verdict
carries its margin (``verdict_text``). Under no effect the rule calls ``slower`` or ``faster`` in at most
about 5% of comparisons (simulated: ``tests/analysis/test_verdict_coverage.py``). ``pooled_delta_tok_s``
(the difference of the medians of every measured round pooled per side) is descriptive only: rounds of one
process share its load and placement, so no interval or verdict is drawn from them.
The displayed ``delta_tok_s`` / ``delta_pct`` are the difference of the medians (the project's primary
metric); ``ci_*_tok_s`` are the percent bounds times B's median.
Per label, ``label_vs_baseline`` applies the same rule against the phase baseline (in a sequential phase: the
stopping look's verdict, ``analysis.comparison.sequential_verdict``) and marks a
single-process label or an offloaded label whose retention exceeds 1.0 ``inconclusive`` (an offload that
measures faster than no offload is noise until repeated).
"Paired" means paired by (G, N, prefetch_step, offload_params) within a phase; the processes of the two
sides are independent (unpaired interval).

What is deliberately not modelled: multiple-comparison correction across
(G, N) points; the intervals are per point. Cross-stack rows (native vs
same-runtime) compare different software stacks and are labelled as such;
they carry no verdict about the offloader alone.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.load import RunData
from analysis.comparison.sequential_verdict import SequentialVerdict, sequential_verdicts
from analysis.comparison.soundness import withheld_reason
from analysis.comparison.variance import reference_mask
from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT, check_margin, decide, verdict_text
from results_schema.codec.io import RecordError
from results_schema.records.sequential import read_looks

POINT_KEY = ["group_size", "num_in_group", "prefetch_step", "offload_params"]


def _pair_row(phase, a_label, b_label, a_thr, b_thr, a_rounds, b_rounds, margin_pct: float) -> dict:
    d = decide(a_thr, b_thr, margin_pct=margin_pct)
    b_med = float(np.median(b_thr))
    pooled = float(np.median(a_rounds) - np.median(b_rounds)) if len(a_rounds) and len(b_rounds) else math.nan
    return {
        "phase": phase, "a_label": a_label, "b_label": b_label, "a_processes": len(a_thr),
        "b_processes": len(b_thr), "a_median_tok_s": float(np.median(a_thr)), "b_median_tok_s": b_med,
        "delta_tok_s": float(np.median(a_thr)) - b_med, "delta_pct": d.delta_pct,
        "ci_low_tok_s": d.ci_low_pct / 100.0 * b_med, "ci_high_tok_s": d.ci_high_pct / 100.0 * b_med,
        "ci_low_pct": d.ci_low_pct, "ci_high_pct": d.ci_high_pct, "margin_pct": float(margin_pct),
        "verdict": d.verdict, "verdict_text": d.text, "pooled_delta_tok_s": pooled,
        "note": "" if min(len(a_thr), len(b_thr)) >= 2 else
        f"no CI: fewer than 2 processes on a side (n={len(a_thr)} vs {len(b_thr)})",
    }


def _withhold(row: dict, data: RunData, phase: str, labels: list[str]) -> None:
    """Withhold ``row``'s verdicts (in place) when a process of ``labels`` was contended
    (``analysis.comparison.soundness.withheld_reason``); the interval stays, the note says why."""
    why = withheld_reason(data.runs, phase, labels)
    if why:
        row["verdict"] = "withheld"
        row["verdict_text"] = f"withheld: {why} ({row['verdict_text']})"
        row["note"] = "; ".join(x for x in (row["note"], f"withheld: {why}") if x)


SEQUENTIAL_PAIR_NOTE = ("descriptive: a sequential phase's looks judge each label against the baseline only, and a "
                        "fixed 95% interval on processes its looks stopped does not hold its level")
"""Note of a label-vs-label row of a sequential phase (``compare_implementations``, ``spaced_vs_adjacent``)."""


def _sequential_phases(data: RunData) -> set[str]:
    """Phases with a look line in the run (none when the file is absent or does not parse)."""
    try:
        return {line.phase for line in read_looks(data.run_dir)}
    except (RecordError, OSError):
        return set()


def _mark_sequential(row: dict, phases: set[str]) -> None:
    """Append ``SEQUENTIAL_PAIR_NOTE`` to ``row``'s note (in place) when its phase is sequential."""
    if row["phase"] in phases:
        row["note"] = "; ".join(x for x in (row["note"], SEQUENTIAL_PAIR_NOTE) if x)


def _samples(data: RunData, phase: str, label: str) -> tuple[list[float], list[float]]:
    runs, rounds = data.runs, data.rounds
    thr = runs.loc[(runs["phase"] == phase) & (runs["label"] == label), "throughput_tok_s"].tolist()
    rnd = rounds.loc[(rounds["phase"] == phase) & (rounds["label"] == label), "throughput_tok_s"].tolist()
    return thr, rnd


PAIR_COLUMNS = [
    "phase", "group_size", "num_in_group", "prefetch_step", "offload_params", "a_label", "b_label", "a_processes",
    "b_processes", "a_median_tok_s", "b_median_tok_s", "delta_tok_s", "delta_pct", "ci_low_tok_s", "ci_high_tok_s",
    "ci_low_pct", "ci_high_pct", "margin_pct", "verdict", "verdict_text", "pooled_delta_tok_s", "note",
]


def compare_implementations(data: RunData, summary: pd.DataFrame, a: str = "current", b: str = "official",
                            phases=None, *, margin_pct: float = DEFAULT_MARGIN_PCT) -> pd.DataFrame:
    """Paired A-vs-B rows per (phase, G, N, prefetch_step, offload_params) present for both.

    ``verdict`` reads "A is faster/slower/equivalent than B, or inconclusive" (``verdict``, with
    ``margin_pct``); ``verdict_text`` adds the interval and the margin. In a sequential phase the row's note says it
    is descriptive (``SEQUENTIAL_PAIR_NOTE``).
    """
    check_margin(margin_pct)
    rows = []
    seq_phases = _sequential_phases(data)
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
                row = _pair_row(phase, ra["label"], rb["label"], at, bt, ar, br, margin_pct)
                row.update({k: ra[k] for k in POINT_KEY})
                _withhold(row, data, phase, [ra["label"], rb["label"]])
                _mark_sequential(row, seq_phases)
                rows.append(row)
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def long_window_table(data: RunData, summary: pd.DataFrame, *, long_phase: str = "long_window",
                      short_phase: str = "same_runtime", margin_pct: float = DEFAULT_MARGIN_PCT) -> pd.DataFrame:
    """Current vs official in the long-window phase next to the same point's same-runtime verdict.

    Columns: the pair columns of the long-window phase plus ``short_verdict`` and
    ``confirms`` (True when both verdicts agree). Empty when the phase is absent.
    """
    if long_phase not in set(summary["phase"]):
        return pd.DataFrame(columns=PAIR_COLUMNS + ["short_verdict", "confirms"])
    lw = compare_implementations(data, summary, phases={long_phase}, margin_pct=margin_pct)
    sr = compare_implementations(data, summary, phases={short_phase}, margin_pct=margin_pct)
    short = {tuple(r[k] for k in POINT_KEY): r["verdict"] for _, r in sr.iterrows()}
    lw["short_verdict"] = [short.get(tuple(r[k] for k in POINT_KEY), "absent") for _, r in lw.iterrows()]
    lw["confirms"] = lw["short_verdict"] == lw["verdict"]
    return lw


def _adjacent(layers: str) -> bool:
    idx = [int(x) for x in layers.split(",") if x != ""]
    return any(b - a == 1 for a, b in zip(idx, idx[1:], strict=False))  # consecutive pairs


SPACED_COLUMNS = ["phase", "implementation", "num_selected_layers", "adjacent_label", "spaced_label",
                  "adjacent_layers", "spaced_layers", "adjacent_median_tok_s", "spaced_median_tok_s",
                  "delta_tok_s", "delta_pct", "ci_low_tok_s", "ci_high_tok_s", "ci_low_pct", "ci_high_pct",
                  "margin_pct", "verdict", "verdict_text", "note"]


def spaced_vs_adjacent(data: RunData, summary: pd.DataFrame, *, margin_pct: float = DEFAULT_MARGIN_PCT) -> pd.DataFrame:
    """Same layer count, adjacent (some consecutive selected layers) vs spaced (none consecutive).

    Layer sets come from evidence. ``verdict`` reads "adjacent is faster/slower/equivalent than spaced"; in a
    sequential phase the note says it is descriptive (``SEQUENTIAL_PAIR_NOTE``).
    """
    rows = []
    seq_phases = _sequential_phases(data)
    offl = summary[(summary["implementation"] != "baseline") & (summary["num_selected_layers"] > 0)]
    for (phase, impl, n), sub in offl.groupby(["phase", "implementation", "num_selected_layers"], sort=False):
        adj = [r for _, r in sub.iterrows() if _adjacent(r["selected_layers"])]
        spa = [r for _, r in sub.iterrows() if not _adjacent(r["selected_layers"])]
        for ra in adj:
            for rs in spa:
                at, ar = _samples(data, phase, ra["label"])
                st, sr = _samples(data, phase, rs["label"])
                p = _pair_row(phase, ra["label"], rs["label"], at, st, ar, sr, margin_pct)
                _withhold(p, data, phase, [ra["label"], rs["label"]])
                _mark_sequential(p, seq_phases)
                rows.append({
                    "phase": phase, "implementation": impl, "num_selected_layers": int(n),
                    "adjacent_label": ra["label"], "spaced_label": rs["label"],
                    "adjacent_layers": ra["selected_layers"], "spaced_layers": rs["selected_layers"],
                    "adjacent_median_tok_s": p["a_median_tok_s"], "spaced_median_tok_s": p["b_median_tok_s"],
                    "delta_tok_s": p["delta_tok_s"], "delta_pct": p["delta_pct"], "ci_low_tok_s": p["ci_low_tok_s"],
                    "ci_high_tok_s": p["ci_high_tok_s"], "ci_low_pct": p["ci_low_pct"],
                    "ci_high_pct": p["ci_high_pct"], "margin_pct": p["margin_pct"], "verdict": p["verdict"],
                    "verdict_text": p["verdict_text"], "note": p["note"],
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
                   "short_retention", "retention_difference", "long_verdict", "short_verdict", "margin_pct",
                   "confirms_direction"]

CONFIRMATION_PHASES = (("long_window", "same_runtime"), ("confirmation", "parameter_optimization"))
"""(long-window phase, phase it confirms) pairs of the seed's designs."""


def confirmation_table(summary: pd.DataFrame, pairs=CONFIRMATION_PHASES) -> pd.DataFrame:
    """Each label of a long-window / confirmation phase next to the same label in the phase it confirms.

    Retention is vs each phase's own baseline (phases ran at different times, so raw tok/s are not
    compared across them). When ``summary`` carries the per-label verdicts (``label_vs_baseline``,
    as ``analysis.report.tables.build`` adds them), ``long_verdict`` / ``short_verdict`` are those and
    ``confirms_direction`` is True only when both are the same decided verdict (faster, slower or
    equivalent; inconclusive confirms nothing). Without them it falls back to both retentions
    lying on the same side of 1.0 and the verdict columns are empty.
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
            lv, sv = r.get("vs_baseline_verdict"), s.get("vs_baseline_verdict")
            has_v = isinstance(lv, str) and isinstance(sv, str)
            if has_v:
                same = lv == sv and lv in ("faster", "slower", "equivalent", "reference")
            else:
                same = (lr > 1) == (sr > 1) and (lr < 1) == (sr < 1)
            rows.append({
                "long_phase": long_phase, "short_phase": short_phase, "label": r["label"],
                "implementation": r["implementation"], "group_size": r["group_size"],
                "num_in_group": r["num_in_group"],
                "long_rounds_per_process": float(r["rounds"]) / float(r["processes"]),
                "long_median_tok_s": r["throughput_median_tok_s"], "short_median_tok_s": s["throughput_median_tok_s"],
                "long_retention": lr, "short_retention": sr, "retention_difference": lr - sr,
                "long_verdict": lv if has_v else "", "short_verdict": sv if has_v else "",
                "margin_pct": r.get("vs_baseline_margin_pct", math.nan) if has_v else math.nan,
                "confirms_direction": bool(same),
            })
    return pd.DataFrame(rows, columns=CONFIRM_COLUMNS)


VS_BASELINE_COLUMNS = ["vs_baseline_verdict", "vs_baseline_ci_low_pct", "vs_baseline_ci_high_pct",
                       "vs_baseline_margin_pct", "vs_baseline_note", "vs_baseline_ci_name"]

FIXED_CI_NAME = "95% CI"
"""``vs_baseline_ci_name`` of a verdict of the fixed rule (the 95% t interval over all the label's processes)."""


def vs_baseline_text(verdict: str, ci_low_pct, ci_high_pct, margin_pct: float, ci_name: str | None) -> str:
    """A label's verdict vs its baseline as every table prints it: ``verdict_rule.verdict_text`` for the fixed rule
    (``CI95 ...``); for a sequential phase's label the interval is named by its look (``slower (CI96.9% at look 1
    (3 vs 3 processes) -34.0%..-15.9%, margin ±5%)``)."""
    if not ci_name or ci_name in (FIXED_CI_NAME, "no interval") or not (
            isinstance(ci_low_pct, (int, float)) and math.isfinite(ci_low_pct)):
        return verdict_text(verdict, ci_low_pct, ci_high_pct, margin_pct=float(margin_pct))
    return f"{verdict} ({ci_name} {float(ci_low_pct):+.1f}%..{float(ci_high_pct):+.1f}%, margin ±{float(margin_pct):.3g}%)"


def run_sequential_verdicts(data: RunData) -> dict[tuple[str, str], SequentialVerdict]:
    """The sequential verdicts of the run's look lines (none when the file is absent or does not parse: then
    ``analysis validate`` fails the run, and every label is INVALID)."""
    try:
        lines = read_looks(data.run_dir)
    except (RecordError, OSError):
        return {}
    return sequential_verdicts(lines, data.runs)


def sequential_row(runs: pd.DataFrame, phase: str, label: str, sv: SequentialVerdict) -> list:
    """``VS_BASELINE_COLUMNS`` of a label a sequential phase judged (``sv``: ``sequential_verdicts``' entry): its
    stopping look's verdict and interval, the retention > 1.0 rule (medians of the look's processes) and the
    contention rule (``soundness.withheld_reason``) on the processes the look used (``runs``: ``RunData.runs``)."""
    v, notes = sv.verdict, [sv.note]
    used_blocks = (runs["repeat"] >= sv.first_block) & (runs["repeat"] < sv.first_block + sv.blocks)
    at = runs[(runs["phase"] == phase) & (runs["label"] == label) & used_blocks]
    bt = runs[(runs["phase"] == phase) & (runs["label"] == sv.baseline) & used_blocks]
    if len(at) and len(bt):
        ret = float(np.median(at["throughput_tok_s"])) / float(np.median(bt["throughput_tok_s"]))
        if ret > 1.0:
            v = "inconclusive"
            notes.append(f"retention {ret:.3f} > 1.0: offloading measured faster than no offload (noise until repeated)")
    used = pd.concat([at, bt])
    why = withheld_reason(used, phase, [label, sv.baseline])
    if why:
        v = "withheld"
        notes.insert(0, f"withheld: {why}")
    return [v, sv.ci_low_pct, sv.ci_high_pct, float(sv.margin_pct), "; ".join(notes), sv.ci_name]


def label_vs_baseline(data: RunData, summary: pd.DataFrame, *, margin_pct: float = DEFAULT_MARGIN_PCT,
                      sequential: Mapping[tuple[str, str], SequentialVerdict] | None = None) -> pd.DataFrame:
    """Each label's processes vs its phase baseline's, under ``verdict`` (same index as ``summary``).

    Columns ``VS_BASELINE_COLUMNS``: the verdict ("label is faster/slower/equivalent than the
    baseline, or inconclusive"), the CI of the relative difference (percent), the margin and a note.
    Forced to ``inconclusive`` (the note says why) when the label or the baseline ran a single
    process (no interval), or when an offloaded label's retention exceeds 1.0 (an offload measured
    faster than no offload is noise until repeated); ``withheld`` when a process of the label or of the
    baseline was contended (``analysis.comparison.soundness``). The phase's undelayed baselines (``reference_mask``)
    get ``reference``; a speed control (a baseline with ``step_delay_ms``) is judged against them like a label.
    A label of a sequential phase (named by a look line of the run's ``sequential-decisions.jsonl``) gets the
    verdict of record of its looks instead (``analysis.comparison.sequential_verdict.sequential_verdicts``: the
    stopping look's verdict and interval, the design's target as margin, ``vs_baseline_ci_name`` naming the look's
    level), with the retention > 1.0 and contention rules applied to the processes that look used;
    ``vs_baseline_ci_name`` is ``FIXED_CI_NAME`` for the fixed rule, ``no interval`` without one, ``''`` for the
    reference. ``sequential``: the run's ``run_sequential_verdicts`` where the caller has them already (a report
    build computes them once); None computes them here.
    """
    check_margin(margin_pct)
    out = pd.DataFrame(index=summary.index, columns=VS_BASELINE_COLUMNS, dtype=object)
    ref = data.runs[reference_mask(data.runs)]
    seq = run_sequential_verdicts(data) if sequential is None else sequential
    for i, r in summary.iterrows():
        ref_labels = list(dict.fromkeys(ref.loc[ref["phase"] == r["phase"], "label"].astype(str)))
        if r["label"] in ref_labels:
            out.loc[i, VS_BASELINE_COLUMNS] = ["reference", math.nan, math.nan, float(margin_pct), "phase baseline",
                                               ""]
            continue
        if (r["phase"], r["label"]) in seq:
            out.loc[i, VS_BASELINE_COLUMNS] = sequential_row(data.runs, r["phase"], r["label"],
                                                             seq[(r["phase"], r["label"])])
            continue
        base = summary[(summary["phase"] == r["phase"]) & summary["label"].isin(ref_labels)]
        at, _ar = _samples(data, r["phase"], r["label"])
        bt = []
        for lb in base["label"]:
            bt += _samples(data, r["phase"], lb)[0]
        if not at or not bt:
            out.loc[i, VS_BASELINE_COLUMNS] = ["inconclusive", math.nan, math.nan, float(margin_pct),
                                               "no baseline in this phase", "no interval"]
            continue
        d = decide(at, bt, margin_pct=margin_pct)
        v, notes = d.verdict, []
        if min(d.n_a, d.n_b) < 2:
            notes.append(f"single process (n={d.n_a} vs baseline n={d.n_b}): no CI")
        ret = float(np.median(at)) / float(np.median(bt))
        if ret > 1.0:
            v = "inconclusive"
            notes.append(f"retention {ret:.3f} > 1.0: offloading measured faster than no offload (noise until repeated)")
        why = withheld_reason(data.runs, r["phase"], [r["label"], *base["label"]])
        if why:
            v = "withheld"
            notes.insert(0, f"withheld: {why}")
        name = FIXED_CI_NAME if math.isfinite(d.ci_low_pct) else "no interval"
        out.loc[i, VS_BASELINE_COLUMNS] = [v, d.ci_low_pct, d.ci_high_pct, float(margin_pct), "; ".join(notes), name]
    for c in ("vs_baseline_ci_low_pct", "vs_baseline_ci_high_pct", "vs_baseline_margin_pct"):
        out[c] = out[c].astype(float)
    return out
