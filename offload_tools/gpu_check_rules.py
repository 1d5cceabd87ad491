"""The GPU check's rules: its goals, the verdict over its points, and the budget estimate of a point.

:func:`verdict` is ``ok`` of ``python -m offload_tools.gpu_check_torch``: every output bitwise equal
(offloaded and interleaved un-offloaded), no stale read, every point run, the run complete and, where
timings are judged (cuda: asynchronous copies), the goals below and no offloaded step faster than its
interleaved un-offloaded step beyond the baselines' spread (:func:`timing_failures`).
:func:`estimate_point_s` predicts a point's seconds from the event model, so the check starts a point
only when it fits in what is left of its budget. Not modelled in the estimate: compiling.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from offload_tools.step_model import boundary, simulate_step_s

__all__ = ["EAGER_GOAL_RATIO", "GOAL_MAX_GROUP", "GRAPH_EXTRA_STEPS", "GRAPH_GOAL_RATIO", "SETUP_S_PER_LAYER",
           "SPEEDUP_GOALS", "estimate_point_s", "judged", "timing_failures", "verdict"]

GRAPH_GOAL_RATIO = 0.97
EAGER_GOAL_RATIO = 0.95
GOAL_MAX_GROUP = 4
SPEEDUP_GOALS = {(28, 1): 1.6, (28, 2): 1.25, (14, 1): 1.12}
"""Least speedup of ``current`` over ``upstream`` in graph mode at these points (cuda)."""
SETUP_S_PER_LAYER = 0.45
"""Seconds of set-up per offloaded layer and protocol assumed before a point has run (2026-12-04, H200:
0.4-0.45 s when each point pinned its own host memory); then the run's own mean is used."""
GRAPH_EXTRA_STEPS = 4
"""Untimed graph steps per run: two warm-up steps, the capture, the first replay."""


def judged(args: argparse.Namespace, device_type: str, protocol: str, mode: str, g: int) -> bool:
    """Whether a run's ratio goal applies: cuda, ``current``, graph mode, or eager with stream sync for G <= 4."""
    return device_type == "cuda" and protocol == "current" and mode != "compile" and (
        mode == "graph" or (g <= GOAL_MAX_GROUP and args.step_sync == "stream"))


def timing_failures(points: list[dict[str, Any]]) -> list[str]:
    """One line per offloaded step faster than its interleaved baseline beyond the baselines' spread."""
    out = []
    for p in points:
        for name, pr in p.get("protocols", {}).items():
            for mode, m in pr["modes"].items():
                if m.get("faster_than_baseline"):
                    out.append(f"{name} ({p['group_size']},{p['num_in_group']}) {mode}: {m['step_s'] * 1e3:.3f} ms is "
                               f"{m['below_baseline']:.1%} below the interleaved un-offloaded step "
                               f"{m['baseline_step_s'] * 1e3:.3f} ms (spread {m['baseline_spread']:.1%})")
    return out


def verdict(points: list[dict[str, Any]], judged: bool, not_run: Sequence[dict[str, Any]] = (),
            complete: bool = True) -> dict[str, Any]:
    """``ok`` and its parts over every point.

    Args:
        points: point records (:func:`_run_point`).
        judged: the timing goals and the no-offload check apply (cuda: asynchronous copies).
        not_run: points not run, each with its reason (any one fails ``ok``).
        complete: the run reached its end (a partial summary written during the run is not ok).

    Returns:
        ``ok``, ``all_bitwise_equal`` (offloaded and interleaved baseline outputs), ``stale_reads``,
        ``goal_met`` / ``speedup_goals_met`` (``None`` unless judged), ``faster_than_baseline`` (lines
        naming the points, judged or not) and ``timing_judged``.
    """
    runs = [m for p in points for pr in p.get("protocols", {}).values() for m in pr["modes"].values()]
    equal = all(m["bitwise_equal"] and m["async_replays_bitwise_equal"] for m in runs) and all(
        b["bitwise_equal"] for p in points for b in p.get("baseline", {}).values())
    stale = sum(m["stale_reads"] for m in runs)
    checked = [m["meets_goal"] for m in runs if m.get("meets_goal") is not None]
    speed = [p["speedup"]["graph"] >= SPEEDUP_GOALS[(p["group_size"], p["num_in_group"])]
             for p in points if "graph" in p.get("speedup", {}) and (p["group_size"], p["num_in_group"]) in SPEEDUP_GOALS
             and p["prefetch_step"] == 1]
    goal = (all(checked) if checked else None) if judged else None
    speed_met = (all(speed) if speed else None) if judged else None
    fast = timing_failures(points)
    ok = equal and stale == 0 and goal is not False and speed_met is not False and not not_run and complete \
        and not (judged and fast)
    return {"ok": bool(ok), "all_bitwise_equal": equal, "stale_reads": stale, "goal_met": goal,
            "speedup_goals_met": speed_met, "faster_than_baseline": fast, "timing_judged": judged}


def estimate_point_s(args: argparse.Namespace, sel: Sequence[int], ctx: dict[str, Any], setup_s_per_layer: float) -> float:
    """Predicted seconds of one point: the event model's steps of every run and baseline block, plus set-up.

    Per protocol and mode ``steps + 1`` steps (graph: + :data:`GRAPH_EXTRA_STEPS` - 1 and the async
    replays) of the model's step (:func:`offload_tools.step_model.simulate_step_s`, launch-bound modes no
    faster than their un-offloaded step), two baseline blocks per mode, and ``setup_s_per_layer`` per
    offloaded layer and protocol. Compiling is not predicted (a compile point's estimate is low).
    """
    layers, base = ctx["shapes"].layers, ctx["baselines"].setup_step_s
    dev = base.get("graph")
    total = 0.0
    for mode, t_base in base.items():
        graph = mode == "graph"
        steps = args.steps + 1 + ((GRAPH_EXTRA_STEPS - 1 + args.async_replays) if graph else 0)
        model = simulate_step_s(layers, list(sel), dev if dev is not None else t_base, ctx["copy_s"],
                                args.prefetch_step, **boundary("crossing", mode, args.step_sync))
        total += len(args.protocols) * steps * max(model, t_base) + 2 * (args.steps + 1) * t_base
    return total + setup_s_per_layer * len(sel) * len(args.protocols)
