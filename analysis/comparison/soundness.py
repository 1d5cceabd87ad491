"""Processes whose measurement a verdict may not rest on: contended by foreign work, or unstable within.

What is modelled, per case process (a row of ``RunData.runs``):

* ``contended``: the record's ``host_load.contended`` (``results_schema.records.host_load.is_contended``: foreign
  CPU work on the host, or steal, above its limit while the process measured). A verdict that rests on a
  contended process -- one of the label's own or of its phase baseline's -- is *withheld*
  (``withheld_reason``: ``contended (N of M processes)``): it is not printed as faster / slower / equivalent /
  inconclusive, and the point is kept off the Pareto front, the knee and every recommendation.
* ``unstable``: the process ran no warmup round (``workload.warmup_rounds == 0``: its first measured round
  carries the engine's cold start), or its measured window drifted (``analysis.load.window_drift_pct``: the
  two halves of its window differ, scaled to a difference between two whole windows) by more than
  ``DRIFT_FLOOR_FACTOR`` times its phase's noise floor (the baseline processes' ``(max - min) / median``,
  ``analysis.comparison.noise_floor``): it moved within itself well beyond what the same setting moves between
  processes. Why a factor of 2 and at least ``DRIFT_FLOOR_PROCESSES`` baselines: one process's drift against a
  range of a few processes is a ratio of two noisy numbers; simulated with round-to-round noise alone (3-4
  rounds per process, as the CPU default measures), a stable process exceeds 1x the floor of 4 baselines 22% of
  the time, 2x it 5%, and 2x the floor of 2 baselines 29%; a cold round or foreign work that starts mid-window
  moves a half by far more (``docs/measurements/host-load-2026-12-04.md``). A phase with fewer baseline
  processes judges drift not at all: only the warmup rule applies there. An unstable point is marked ``unstable``
  in the table and kept off the front, the knee and the recommendations; its verdict is still shown (a cold
  start is a cost a user may want to see, so ``warmup_rounds=0`` is marked rather than refused).

What is deliberately not modelled: re-measuring a withheld point (a later run does), and why a host was busy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import pandas as pd

from analysis.comparison.noise_floor import noise_floors
from analysis.comparison.variance import reference_mask

__all__ = ["CONTENDED_NOTE", "CONTROL_NOTE", "INPROCESS_NOTE", "DRIFT_FLOOR_FACTOR", "DRIFT_FLOOR_PROCESSES", "contended_keys", "contended_reason", "point_exclusions", "unstable_processes", "withheld_reason"]

DRIFT_FLOOR_FACTOR = 2.0
"""A process whose window drift exceeds this many times its phase's noise floor is unstable."""
DRIFT_FLOOR_PROCESSES = 4
"""Baseline processes a phase's floor needs before one process's drift is judged against it."""

CONTROL_NOTE = "speed control (a known-size cost, no byte moved): never on a front or in a recommendation"
"""Why a speed control (a baseline with ``step_delay_ms``) is kept off the front, the knee and recommendations."""

INPROCESS_NOTE = ("in-process case (A and B rounds in one process; docs/inprocess.md): not the verdict of record, never "
                  "on a front or in a recommendation")
"""Why an in-process case (``BenchRecord.in_process``: its rounds mix copies off and on) is kept off every front."""

CONTENDED_NOTE = "foreign work on the host while they measured"
"""What ``contended`` means, in the run's last line and the reports."""

ProcessKey = tuple[str, str, int]


def contended_keys(runs: pd.DataFrame) -> set[ProcessKey]:
    """``(phase, label, repeat)`` of every process whose record says it was contended."""
    if runs.empty or "host_contended" not in runs:
        return set()
    hit = runs[runs["host_contended"].fillna(False).astype(bool)]
    return {(str(p), str(lb), int(r)) for p, lb, r in zip(hit["phase"], hit["label"], hit["repeat"], strict=True)}


def contended_reason(processes: Collection[ProcessKey], contended: Collection[ProcessKey]) -> str:
    """``contended (N of M processes)`` when any of the ``processes`` a verdict rests on is ``contended``
    (``contended_keys``), else ``''``: the withholding rule over processes already picked (``withheld_reason``
    picks them from the runs table; ``analysis.comparison.paired_aa`` from a grouping made once per report)."""
    n = sum(1 for p in processes if p in contended)
    return f"contended ({n} of {len(processes)} processes)" if n else ""


def withheld_reason(runs: pd.DataFrame, phase: str, labels: Iterable[str]) -> str:
    """``contended (N of M processes)`` when any process of ``labels`` in ``phase`` was contended, else ``''``
    (``contended_reason``).

    Args:
        runs: ``RunData.runs``.
        phase: the phase.
        labels: every label the verdict rests on (the label and its baseline's, or the two compared).
    """
    names = set(labels)
    sub = runs[(runs["phase"] == phase) & runs["label"].isin(names)] if not runs.empty else runs
    if sub.empty or "host_contended" not in sub:
        return ""
    keys = [(str(p), str(lb), int(r)) for p, lb, r in zip(sub["phase"], sub["label"], sub["repeat"], strict=True)]
    return contended_reason(keys, contended_keys(sub))


def baseline_labels(runs: pd.DataFrame, phase: str) -> list[str]:
    """The baseline labels of ``phase`` (run order): its undelayed baselines, never a speed control."""
    b = runs[(runs["phase"] == phase) & reference_mask(runs)]
    return list(dict.fromkeys(str(x) for x in b["label"]))


def unstable_processes(runs: pd.DataFrame, floors: Sequence[Any] | None = None) -> dict[ProcessKey, str]:
    """``(phase, label, repeat) -> why`` for every unstable process (see the module docstring).

    Args:
        runs: ``RunData.runs`` (``warmup_rounds``, ``rounds_drift_pct``).
        floors: ``noise_floors(runs)`` (computed when None).
    """
    if runs.empty:
        return {}
    floors = noise_floors(runs) if floors is None else floors
    spread = {_get(f, "phase"): _get(f, "spread_pct") for f in floors
              if _get(f, "processes") >= DRIFT_FLOOR_PROCESSES}
    out: dict[ProcessKey, str] = {}
    for r in runs.itertuples(index=False):
        why = []
        if int(r.warmup_rounds) == 0:
            why.append("warmup_rounds=0 (the cold start is measured)")
        drift, floor = r.rounds_drift_pct, spread.get(r.phase)
        if floor is not None and not pd.isna(drift) and float(drift) > DRIFT_FLOOR_FACTOR * float(floor):
            why.append(f"window drift {float(drift):.1f}% > {DRIFT_FLOOR_FACTOR:g}x noise floor {float(floor):.1f}%")
        if why:
            out[(str(r.phase), str(r.label), int(r.repeat))] = "; ".join(why)
    return out


def point_exclusions(runs: pd.DataFrame, floors: Sequence[Any] | None = None) -> dict[tuple[str, str], list[str]]:
    """``(phase, label) -> reasons`` that keep a point off the front, the knee and recommendations.

    ``withheld: contended (N of M processes)`` when a process of the label or of its phase baseline was
    contended; ``unstable (k of n processes: why)`` when a process of the label was unstable; ``CONTROL_NOTE``
    for a speed control (its verdict against the undelayed baselines is shown; it is never a point); ``INPROCESS_NOTE``
    for an in-process case (``analysis.comparison.inprocess`` reports it).
    """
    if runs.empty:
        return {}
    unstable = unstable_processes(runs, floors)
    out: dict[tuple[str, str], list[str]] = {}
    for (phase, label), sub in runs.groupby(["phase", "label"], sort=False):
        phase, label = str(phase), str(label)
        is_ref = bool(reference_mask(sub).all())
        rests_on = [label] if is_ref else [label, *baseline_labels(runs, phase)]
        if not is_ref and str(sub["implementation"].iloc[0]) == "baseline":
            out.setdefault((phase, label), []).append(CONTROL_NOTE)
        if "in_process" in sub and sub["in_process"].notna().any():
            out.setdefault((phase, label), []).append(INPROCESS_NOTE)
        w = withheld_reason(runs, phase, rests_on)
        if w:
            out.setdefault((phase, label), []).append(f"withheld: {w}")
        mine = [unstable[(phase, label, int(rep))] for rep in sub["repeat"] if (phase, label, int(rep)) in unstable]
        if mine:
            whys = "; ".join(dict.fromkeys(mine))
            out.setdefault((phase, label), []).append(f"unstable ({len(mine)} of {len(sub)} processes: {whys})")
    return out


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)
