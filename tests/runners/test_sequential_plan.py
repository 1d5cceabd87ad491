"""A sequential phase's plan: bad designs refused before any process starts, the first look's ABBA blocks planned."""

from __future__ import annotations

import pytest

from conf.schema import ConfigError
from runners.errors import PlanError
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg

DEFAULT = ("model=tiny", "matrix@phases.same_runtime=same_runtime_cpu")


@pytest.mark.parametrize(("override", "named"), [
    ("phases.same_runtime.sequential.looks=[1,3]", "sequential.looks[0]=1: must be a whole number >= 2 (processes per arm)"),
    ("phases.same_runtime.sequential.target_pct=0", "sequential.target_pct=0.0: must be a finite number > 0 (%)"),
    ("phases.same_runtime.sequential.alpha=1.5", "sequential.alpha=1.5: must be a number in (0, 1)"),
])
def test_a_sequential_number_out_of_its_range_is_refused_when_the_config_is_typed(override: str, named: str) -> None:
    """The range table (conf/ranges.py) refuses it before planning, as every other number of the config."""
    with pytest.raises(ConfigError) as exc:
        compose_cfg(*DEFAULT, override)
    assert named in str(exc.value)


@pytest.mark.parametrize(("override", "named"), [
    ("phases.same_runtime.sequential.looks=[4,3]", "sequential looks [4, 3]"),
    ("phases.same_runtime.sequential.spending=linear", "sequential spending 'linear': allowed values are pocock"),
    ("phases.same_runtime.sequential.pairing=rounds", "sequential pairing 'rounds': allowed values are none, block"),
    (("phases.same_runtime.baseline=false", "phases.same_runtime.cases=[]"), "sequential needs kind=throughput"),
    ("phases.same_runtime.focus_first=true", "repeats_by_label ({}) and focus_first (True) must stay unset"),
    ("+phases.same_runtime.repeats_by_label={baseline: 5}", "repeats_by_label ({'baseline': 5})"),
])
def test_a_bad_sequential_design_is_refused_at_planning_naming_the_value(override: str | tuple[str, ...],
                                                                         named: str) -> None:
    with pytest.raises(PlanError) as exc:
        plan(compose_cfg(*DEFAULT, *([override] if isinstance(override, str) else override)))
    assert named in str(exc.value) and "phase 'same_runtime'" in str(exc.value)


def test_the_first_looks_blocks_are_planned_in_abba_order_with_the_speed_control_as_a_label() -> None:
    items = plan(compose_cfg(*DEFAULT, "phases.same_runtime.sequential.looks=[2,3]", "phases.same_runtime.cases="
                             "[{implementation: baseline, label: control, step_delay_ms: 2.6}]"))
    assert [(sc.case.label, sc.repeat) for sc in items] == [
        ("baseline", 0), ("current_g2_n1", 0), ("current_g1_n1", 0), ("control", 0),
        ("control", 1), ("current_g1_n1", 1), ("current_g2_n1", 1), ("baseline", 1)]


def test_without_looks_a_phase_keeps_its_rotated_repeats() -> None:
    items = plan(compose_cfg(*DEFAULT, "phases.same_runtime.sequential.looks=[]"))
    assert len(items) == 16 and [sc.case.label for sc in items[4:8]] == [
        "current_g2_n1", "current_g1_n1", "control_delay_2_6ms", "baseline"]


def test_a_paired_design_without_looks_is_refused_not_ignored() -> None:
    with pytest.raises(PlanError, match=r"^phase 'same_runtime': sequential\.pairing 'block' needs sequential\.looks"):
        plan(compose_cfg(*DEFAULT, "phases.same_runtime.sequential.looks=[]",
                         "phases.same_runtime.sequential.pairing=block"))
