"""Fail-closed rules of the published runner, through real fake-bench processes + finalize.

* On accelerators exactly one ``Available KV cache memory`` line per case log.
* Evidence whose offloader never ran ``post_init`` is rejected.
* Each record's workload and model equal the plan's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from results_schema.records.case import CaseSpec
from results_schema.codec.io import read_json, write_json
from results_schema.records.models import CaseRun
from runners.outcome.bench import finalize_bench
from runners.incase.process_group import run_case_process
from runners.kinds.registry import case_argv
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.planning.plan import plan
from tests.runners.helpers import FAKE_BENCH, compose_cfg

REPO = Path(__file__).resolve().parents[2]


def _run_one(tmp_path: Path, device: str, mode: str, label: str = "current_g4_n1", model_arg: str | None = None):
    items = plan(compose_cfg(f"runtime.device={device}"))
    sc = next(s for s in items if s.case.label == label)
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    for p in (paths.log, paths.evidence, paths.record):
        p.parent.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    argv = case_argv(sc, model_dir=model, paths=paths, bench_command=[sys.executable, str(FAKE_BENCH)],
                     python=sys.executable)
    env = case_env(sc, run_dir=tmp_path, paths=paths, base_env={"PATH": "/usr/bin:/bin"})
    env["FAKE_BEHAVIOUR"] = f"{label}={mode}"
    out = run_case_process(argv, env, paths.log, REPO, timeout_s=120, kill_grace_s=2)
    if model_arg is not None:  # the plan's case.json names another model than the one the record reports
        write_json(paths.case, read_json(paths.case, CaseSpec).model_copy(update={"model": model_arg}))
    command = tuple(argv)
    return finalize_bench(sc, out, run_dir=tmp_path, log_path=paths.log, evidence_path=paths.evidence,
                    record_path=paths.record, command=command)


@pytest.mark.parametrize("device", ["npu", "cuda"])
@pytest.mark.heavy  # measured 1.2 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_accelerator_case_with_one_kv_line_is_a_run(tmp_path, device):
    fin = _run_one(tmp_path, device, "ok")
    assert fin.records(CaseRun) and fin.records(CaseRun)[0].kv_cache.kv_cache_gib == 12.34


@pytest.mark.parametrize("mode, count", [("nokv", 0), ("dupkv", 2)])
@pytest.mark.heavy  # measured 2.5 s over 2 cases in the fast tier (its budget is 2 minutes)
def test_accelerator_case_without_exactly_one_kv_line_fails(tmp_path, mode, count):
    fin = _run_one(tmp_path, "npu", mode)
    assert not fin.lines and fin.failure.failure_type == "kv_cache_lines"
    assert f"{count} 'Available KV cache memory' lines" in fin.failure.error_message


def test_cpu_case_needs_no_kv_memory_line(tmp_path):
    fin = _run_one(tmp_path, "cpu", "nokv")
    assert fin.records(CaseRun) and fin.records(CaseRun)[0].kv_cache.kv_cache_gib is None


def test_offloader_without_post_init_is_rejected(tmp_path):
    fin = _run_one(tmp_path, "cpu", "nopostinit")
    assert fin.failure is not None and fin.failure.failure_type == "no_offload_evidence"
    assert "never ran post_init" in fin.failure.error_message


def test_record_workload_must_equal_the_plan(tmp_path):
    fin = _run_one(tmp_path, "cpu", "otherworkload")
    assert fin.failure is not None and fin.failure.failure_type == "invalid_record"
    assert "'dtype': ('float32', 'bfloat16')" in fin.failure.error_message


def test_record_model_must_equal_the_plan(tmp_path):
    fin = _run_one(tmp_path, "cpu", "ok", model_arg="/models/other")
    assert fin.failure is not None and "record model" in fin.failure.error_message


def test_a_plan_workload_that_does_not_validate_fails_closed():
    """The plan-equality rule never passes silently: a planned workload that cannot be built is a failure."""
    from types import SimpleNamespace

    from results_schema.records.models import BenchRecord
    from runners.outcome.case_checks import CheckFailed, check_plan_match

    record = read_json(REPO / "tests/fixtures/synthetic_run/records/same_runtime/baseline-r0.json", BenchRecord)
    check_plan_match(SimpleNamespace(workload=record.workload.model_dump()), record)  # equal: passes
    with pytest.raises(CheckFailed, match="does not validate"):
        check_plan_match(SimpleNamespace(workload={**record.workload.model_dump(), "num_prompts": 0}), record)
