"""Case expansion, validation and the rotated schedule."""

from __future__ import annotations

from typing import Any

import pytest

from conf.schema import ConfigError
from conf.schema_matrix import MatrixConfig
from conf.schema_stack import RuntimeConfig, WorkloadConfig
from conf.typed import validate_as
from offload.selection import case_label
from runners.errors import PlanError
from runners.planning.plan import expand_phase, schedule

WORKLOAD = dict(num_prompts=4, input_len=32, max_tokens=16, max_model_len=256, seed=0, dtype="bfloat16",
                enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=1, measured_rounds=3,
                enable_prefix_caching=False, prompts_vary_per_round=True, temperature=0.0)
RUNTIME = dict(name="cpu", device="cpu", env={})


def matrix(**overrides: Any) -> dict[str, Any]:
    m: dict[str, Any] = dict(name="m", kind="throughput", baseline=True, implementations=["current"],
                             points=[dict(g=4, n=1), dict(g=2, n=1)], cases=[], repeats=1, repeats_by_label={})
    m.update(overrides)
    return m


def typed_expand(m: dict[str, Any], workload: dict[str, Any] = WORKLOAD, runtime: dict[str, Any] = RUNTIME):
    """``expand_phase`` of plain test data, typed first as the runner types a composed config."""
    return expand_phase("p", validate_as(MatrixConfig, m), workload=validate_as(WorkloadConfig, workload),
                        runtime=validate_as(RuntimeConfig, runtime), num_layers=8)


def expand(**overrides: Any):
    return typed_expand(matrix(**overrides))


def test_labels_name_implementation_and_parameters() -> None:
    assert case_label("baseline", 0, 0) == "baseline"
    assert case_label("current", 4, 1) == "current_g4_n1"
    assert case_label("official", 28, 2, prefetch_step=2, params=["experts", "w2"]) == "official_g28_n2_p2_params-experts+w2"


def test_expands_baseline_then_points_times_implementations() -> None:
    cases = expand(implementations=["current", "official"])
    assert [c.label for c in cases] == ["baseline", "current_g4_n1", "official_g4_n1", "current_g2_n1", "official_g2_n1"]


def test_phase_workload_overrides_win() -> None:
    cases = expand(measured_rounds=10, max_tokens=1)
    assert cases[0].workload.measured_rounds == 10 and cases[0].workload.max_tokens == 1
    assert cases[0].workload.num_prompts == 4


def test_rotated_schedule_starts_repeat_r_at_index_r() -> None:
    cases = expand(repeats=3)
    order = [(sc.repeat, sc.case.label) for sc in schedule({"p": cases})]
    labels = [c.label for c in cases]
    for r in range(3):
        assert [lab for rep, lab in order if rep == r] == labels[r:] + labels[:r]


def test_schedule_without_rotation_keeps_order() -> None:
    cases = expand(repeats=2)
    order = [sc.case.label for sc in schedule({"p": cases}, rotate_by_phase={"p": False})]
    assert order == [c.label for c in cases] * 2


def test_repeats_by_label_applies_per_case() -> None:
    cases = expand(repeats=3, repeats_by_label={"baseline": 5})
    items = schedule({"p": cases})
    assert sum(1 for sc in items if sc.case.label == "baseline") == 5
    assert len(items) == 5 + 3 + 3


def test_rejects_repeats_for_unknown_label() -> None:
    with pytest.raises(PlanError, match="unknown labels"):
        expand(repeats_by_label={"curent_g4_n1": 5})


def test_rejects_num_in_group_larger_than_group_size() -> None:
    with pytest.raises(PlanError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        expand(points=[dict(g=2, n=3)])


def test_rejects_prefetch_step_zero_while_enabled() -> None:
    with pytest.raises(PlanError, match=r"offload_prefetch_step \(0\) must be >= 1"):
        expand(points=[dict(g=4, n=1, prefetch_step=0)])


def test_rejects_point_that_selects_no_layer_of_the_model() -> None:
    with pytest.raises(PlanError, match="selects no layer of the 8-layer model"):
        expand(points=[dict(g=28, n=1)])


def test_rejects_duplicate_labels_and_unknown_implementation() -> None:
    with pytest.raises(PlanError, match="duplicate label"):
        expand(cases=[dict(implementation="current", group_size=4, num_in_group=1)])
    with pytest.raises(ConfigError, match=r"implementations\[0\]='fast': Input should be 'baseline', 'current'"):
        expand(implementations=["fast"])  # the schema's enum refuses it when the config is typed


def test_expected_error_case_skips_validation() -> None:
    cases = expand(cases=[dict(implementation="current", label="bad", group_size=2, num_in_group=3,
                               expect_error="ValueError")])
    assert cases[-1].label == "bad" and cases[-1].expect_error == "ValueError"


def test_accuracy_phase_runs_every_task_in_one_process_per_case() -> None:
    cases = expand(kind="accuracy", accuracy_tasks=["gsm8k", "gpqa"], points=[dict(g=4, n=1)])
    assert [(c.label, c.accuracy_tasks) for c in cases] == [("baseline", ("gsm8k", "gpqa")),
                                                            ("current_g4_n1", ("gsm8k", "gpqa"))]


def test_rejects_secrets_in_the_config_environment() -> None:
    with pytest.raises(PlanError, match="secret-looking variables"):
        typed_expand(matrix(), WORKLOAD, dict(RUNTIME, env={"HF_TOKEN": "x"}))


@pytest.mark.parametrize("field, value, allowed", [
    ("num_prompts", -1, "a whole number >= 1"),
    ("max_tokens", -5, "a whole number >= 1"),
    ("measured_rounds", -1, "a whole number >= 1"),
    ("gpu_memory_utilization", -0.5, "a number in (0, 1]"),
    ("input_len", 0, "a whole number >= 1"),
    ("warmup_rounds", -1, "a whole number >= 0"),
    ("max_num_seqs", 0, "a whole number >= 1 or null"),  # the published options: Optional[Annotated[...]]
    ("max_num_batched_tokens_factor", 0, "a whole number >= 1 or null"),
    ("min_measured_s", -1.0, "a finite number >= 0 or null"),
])
def test_invalid_workload_names_field_value_and_what_is_allowed(field: str, value: Any, allowed: str) -> None:
    with pytest.raises(PlanError) as exc:
        typed_expand(matrix(), {**WORKLOAD, field: value}, RUNTIME)
    assert f"workload.{field} = {value!r} is invalid: must be {allowed}" in str(exc.value)


@pytest.mark.parametrize("key, value, allowed", [
    ("cooldown_s", -3.0, ">= 0"), ("kill_grace_s", -1.0, ">= 0"), ("case_timeout_s", 0.0, "> 0"),
    ("max_accuracy_drop", 1.5, "in [0, 1]"),
])
def test_negative_process_limits_are_refused_naming_the_key(key: str, value: float, allowed: str) -> None:
    """A matrix typed without the range check (``validate_as``) meets the same one rule (``conf.ranges``) in the
    planner: one line naming the dotted key, the value and what is allowed."""
    with pytest.raises(PlanError) as exc:
        expand(**{key: value})
    assert str(exc.value).startswith(f"phases.p.{key}={value!r}: must be a ")
    assert allowed in str(exc.value) and "\n" not in str(exc.value)


def test_runtime_limits_are_refused_by_the_same_range_table() -> None:
    with pytest.raises(PlanError, match=r"^runtime\.health_timeout_s=0\.0: must be a finite number > 0 \(s\)$"):
        typed_expand(matrix(), WORKLOAD, dict(RUNTIME, health_timeout_s=0.0))


def test_invalid_phase_workload_override_names_the_phase_key() -> None:
    with pytest.raises(PlanError, match=r"phases\.p\.measured_rounds = -1 is invalid: must be a whole number >= 1"):
        expand(measured_rounds=-1)


def test_workload_that_does_not_fit_max_model_len_is_rejected() -> None:
    with pytest.raises(PlanError, match=r"input_len \(32\) \+ max_tokens \(300\) exceeds max_model_len \(256\)"):
        expand(max_tokens=300)


@pytest.mark.parametrize("dtype, ok", [("fp8x", False), ("", False), ("bfloat16", True), ("float16", True),
                                       ("auto", True), ("half", True)])
def test_workload_dtype_must_be_one_of_vllms(dtype: str, ok: bool) -> None:
    """A dtype vLLM would refuse inside the case process is refused before any process (exit 2)."""
    if ok:
        typed_expand(matrix(), {**WORKLOAD, "dtype": dtype}, RUNTIME)
        return
    with pytest.raises(PlanError) as exc:
        typed_expand(matrix(), {**WORKLOAD, "dtype": dtype}, RUNTIME)
    assert f"workload.dtype = {dtype!r} is invalid: must be one of auto, half, float16, bfloat16" in str(exc.value)


def test_vllm_dtypes_are_vllms_own() -> None:
    from typing import get_args

    from vllm.config.model import ModelDType

    from runners.planning.workload_check import VLLM_DTYPES

    assert VLLM_DTYPES == get_args(ModelDType)
