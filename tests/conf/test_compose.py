"""Every experiment composes, with the process count of its published design."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from conf.schema import ConfigError
from runners.errors import PlanError
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg, compose_real

EXPERIMENT_DIR = Path(__file__).resolve().parents[2] / "conf" / "experiment"

PROCESS_COUNTS = {
    None: 12,  # embedded default: baseline + current (2,1) (1,1) + control, sequential: the first look's 3 blocks
    "qwen7b": 109,  # seed design 21x3 + 5x3 + 4x3 (90) + serving 5x3 + published accuracy 4 (baseline twice)
    "qwen7b_cuda": 93,  # 21x3 + 5x3 + serving 5x3
    "qwen1_5b": 56,  # 5x5 + 6x3 + 3x3 + published accuracy 4 (baseline twice)
    "qwen1_5b_cuda": 52,
    "smoke": 5,  # + the engine-path invalid case
    "stability": 2,
    "ttft": 4,
    "reproduce": 8,  # 5 performance + 3 accuracy (baseline twice)
    "official_cpu": 3,
    "serving": 11,  # 3 blocks of baseline + baseline_twin + current (1,1), the speed control in 2; one API server each
    "negative_control_serving": 6,  # accuracy: baseline x2 + the batch-gated fault; serving: baseline x2 + it
    "accuracy": 4,  # baseline x2 + current (4,1) (2,1), one `runners.incase.accuracy run` process each
    "negative_control": 3,  # baseline x2 + the deliberately broken current (4,1)
    "choose": 9,  # probe: baseline x2 + 2 calibration settings x2; verify (sequential): its first look's 3 baseline blocks
    "qwen7b_choose": 7,  # probe 4; verify: its baseline x3 (settings decided live)
    "smollm2": 12,  # SmolLM2-135M: baseline + current (2,1) (1,1) + sync (1,1), sequential: the first look's 3 blocks
    "aa_noise": 20,  # A/A: baseline, baseline_twin, current (2,1) and its twin, the speed control; 4 repeats
    "aa_paired": 30,  # aa_noise's 5 arms in 6 ABBA blocks (sequential, one look at the budget, pairing block)
    "smollm2_accuracy": 5,  # baseline x2 + current (2,1) on single-digit-addition + serving baseline, current (2,1)
    "smollm2_negative_control": 3,  # baseline x2 + the deliberately broken current (2,1)
    "inprocess": 9,  # in-process (2,1) (1,1) and the A/A case, 3 processes each, no baseline
}
NEEDS = {"choose": ("need_gib=0.05",), "qwen7b_choose": ("need_gib=3",)}
"""The need a choose experiment is planned with (it has none by default: a config error)."""


def _plan(experiment: str | None, *overrides: str):
    args = ([f"+experiment={experiment}"] if experiment else []) + list(overrides)
    return plan(compose_real(*args))


def test_every_experiment_file_has_a_declared_process_count() -> None:
    names = {p.stem for p in EXPERIMENT_DIR.glob("*.yaml")}
    assert names == {k for k in PROCESS_COUNTS if k}


@pytest.mark.parametrize("experiment", list(PROCESS_COUNTS))
@pytest.mark.heavy  # measured 2.3 s over 13 cases in the fast tier (its budget is 2 minutes)
def test_experiment_composes_with_its_process_count(experiment: str | None) -> None:
    assert len(_plan(experiment, *NEEDS.get(experiment or "", ()))) == PROCESS_COUNTS[experiment]


def test_qwen7b_reproduces_the_seed_design() -> None:
    cfg = compose_cfg("+experiment=qwen7b")
    w = cfg.workload
    assert (w.num_prompts, w.input_len, w.max_tokens, w.max_model_len) == (8, 128, 64, 512)
    assert (w.gpu_memory_utilization, w.enforce_eager, w.seed, w.warmup_rounds) == (0.5, True, 0, 1)
    items = plan(cfg)
    per_phase: dict[str, set[str]] = {}
    for sc in items:
        per_phase.setdefault(sc.case.phase, set()).add(sc.case.label)
    assert {k: len(v) for k, v in per_phase.items()} == {"same_runtime": 21, "long_window": 5, "native": 4,
                                                         "serving": 5, "accuracy": 3}
    assert {sc.case.workload.measured_rounds for sc in items if sc.case.phase == "long_window"} == {10}
    assert {sc.case.workload.measured_rounds for sc in items if sc.case.phase == "same_runtime"} == {3}
    assert {sc.case.runtime_name for sc in items if sc.case.phase == "native"} == {"ascend_native_v018"}
    assert {sc.case.runtime_name for sc in items if sc.case.phase != "native"} == {"ascend_latest"}
    assert {sc.case.implementation for sc in items if sc.case.phase == "same_runtime"} == {
        "baseline", "current", "official"}
    assert cfg.formal is True


def test_qwen1_5b_first_five_labels_get_five_repeats() -> None:
    items = _plan("qwen1_5b")
    reps: dict[str, int] = {}
    for sc in items:
        if sc.case.phase == "parameter_optimization":
            reps[sc.case.label] = reps.get(sc.case.label, 0) + 1
    assert sorted(reps.values(), reverse=True) == [5] * 5 + [3] * 6
    assert [reps[k] for k in ("baseline", "current_g28_n1", "current_g14_n1", "current_g28_n2", "current_g8_n1")] == [5] * 5
    confirm = [sc for sc in items if sc.case.phase == "confirmation"]
    assert len({sc.case.label for sc in confirm}) == 3 and {sc.case.workload.measured_rounds for sc in confirm} == {10}


def test_default_matrix_is_baseline_plus_two_current_points_and_a_control_in_sequential_abba_blocks_on_cpu() -> None:
    """The first look's 3 blocks are planned (baseline first in odd blocks, last in even ones); the looks after 3, 4
    and 6 blocks decide the rest (runners.orchestration.sequential)."""
    items = _plan(None)
    b, g2, g1, c = ("baseline", 0, 0), ("current", 2, 1), ("current", 1, 1), ("baseline", 0, 0)
    assert [(sc.case.implementation, sc.case.group_size, sc.case.num_in_group, sc.repeat) for sc in items] == [
        (*b, 0), (*g2, 0), (*g1, 0), (*c, 0), (*c, 1), (*g1, 1), (*g2, 1), (*b, 1), (*b, 2), (*g2, 2), (*g1, 2), (*c, 2)]
    # the known-size control: a baseline whose every forward sleeps 2.6 ms (judged, never on a front)
    assert [sc.case.step_delay_ms for sc in items if sc.case.label == "control_delay_2_6ms"] == [2.6] * 3
    seq = compose_real().phases["same_runtime"].sequential
    assert (list(seq.looks), seq.target_pct, seq.spending) == ([3, 4, 6], 5.0, "pocock")
    assert {sc.case.runtime_name for sc in items} == {"cpu"}
    # one GEMM thread, the engine core in the case process; the model is the wide one (hidden 1024)
    assert {(sc.case.runtime.env["OMP_NUM_THREADS"], sc.case.runtime.env["VLLM_ENABLE_V1_MULTIPROCESSING"])
            for sc in items} == {("1", "0")}
    assert compose_real().model.tiny.hidden_size == 1024
    assert compose_cfg().model.tiny.hidden_size == 128  # what the other tests run


def test_misspelt_key_fails_at_compose_time() -> None:
    with pytest.raises((ConfigCompositionException, ConfigKeyError, ValidationError)):
        compose_cfg("workload.num_prompt=3")
    with pytest.raises((ConfigCompositionException, ConfigKeyError, ValidationError)):
        compose_cfg("phases.same_runtime.repeat=2")


def test_wrong_type_fails_at_compose_time() -> None:
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_cfg("workload.num_prompts=many")


def test_rejects_num_in_group_larger_than_group_size_before_any_process() -> None:
    with pytest.raises(PlanError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        _plan(None, "phases.same_runtime.points=[{g: 2, n: 3}]")


def test_rejects_negative_and_unknown_backend() -> None:
    with pytest.raises(ConfigError, match=r"^phases\.same_runtime\.points\[0\]\.g=-1: must be a whole number >= 0$"):
        _plan(None, "phases.same_runtime.points=[{g: -1, n: 1}]")
    # an unknown backend is refused when the config is composed (results_schema.records.value_sets.OffloadBackend)
    with pytest.raises(ConfigCompositionException) as info:
        _plan(None, "phases.same_runtime.points=[{g: 4, n: 1, backend: magic}]")
    assert "Invalid value 'magic', expected one of [auto, prefetch, uva]" in str(info.value.__cause__)


@pytest.mark.heavy  # measured 1.0 s in the fast tier (its budget is 2 minutes)
def test_every_case_states_a_minimum_measured_window(tmp_path) -> None:
    """The default run measures at least DEFAULT_MIN_MEASURED_S per case (the one constant analysis also
    warns below), passed to bench_one."""
    from results_schema.records.models import DEFAULT_MIN_MEASURED_S
    from runners.incase.bench_one import load_case
    from runners.kinds.registry import case_argv
    from runners.paths import CasePaths

    assert DEFAULT_MIN_MEASURED_S == 3.0
    items = _plan(None, "matrix@phases.same_runtime=same_runtime_tiny")
    assert {sc.case.workload.min_measured_s for sc in items} == {3.0}
    assert {sc.case.workload.min_measured_s for sc in _plan(None)} == {6.0}  # the default phase measures 6 s
    assert {sc.case.workload.min_measured_s for sc in _plan("qwen7b") if sc.case.kind != "accuracy"} == {10.0}
    # a phase can override it; the stability phase counts exactly 100 requests
    assert {sc.case.workload.min_measured_s for sc in _plan("stability")
            if sc.case.phase.startswith("stability")} == {0.0}

    argv = case_argv(items[0], model_dir=Path("/m"), paths=CasePaths.of(tmp_path, "p", "s"), bench_command=None,
                     python="python")
    workload = load_case(argv[argv.index("--case") + 1]).workload
    assert workload is not None and workload.min_measured_s == 3.0


@pytest.mark.parametrize("experiment", ["qwen7b", "qwen1_5b"])
@pytest.mark.heavy  # measured 1.2 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_published_designs_end_with_the_published_accuracy_verification(experiment: str) -> None:
    """Baseline, (8,1), (8,2) on GSM8K + GPQA, every offload case with offload_backend=prefetch."""
    items = _plan(experiment)
    acc = [sc.case for sc in items if sc.case.phase == "accuracy"]
    assert [(c.label, c.implementation, c.group_size, c.num_in_group, c.backend) for c in acc] == [
        ("baseline", "baseline", 0, 0, "auto"), ("current_g8_n1", "current", 8, 1, "prefetch"),
        ("current_g8_n2", "current", 8, 2, "prefetch"), ("baseline", "baseline", 0, 0, "auto")]
    assert [sc.repeat for sc in items if sc.case.phase == "accuracy"] == [0, 0, 0, 1]  # baseline again, last
    assert {(c.kind, c.accuracy_tasks, c.accuracy_protocol, c.max_accuracy_drop) for c in acc} == {
        ("accuracy", ("gsm8k", "gpqa"), "qwen-chat-v1", 0.0)}
    assert items[-1].case.phase == "accuracy"  # after every performance phase


def test_accuracy_phases_keep_their_cases_and_a_zero_tolerance() -> None:
    for experiment, labels in (("reproduce", ["baseline", "current_g4_n1", "baseline"]),
                               ("accuracy", ["baseline", "current_g4_n1", "current_g2_n1", "baseline"])):
        acc = [sc.case for sc in _plan(experiment) if sc.case.kind == "accuracy"]
        assert [c.label for c in acc] == labels and {(c.backend, c.max_accuracy_drop) for c in acc} == {
            ("auto", 0.0)}


@pytest.mark.parametrize("value", ["-0.01", "1.5"])
def test_max_accuracy_drop_outside_zero_one_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"phases\.accuracy\.max_accuracy_drop={value}: must be a number in "
                                          r"\[0, 1\] \(fraction of accuracy\)"):
        _plan("accuracy", f"phases.accuracy.max_accuracy_drop={value}")


@pytest.mark.parametrize(("override", "needle"), [
    ("phases.accuracy.accuracy_protocol=qwen-chat-v2", "unknown accuracy protocol 'qwen-chat-v2'; registered: "),
    ("phases.accuracy.accuracy_tasks=[gsm8kk]", "unknown task 'gsm8kk' for protocol 'qwen-chat-v1'; expected one of"),
])
def test_accuracy_inputs_a_case_would_refuse_are_plan_errors(override: str, needle: str) -> None:
    """Refused at planning, so before a dry run prints the protocol and before a run directory exists."""
    with pytest.raises(PlanError, match="phase 'accuracy': " + ".*" + re.escape(needle)):
        _plan("accuracy", override)


@pytest.mark.parametrize("override", ["phases.accuracy.accuracy_limit=-3", "phases.accuracy.accuracy_limit=0"])
def test_an_accuracy_limit_below_one_row_is_a_config_error(override: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(override)}: must be a whole number >= 1$"):
        _plan("accuracy", override)


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1.0"), ("0", "0.0"), ("nan", "nan")])
def test_a_runtime_health_timeout_not_above_zero_is_a_config_error(value: str, shown: str) -> None:
    with pytest.raises(ConfigError, match=rf"^phases\.same_runtime\.runtime\.health_timeout_s={shown}: must be a "
                                          r"finite number > 0 \(s\)$"):
        _plan(None, f"phases.same_runtime.runtime.health_timeout_s={value}")
    assert _plan(None, "phases.same_runtime.runtime.health_timeout_s=0.5")


def test_an_expected_case_time_not_above_zero_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^phases\.same_runtime\.expected_case_s=-5\.0: must be a finite number > 0 "
                                          r"\(s\)$"):
        _plan(None, "phases.same_runtime.expected_case_s=-5")


def test_max_accuracy_drop_reaches_the_cases() -> None:
    assert {sc.case.max_accuracy_drop for sc in _plan("accuracy", "phases.accuracy.max_accuracy_drop=0.02")} == {0.02}


def test_dry_run_names_what_the_accuracy_verifier_holds_the_phase_to() -> None:
    from runners.orchestration.progress import schedule_settings

    cfg = compose_cfg("+experiment=qwen7b")
    lines = schedule_settings(plan(cfg), cfg)
    i = lines.index(next(ln for ln in lines if ln.startswith("phase accuracy:")))
    assert "offload_backend=prefetch" in lines[i]
    assert any(ln.startswith("  accuracy: tasks=gsm8k,gpqa protocol=qwen-chat-v1 ") and "max_accuracy_drop=0 " in ln
               for ln in lines[i:])


@pytest.mark.parametrize("experiment", [None, *sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml"))])
def test_the_experiment_override_a_hint_prints_composes_the_same_experiment(experiment: str | None) -> None:
    """``conf.schema.experiment_override`` (the identity gate's ``runners.pins`` hint): each experiment's own name
    gives back its ``+experiment=`` override, and the embedded default none (there is no ``default`` option)."""
    from conf.schema import experiment_override

    cfg = compose_real(*([f"+experiment={experiment}"] if experiment else []))
    assert experiment_override(cfg.experiment_name) == (f"+experiment={experiment}" if experiment else "")
