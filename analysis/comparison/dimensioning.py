"""A/A comparisons, the speed control's verdicts, and what a design needs to resolve a given cost.

What is modelled, per throughput phase:

* **A/A comparisons**: a label ``X`` and its twin ``X_twin`` (``TWIN_SUFFIX``: the same setting under a second
  label, so the analysis keeps two arms) are compared with the production rule (``verdict_rule.decide``, twin vs
  ``X``); any ``faster`` / ``slower`` is a false call (at 5% a correct rule calls one of six such comparisons
  about a quarter of the time, two about 3%). ``equivalent`` and ``inconclusive`` are not calls.
* **Speed control**: a baseline with ``step_delay_ms`` (``offload.controls``: every forward sleeps first, no
  byte moves) is a cost of known size; it is compared with each undelayed baseline label separately (expected
  ``slower``).
* **Dimensioning** (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013): with the run's
  variance components (``analysis.comparison.variance``) per arm, the minimum detectable cost
  (``analysis.comparison.power``) of the default's design (4 processes of the label vs 4 reference processes, the
  rounds per process this run measured), and, for a cost of ``TARGETS_PCT``, the rounds per process
  ``r = sqrt((c_process / c_round) * (s2_within / s2_between))`` (their optimal repetition count, both arms'
  components summed; ``MAX_ROUNDS`` when no between-process variance is seen) and the fewest processes per arm
  whose MDE reaches the target. ``c_round`` is the median measured round (s) and ``c_process`` the median of
  a process's wall time outside its measured rounds (start, load, warm-up, teardown), both from the run's own
  records (Kalibera & Jones' example figures ~20 s and ~2 s where a record lacks them).

Only phases with a twin or a speed control get these rows (the default design runs neither; its components
and MDEs are in ``variance`` / ``power``).

What is deliberately not modelled: levels above the process (runs, hosts), a drift shared by both arms, and
sequential designs (a sequential phase's control row carries its looks' verdict of record, ``aa_comparisons``; a
phase paired by block gets paired rows, ``analysis.comparison.paired_aa``). The dimensioning rows size the
default's unpaired design in every phase, a paired one included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.comparison.compare import FIXED_CI_NAME, sequential_row
from analysis.comparison.paired_aa import GroupedRuns, group_runs, paired_designs, paired_row
from analysis.comparison.power import detectable_cost_pct
from analysis.comparison.sequential_verdict import SequentialVerdict
from analysis.comparison.soundness import withheld_reason
from analysis.comparison.variance import Components, arm_components, control_mask, reference_mask
from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT, decide

__all__ = ["DEFAULT_COSTS_S", "MAX_PROCESSES", "MAX_ROUNDS", "TARGETS_PCT", "TWIN_SUFFIX", "aa_comparisons",
           "design_rows", "dimensioning_lines"]

TWIN_SUFFIX = "_twin"
"""A label ending in this is the twin of the label without it (same setting, a second arm)."""
TARGETS_PCT = (5.0, 10.0)
"""Costs (percent) the dimensioning asks the design to resolve at 80% power."""
DEFAULT_DESIGN_PROCESSES = 4
"""Processes per arm of the embedded default's design (conf/matrix/same_runtime_cpu.yaml)."""
MAX_ROUNDS = 20
MAX_PROCESSES = 64
DEFAULT_COSTS_S = (20.0, 2.0)
"""(process start, round) seconds of Kalibera & Jones' sizing on this host when the records lack them."""


def _controls(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[control_mask(runs)]


def _row(runs: pd.DataFrame, phase: str, kind: str, a: str, b: str, margin_pct: float, delay: float,
         seq: Mapping[tuple[str, str], SequentialVerdict]) -> dict[str, Any]:
    sv = seq.get((phase, a))
    if sv is not None and sv.baseline == b:  # a sequential phase's label vs its looks' baseline: the verdict of record
        v, lo, hi, margin, note, name = sequential_row(runs, phase, a, sv)
        return {"phase": phase, "kind": kind, "a_label": a, "b_label": b, "a_processes": sv.processes[0],
                "b_processes": sv.processes[1], "delta_pct": None,
                "ci_low_pct": lo if math.isfinite(lo) else None, "ci_high_pct": hi if math.isfinite(hi) else None,
                "verdict": v, "called": v in ("faster", "slower"),
                "expected": "slower" if kind == "control" else "no call", "step_delay_ms": delay, "margin_pct": margin,
                "note": note, "ci_name": name}
    at = runs.loc[(runs["phase"] == phase) & (runs["label"] == a), "throughput_tok_s"].astype(float).tolist()
    bt = runs.loc[(runs["phase"] == phase) & (runs["label"] == b), "throughput_tok_s"].astype(float).tolist()
    d = decide(at, bt, margin_pct=margin_pct)
    why = withheld_reason(runs, phase, [a, b])
    verdict = "withheld" if why else d.verdict
    return {"phase": phase, "kind": kind, "a_label": a, "b_label": b, "a_processes": d.n_a, "b_processes": d.n_b,
            "delta_pct": d.delta_pct, "ci_low_pct": d.ci_low_pct if math.isfinite(d.ci_low_pct) else None,
            "ci_high_pct": d.ci_high_pct if math.isfinite(d.ci_high_pct) else None, "verdict": verdict,
            "called": verdict in ("faster", "slower"), "expected": "slower" if kind == "control" else "no call",
            "step_delay_ms": delay, "margin_pct": float(margin_pct), "note": f"withheld: {why}" if why else "",
            "ci_name": FIXED_CI_NAME if math.isfinite(d.ci_low_pct) else "no interval"}


def aa_comparisons(runs: pd.DataFrame, *, margin_pct: float = DEFAULT_MARGIN_PCT,
                   sequential: Mapping[tuple[str, str], SequentialVerdict] | None = None,
                   grouped: GroupedRuns | None = None) -> list[dict[str, Any]]:
    """The A/A rows (twin vs its label) and the speed control's rows (control vs each undelayed baseline label).

    ``sequential`` (``analysis.comparison.compare.run_sequential_verdicts``): a label a sequential phase judged
    against that baseline gets its verdict of record (the stopping look's verdict, interval and processes,
    ``ci_name`` naming the look's level; ``delta_pct`` None), never the fixed 95% rule on all its processes. A phase
    whose design pairs by block (``sequential.pairing: block``, ``+experiment=aa_paired``) gets every row from
    ``analysis.comparison.paired_aa.paired_row``: the paired t over the complete blocks (``method`` ``"paired t, N
    blocks"``; the look's own verdict where the looks judged the pair, without the retention override), on the runs
    grouped once (``grouped``: ``paired_aa.group_runs(runs)``, grouped here when None).

    Returns:
        Flat dicts: ``phase``, ``kind`` (``A/A`` or ``control``), ``a_label``, ``b_label``, process counts,
        ``delta_pct``, ``ci_low_pct``, ``ci_high_pct``, ``verdict``, ``called`` (faster or slower),
        ``expected``, ``step_delay_ms``, ``margin_pct``, ``note``, ``ci_name`` (``95% CI`` for the fixed rule);
        a paired phase's rows add ``method``.
    """
    out: list[dict[str, Any]] = []
    seq = sequential or {}
    if runs.empty:
        return out
    paired = paired_designs(seq)
    g = grouped if grouped is not None else (group_runs(runs) if paired else None)
    for phase in dict.fromkeys(str(p) for p in runs["phase"]):
        pr = runs[runs["phase"] == phase]

        def row(kind: str, a: str, b: str, delay: float, phase: str = phase) -> dict[str, Any]:
            if phase in paired and g is not None:
                return paired_row(g, phase, kind, a, b, paired[phase][0], delay, seq.get((phase, a)))
            return _row(runs, phase, kind, a, b, margin_pct, delay, seq)

        labels = list(dict.fromkeys(str(x) for x in pr["label"]))
        for lb in labels:
            if lb.endswith(TWIN_SUFFIX) and lb.removesuffix(TWIN_SUFFIX) in labels:
                out.append(row("A/A", lb, lb.removesuffix(TWIN_SUFFIX), 0.0))
        refs = list(dict.fromkeys(str(x) for x in pr.loc[reference_mask(pr), "label"]))
        ctl = _controls(pr)
        for c in dict.fromkeys(str(x) for x in ctl["label"]):
            delay = float(ctl.loc[ctl["label"] == c, "step_delay_ms"].iloc[0])
            out += [row("control", c, b, delay) for b in refs]
    return out


def _costs(runs: pd.DataFrame, rounds: pd.DataFrame) -> tuple[float, float, str]:
    """(process seconds outside the measured rounds, seconds per measured round, source) medians of ``runs``."""
    n = rounds.groupby(["label", "repeat"]).size()
    per_round = [float(e) / int(n.get((lb, rep), 0)) for lb, rep, e in
                 zip(runs["label"], runs["repeat"], runs["elapsed_s"], strict=True) if n.get((lb, rep), 0)]
    outside = (runs["process_wall_s"].astype(float) - runs["elapsed_s"].astype(float)).dropna()
    if not per_round or outside.empty:
        return (*DEFAULT_COSTS_S, "Kalibera & Jones' sizing (no process wall time in the records)")
    return float(outside.median()), float(np.median(per_round)), "this run's records (medians)"


def _sd(c: Components, rounds: float) -> float:
    return math.sqrt(c.between + c.within / rounds)


def _fewest_processes(a: Components, ref: Components, rounds: int, target: float, margin_pct: float) -> int | None:
    """Fewest processes per arm whose MDE at ``rounds`` rounds per process is <= ``target`` (bisection; the MDE
    falls with the process count); None when not even ``MAX_PROCESSES`` do."""
    sa, sr = _sd(a, rounds), _sd(ref, rounds)

    def ok(n: int) -> bool:
        return detectable_cost_pct(n, sa, n, sr, margin_pct=margin_pct) <= target

    if not ok(MAX_PROCESSES):
        return None
    lo, hi = 2, MAX_PROCESSES
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def _design(phase: str, label: str, a: Components, ref: Components, costs: tuple[float, float, str],
            margin_pct: float) -> list[dict[str, Any]]:
    c_proc, c_round, source = costs
    n = DEFAULT_DESIGN_PROCESSES
    now = detectable_cost_pct(n, math.sqrt(a.process), n, math.sqrt(ref.process), margin_pct=margin_pct)
    rows = [{"phase": phase, "label": label, "design": "default (4 vs 4 processes, this run's rounds)",
             "target_pct": None, "processes_per_arm": n, "rounds_per_process": round(ref.n0, 2),
             "mde_pct": now if math.isfinite(now) else None, "cost_s_per_arm": n * (c_proc + ref.n0 * c_round),
             "process_cost_s": c_proc, "round_cost_s": c_round, "cost_source": source}]
    s2b, s2w = a.between + ref.between, a.within + ref.within
    r = MAX_ROUNDS if s2b <= 0 else min(MAX_ROUNDS, max(1, round(math.sqrt(c_proc / c_round * s2w / s2b))))
    for target in TARGETS_PCT:
        k = _fewest_processes(a, ref, r, target, margin_pct)
        mde = None if k is None else detectable_cost_pct(k, _sd(a, r), k, _sd(ref, r), margin_pct=margin_pct)
        rows.append({"phase": phase, "label": label, "design": f"resolve {target:g}%", "target_pct": target,
                     "processes_per_arm": k, "rounds_per_process": r, "mde_pct": mde,
                     "cost_s_per_arm": None if k is None else k * (c_proc + r * c_round),
                     "process_cost_s": c_proc, "round_cost_s": c_round, "cost_source": source})
    return rows


def design_rows(runs: pd.DataFrame, rounds: pd.DataFrame, *,
                margin_pct: float = DEFAULT_MARGIN_PCT) -> list[dict[str, Any]]:
    """Dimensioning rows (module docstring) for every offload label (not a twin, not a control) of every phase
    that runs a twin or a speed control, against the phase's reference arm."""
    out: list[dict[str, Any]] = []
    if runs.empty or rounds.empty:
        return out
    for phase in dict.fromkeys(str(p) for p in runs["phase"]):
        pr = runs[runs["phase"] == phase]
        labels = set(pr["label"].astype(str))
        if not (any(lb.endswith(TWIN_SUFFIX) for lb in labels) or not _controls(pr).empty):
            continue
        arms = arm_components(runs, rounds, phase)
        ref = arms.get("reference")
        offl = pr.loc[pr["implementation"] != "baseline", "label"].astype(str)
        costs = _costs(pr, rounds[rounds["phase"] == phase])
        for lb in dict.fromkeys(offl):
            comp = arms.get(lb)
            if ref is None or comp is None or lb.endswith(TWIN_SUFFIX):
                continue
            out += _design(phase, lb, comp, ref, costs, margin_pct)
    return out


def _pct(x: Any) -> str:
    return "none" if x is None else f"{float(x):.1f}%"


def dimensioning_lines(aa: list[Any], design: list[Any]) -> list[str]:
    """The printed A/A, control and dimensioning lines (console, Markdown, HTML); rows as dicts."""
    lines = []
    for r in aa:
        name = r.get("ci_name") or FIXED_CI_NAME
        level = "CI95" if name == FIXED_CI_NAME else name
        ci = ("no CI" if r["ci_low_pct"] is None or r["ci_high_pct"] is None
              else f"{level} {r['ci_low_pct']:+.1f}%..{r['ci_high_pct']:+.1f}%")
        what = "A/A" if r["kind"] == "A/A" else f"speed control ({r['step_delay_ms']:g} ms per step)"
        ok = (not r["called"]) if r["kind"] == "A/A" else r["verdict"] == "slower"
        tail = f" ({r['note']})" if r["verdict"] == "withheld" else ("" if ok else " -- NOT AS EXPECTED")
        n = r.get("method") or f"{r['a_processes']} vs {r['b_processes']} processes"
        lines.append(f"{what} {r['phase']}: {r['a_label']} vs {r['b_label']}: {r['verdict']} ({ci}, {n}); "
                     f"expected {r['expected']}{tail}")
    calls = sum(1 for r in aa if r["kind"] == "A/A" and r["called"])
    n_aa = sum(1 for r in aa if r["kind"] == "A/A")
    if n_aa:
        lines.append(f"A/A calls: {calls} of {n_aa} (each has about a 5% chance under a correct rule)")
    for d in design:
        cost = "none" if d["cost_s_per_arm"] is None else f"{d['cost_s_per_arm']:.0f} s per arm"
        procs = "more than 64" if d["processes_per_arm"] is None else str(d["processes_per_arm"])
        lines.append(f"dimensioning {d['phase']}/{d['label']}: {d['design']}: {procs} processes x "
                     f"{d['rounds_per_process']:g} rounds per arm, MDE {_pct(d['mde_pct'])}, {cost} (a process "
                     f"{d['process_cost_s']:.1f} s outside its rounds, a round {d['round_cost_s']:.2f} s: "
                     f"{d['cost_source']})")
    return lines
