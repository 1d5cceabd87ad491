"""An accuracy phase's own model (``accuracy_model``) and the negative-control fault (``fault``):
config -> plan -> case file / environment, refused where they cannot apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results_schema.records.case import CaseSpec
from results_schema.codec.io import read_json
from runners.orchestration.accuracy_phase import check_accuracy_inputs
from runners.kinds.registry import case_argv
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.errors import EXIT_IDENTITY, PlanError, RunnerError
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg
from tests.runners.test_plan import matrix, typed_expand

REPO = Path(__file__).resolve().parents[2]
TRAINED = "eval_models/tiny-answering-qwen2-l4-h128"


def test_reproduce_loads_the_trained_model_on_the_generated_sets_and_performance_keeps_the_tiny_model(
        tmp_path: Path) -> None:
    cfg = compose_cfg("+experiment=reproduce")
    acc = cfg.phases["accuracy"]
    assert (acc.accuracy_model, acc.accuracy_manifest) == (TRAINED, "eval_datasets/synthetic/manifest.json")
    assert cfg.model.source == "tiny"  # the performance phase's random-weight model
    items = plan(cfg)
    acc_case = next(s for s in items if s.case.kind == "accuracy" and s.case.implementation != "baseline")
    perf_case = next(s for s in items if s.case.kind != "accuracy")
    paths = CasePaths.of(tmp_path, acc_case.case.phase, acc_case.stem)
    argv = case_argv(acc_case, model_dir=Path("/run-model"), paths=paths, bench_command=None, python="py")
    assert read_json(argv[-1], CaseSpec).model == str(REPO / TRAINED)
    perf_paths = CasePaths.of(tmp_path, perf_case.case.phase, perf_case.stem)
    perf_argv = case_argv(perf_case, model_dir=Path("/run-model"), paths=perf_paths, bench_command=None, python="py")
    assert read_json(perf_argv[-1], CaseSpec).model == "/run-model"
    env = case_env(acc_case, run_dir=tmp_path, paths=paths, base_env={"OFFLOAD_FAULT": "zero_host_copy"})
    assert env["OFFLOAD_FAULT"] == ""  # never inherited: only a case's own fault reaches it
    (phase,) = check_accuracy_inputs(items)
    assert not phase.formal and dict(phase.entries) == {"gsm8k": "gsm8k-synthetic", "gpqa": "gpqa-synthetic"}


def test_negative_control_plans_baseline_and_one_faulty_case_with_the_fault_in_its_environment(tmp_path: Path) -> None:
    items = plan(compose_cfg("+experiment=negative_control"))
    assert [(s.case.label, s.case.fault) for s in items] == [
        ("baseline", None), ("fault_zero_host_copy_g4_n1", "zero_host_copy"), ("baseline", None)]  # baseline twice
    sc = items[1]
    env = case_env(sc, run_dir=tmp_path, paths=CasePaths.of(tmp_path, sc.case.phase, sc.stem), base_env={})
    assert (env["OFFLOAD_IMPL"], env["OFFLOAD_FAULT"]) == ("current", "zero_host_copy")


@pytest.mark.parametrize("case", [
    dict(implementation="baseline", fault="zero_host_copy"),
    dict(implementation="official", group_size=4, num_in_group=1, fault="zero_host_copy"),
])
def test_a_fault_needs_our_offloader_with_offload(case: dict) -> None:
    full = dict(label="bad", group_size=0, num_in_group=0, **case) if "group_size" not in case else dict(label="bad",
                                                                                                          **case)
    with pytest.raises(PlanError, match="fault 'zero_host_copy' corrupts this project's offloader"):
        typed_expand(matrix(baseline=False, points=[], cases=[full]))


def test_the_accuracy_model_sizes_the_phase_points(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    cfg = compose_cfg("+experiment=reproduce", f"phases.accuracy.accuracy_model={model}",
                      "phases.accuracy.points=[{g: 4, n: 1}]")
    with pytest.raises(PlanError, match="selects no layer of the 2-layer model"):
        plan(cfg)


def test_a_changed_accuracy_model_stops_the_run_before_any_process(tmp_path: Path) -> None:
    import shutil

    model = tmp_path / "m"
    shutil.copytree(REPO / TRAINED, model)
    (model / "config.json").chmod(0o644)
    with (model / "config.json").open("a") as f:
        f.write(" ")
    items = plan(compose_cfg("+experiment=reproduce", f"phases.accuracy.accuracy_model={model}"))
    with pytest.raises(RunnerError, match=r"accuracy_model=.*config.json: sha256 .* != SHA256SUMS entry") as err:
        check_accuracy_inputs(items)
    assert err.value.exit_code == EXIT_IDENTITY
