"""The serving validation of a sequential serving phase (``analysis.serving.summary.validate_serving``): every recorded
look recomputed from the recorded ``ServingRun`` lines, and held to the design the run declared.

What is modelled: the lines of ``serving-looks.jsonl`` (``results_schema.records.serving_looks``) of one phase, in
order, against its ``<phase>-serving.jsonl`` lines (``recheck_serving_looks``): each line follows its design (look
number, blocks = ``looks[k]``, the look's spent alpha, the same design as look 1), looks at exactly the labels the
previous line left open, names the floor baselines the runs hold, adds the blocks the design gives, and each label's
state and every cell's verdict, complete blocks, interval, floor and margin are what ``analysis.serving.sequential.label_look`` (the
runner's own function) gives on the recorded lines (bounds within ``TOL_PCT``). Then each line's design is held to
what the run declared (``recheck_serving_declared``): its looks, target, alpha, spending and pairing are the saved
config's ``phases.<phase>.sequential`` (``analysis.comparison.sequential_check.declared_design``), and the first look
looks at the offload labels ``plan.json`` plans (every case whose implementation is not ``baseline``). A phase the
config declares sequential whose processes were recorded with no look line has no verdict of record: an error too.

What is deliberately not modelled: whether the runner ran the blocks in ABBA order (the schedule is in the logs);
the speed control (not looked at).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.comparison.sequential import SequentialDesign
from analysis.comparison.sequential_check import (declared_design, look_place_diffs, next_blocks_diffs,
                                                  recheck_each_look)
from analysis.serving.sequential import label_look
from analysis.serving.stats import _floor_baselines
from results_schema.codec.io import read_json, scan_jsonl
from results_schema.records.plan import PLAN_FILE, PlannedPhase, RunPlan
from results_schema.records.serving import SERVING_SUFFIX, ServingRun
from results_schema.records.serving_looks import (FILE_NAME, ServingLabelLook, ServingLookDecision,
                                                  read_serving_looks)
from results_schema.rules.floor_rule import is_offload_label

TOL_PCT = 1e-6
"""Bound tolerance (percent points) of a recomputed cell: the recorded JSON holds full float precision."""


def _same(x: float | None, y: float | None) -> bool:
    return (x is None and y is None) or (x is not None and y is not None and abs(x - y) <= TOL_PCT)


def _label_diff(x: ServingLabelLook, y: ServingLabelLook) -> str | None:
    """Where a recorded label look ``x`` differs from its recomputation ``y`` (None: it does not)."""
    if x.state != y.state:
        return f"{x.label}: recorded {x.state}, recomputed {y.state}"
    got = {(c.rate_rps, c.metric): c for c in x.cells}
    want = {(c.rate_rps, c.metric): c for c in y.cells}
    if set(got) != set(want):
        return f"{x.label}: recorded cells {sorted(got, key=str)}, recomputed {sorted(want, key=str)}"
    for key, c in want.items():
        g = got[key]
        if (g.verdict, g.blocks) != (c.verdict, c.blocks) or not all(
                _same(u, v) for u, v in ((g.ci_low_pct, c.ci_low_pct), (g.ci_high_pct, c.ci_high_pct),
                                         (g.floor_pct, c.floor_pct), (g.margin_pct, c.margin_pct))):
            return (f"{x.label} at {key[0] or 'inf'} req/s, {key[1]}: recorded {g.verdict} ({g.ci_low_pct}.."
                    f"{g.ci_high_pct}%, {g.blocks} blocks, floor {g.floor_pct}%, margin {g.margin_pct}%), recomputed "
                    f"{c.verdict} ({c.ci_low_pct}..{c.ci_high_pct}%, {c.blocks} blocks, floor {c.floor_pct}%, margin "
                    f"{c.margin_pct}%)")
    return None


def _structure(line: ServingLookDecision, k: int, design: SequentialDesign, prev: ServingLookDecision | None,
               floor: Sequence[str]) -> list[str]:
    out = look_place_diffs(line, k, design, prev)
    if sorted(line.baselines) != sorted(floor):
        out.append(f"look {line.look}: floor baselines {list(line.baselines)} recorded; the runs' are {sorted(floor)}")
    return out + next_blocks_diffs(line, k, design)


def recheck_serving_looks(lines: Sequence[ServingLookDecision], runs: Sequence[ServingRun]) -> list[str]:
    """One line per difference between one serving phase's recorded looks (file order) and their recomputation from
    ``runs`` (the phase's ``ServingRun`` lines; module docstring). Empty: all agree."""
    if not lines:
        return []
    floor = sorted(lb for _ph, lb in _floor_baselines([r for r in runs if r.phase == lines[0].phase])[0])

    def look(k: int, line: ServingLookDecision, design: SequentialDesign) -> list[str]:
        return _structure(line, k, design, lines[k - 1] if k else None, floor) + [
            f"look {line.look}: {diff}" for x in line.labels
            if (diff := _label_diff(x, label_look(runs, line.phase, x.label, design, k))) is not None]

    return recheck_each_look(lines, look)


def recheck_serving_declared(lines: Sequence[ServingLookDecision], config: Mapping[str, Any], phase: str,
                             planned: PlannedPhase | None, processes: int) -> list[str]:
    """One line per difference between one serving phase's look lines and what the run declared (module docstring).

    Args:
        lines: the phase's serving look lines, in file order.
        config: the run's saved config (``EnvironmentManifest.config``).
        phase: the phase.
        planned: the phase in ``plan.json`` (None: it has none).
        processes: the phase's recorded ``ServingRun`` lines (a declared phase with some and no look line is an error).

    Raises:
        KeyError, TypeError, AttributeError: ``config`` lacks a key every config the runner saves holds.
    """
    declared = declared_design(config, phase)
    if declared is None:
        return [f"{len(lines)} serving look line(s) recorded; the saved config declares no sequential design for "
                "the phase"] if lines else []
    if not lines:
        looks, key = declared["looks"]
        return [f"the run declared looks {list(looks)} ({key}) but recorded no look line over its {processes} "
                f"serving line(s) ({FILE_NAME}): the phase has no verdict of record"] if processes else []
    out = []
    for name, (value, source) in declared.items():
        bad = sorted({str(list(got) if isinstance(got, tuple) else got) for x in lines
                      if (got := getattr(x, name)) != value})
        out += [f"{name} {b} recorded; declared {list(value) if isinstance(value, tuple) else value} ({source})"
                for b in bad]
    if planned is None:
        return out + ["plan.json has no such phase: its planned labels are unknown"]
    want = sorted(c.label for c in planned.cases if is_offload_label(c.implementation))
    got = sorted(x.label for x in lines[0].labels)
    if got != want:
        out.append(f"look 1 looks at {got}; plan.json plans the offload labels {want}")
    return out


def serving_look_issues(run_dir: Path, config: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """``(code, phase, message)`` of every serving phase of ``run_dir``: ``sequential_record`` (the look file does
    not validate), ``sequential_recompute`` (``recheck_serving_looks``), ``sequential_design``
    (``recheck_serving_declared``; skipped without a readable saved config, which check ``manifest`` names).

    Args:
        run_dir: the run directory.
        config: the run's saved config (``EnvironmentManifest.config``; None: it could not be read).
    """
    try:
        lines = read_serving_looks(run_dir)
    except ValueError as exc:
        return [("sequential_record", "", f"{FILE_NAME}: {exc}".splitlines()[0])]
    runs: dict[str, list[ServingRun]] = {}
    for path in sorted(run_dir.glob(f"*{SERVING_SUFFIX}")):
        good, _errors = scan_jsonl(path, ServingRun)  # a bad line: analysis.serving.summary names it
        runs[path.name[:-len(SERVING_SUFFIX)]] = [r for _n, r in good]
    try:
        plan: RunPlan | None = read_json(run_dir / PLAN_FILE, RunPlan)
    except (OSError, ValueError):
        plan = None
    out: list[tuple[str, str, str]] = []
    for phase in dict.fromkeys([*(x.phase for x in lines), *runs]):
        mine = [x for x in lines if x.phase == phase]
        out += [("sequential_recompute", phase, f"{phase}: the recorded serving look is not what its processes give: "
                                                f"{diff}") for diff in recheck_serving_looks(mine, runs.get(phase, []))]
        if config is None:
            continue
        planned = next((p for p in plan.phases if p.name == phase), None) if plan is not None else None
        try:
            diffs = recheck_serving_declared(mine, config, phase, planned, len(runs.get(phase, [])))
        except (KeyError, TypeError, AttributeError) as exc:
            diffs = [f"the saved config's design of the phase cannot be read ({exc!r})"]
        out += [("sequential_design", phase, f"{phase}: the recorded design is not what the run declared: {diff}")
                for diff in diffs]
    return out
