"""A sequential serving phase's plan (``+experiment=serving``): bad designs refused before any process starts, the
first look's blocks planned with the speed control in its fixed blocks, the decided blocks in ABBA order with their
repeat's rate rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.comparison.sequential import SequentialDesign
from results_schema.records.serving_looks import ServingLabelLook, ServingLookDecision
from runners.errors import PlanError
from runners.launching.serving_case import build_spec, rotated
from runners.orchestration.sequential import design, plan_lines
from runners.orchestration.serving_sequential import serving_block_items
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg

SERVING = "+experiment=serving"
FIRST = [("baseline", 0), ("current_g1_n1", 0), ("baseline_twin", 0), ("control_delay_20ms", 0),
         ("control_delay_20ms", 1), ("baseline_twin", 1), ("current_g1_n1", 1), ("baseline", 1),
         ("baseline", 2), ("current_g1_n1", 2), ("baseline_twin", 2)]


def test_the_experiment_declares_the_design_the_simulation_holds_to_alpha() -> None:
    """tests/analysis/test_serving_sequential.py simulates this design."""
    assert design(compose_cfg(SERVING), "serving") == SequentialDesign((3, 5), 5.0, 0.05, "pocock", "block")


def test_the_first_looks_blocks_are_planned_abba_with_the_speed_control_in_blocks_1_and_2() -> None:
    cfg = compose_cfg(SERVING)
    assert [(sc.case.label, sc.repeat) for sc in plan(cfg)] == FIRST
    assert plan_lines(cfg) == [
        "sequential serving: 11 processes planned (3 blocks of 3 arms: 2 floor baselines + 1 offload label(s) + 2 "
        "speed-control process(es), not looked at); looks after 3, 5 blocks stop each offload label when every "
        "(rate, metric) verdict is slower, faster or equivalent (alpha 0.05 per cell, pocock-type spending, paired t "
        "over complete blocks against the block's floor baselines); at most 6 more processes (budget 5 blocks)"]


def _look1(next_blocks: int) -> ServingLookDecision:
    open_label = ServingLabelLook(label="current_g1_n1", state="open" if next_blocks else "conclusive", cells=(),
                                  reason="r")
    d = SequentialDesign((3, 5), 5.0, 0.05, "pocock", "block")
    return ServingLookDecision(phase="serving", look=1, blocks=3, looks=(3, 5), target_pct=5.0, alpha=0.05,
                               spending="pocock", pairing="block", look_alpha=d.look_alphas()[0],
                               baselines=("baseline", "baseline_twin"), labels=(open_label,), next_blocks=next_blocks)


def test_the_blocks_a_look_decides_run_the_floor_baselines_and_the_open_label_with_their_repeats_rates(
        tmp_path: Path) -> None:
    cfg = compose_cfg(SERVING)
    items = serving_block_items(cfg, "serving", [_look1(2)], 0)
    assert [(sc.case.label, sc.repeat) for sc in items] == FIRST + [
        ("baseline_twin", 3), ("current_g1_n1", 3), ("baseline", 3), ("baseline", 4), ("current_g1_n1", 4),
        ("baseline_twin", 4)]
    assert [sc.index for sc in items] == list(range(17))
    for sc in items:  # every block keeps the rotation of its repeat: repeat 3 starts at 16 req/s, repeat 4 at inf
        spec = build_spec(sc, model_dir=tmp_path, run_dir=tmp_path, python="python")
        assert spec.load.request_rates_rps == rotated((4.0, 16.0, None), sc.repeat)
    assert len(serving_block_items(cfg, "serving", [_look1(0)], 0)) == 11  # stopped at look 1: nothing added


@pytest.mark.parametrize(("override", "named"), [
    ("phases.serving.sequential.pairing=none", "sequential.pairing 'none': a serving phase's looks pair each label "
                                               "process with the floor baselines of its own block; the only allowed "
                                               "value is 'block'"),
    ("+phases.serving.repeats_by_label.current_g1_n1=2", "repeats_by_label may name only speed controls "
                                                         "(step_delay_ms; named: ['current_g1_n1'])"),
    ("phases.serving.repeats_by_label.control_delay_20ms=4", "(over: {'control_delay_20ms': 4})"),
    ("phases.serving.cases=[{implementation: baseline, label: control_delay_20ms, step_delay_ms: 20.0}]",
     "needs at least 2 floor baselines (baselines without step_delay_ms: ['baseline'])"),
])
def test_a_bad_serving_design_is_refused_at_planning_naming_the_value(override: str, named: str) -> None:
    with pytest.raises(PlanError) as exc:
        plan(compose_cfg(SERVING, override))
    assert named in str(exc.value) and str(exc.value).startswith("phase 'serving': "), str(exc.value)
