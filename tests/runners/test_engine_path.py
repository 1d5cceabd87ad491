"""The engine path: a case with ``engine_validates`` gives its offload setting to vLLM's engine.

Unit tests of ``runners.incase.engine_path``, the plan and case file, the judgement of real fake-bench
processes, and (marked ``engine``) the smoke experiment's two invalid cases on the real vLLM CPU engine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, model_validator

from results_schema.records.case import CaseSpec, RequestedOffload
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.case_outcome import CaseFailure
from runners.incase.bench_one import _specs
from runners.kinds.registry import case_argv
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.incase.engine_path import ACCEPTED_INVALID, REJECTED, EngineAcceptedInvalid, build, engine_outcome, raised_in
from runners.errors import PlanError
from runners.outcome.bench import finalize_bench
from runners.incase.process_group import run_case_process
from runners.planning.plan import plan
from tests.runners.helpers import RUNNER, FAKE_BENCH, compose_cfg

REPO = Path(__file__).resolve().parents[2]
SMOKE = ("+experiment=smoke",)


class _Config(BaseModel):
    g: int
    n: int

    @model_validator(mode="after")
    def _check(self) -> "_Config":
        if self.n > self.g:
            raise ValueError(f"offload_num_in_group ({self.n}) must be <= offload_group_size ({self.g})")
        return self


def _smoke_case(label: str = "engine_invalid_g2_n3", *extra: str):
    return next(s for s in plan(compose_cfg(*SMOKE, *extra)) if s.case.label == label)


def _expect(label: str = "engine_invalid_g2_n3") -> str:
    expect = _smoke_case(label).case.expect_error
    assert expect is not None
    return expect


def test_raised_in_names_the_innermost_frame_outside_pydantic() -> None:
    try:
        json.loads("{")
    except ValueError as exc:
        assert raised_in(exc.__traceback__)[0] == "json"
    try:
        _Config(g=2, n=3)
    except ValueError as exc:  # pydantic's frames are skipped: the caller is this module
        component, where = raised_in(exc.__traceback__)
        assert component == "tests" and where.startswith("tests.runners.test_engine_path:")
    assert raised_in(None) == ("unknown", "")


def test_build_prints_the_rejection_and_reraises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = read_json(_case_file(tmp_path), CaseSpec)
    with pytest.raises(ValueError, match="must be <= offload_group_size"):
        build(lambda **kw: _Config(**kw), {"g": 2, "n": 3}, case)
    err = capsys.readouterr().err
    outcome = engine_outcome(err)
    assert outcome is not None and outcome.failure_type == "engine_rejected"
    assert outcome.message.startswith("engine rejected the offload setting (component tests, raised in tests.")
    assert "pydantic_core._pydantic_core.ValidationError: 1 validation error for _Config | Value error" in outcome.message
    info = json.loads(err.split(REJECTED, 1)[1].splitlines()[0])
    assert info["project_check"] == "offload_num_in_group (3) must be <= offload_group_size (2)"


def test_build_reports_an_engine_that_accepts_the_invalid_setting(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    case = read_json(_case_file(tmp_path), CaseSpec)
    with pytest.raises(EngineAcceptedInvalid, match=r"offload_num_in_group \(3\) must be <="):
        build(lambda **_: object(), {}, case)
    err = capsys.readouterr().err
    assert ACCEPTED_INVALID in err
    outcome = engine_outcome(err)
    assert outcome is not None and outcome.failure_type == "engine_accepted_invalid"
    valid = case.model_copy(update={"offload": RequestedOffload(offload_group_size=4, offload_num_in_group=1)})
    assert build(lambda **kw: kw, {"x": 1}, valid) == {"x": 1}
    assert engine_outcome("Traceback\nRuntimeError: boom\n") is None


def _case_file(tmp_path: Path, label: str = "engine_invalid_g2_n3") -> Path:
    sc = _smoke_case(label)
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py")
    return paths.case


def test_the_plan_carries_the_switch_to_the_case_file_and_skips_the_pre_check(tmp_path: Path) -> None:
    case = read_json(_case_file(tmp_path), CaseSpec)
    assert case.engine_validates and case.implementation == "official"
    offload, _ = _specs(case)  # no ValueError: the engine validates
    assert isinstance(offload, RequestedOffload) and offload.offload_num_in_group == 3
    plain = _case_file(tmp_path / "p", "invalid_g2_n3")
    assert "engine_validates" not in plain.read_text()  # absent when false: old case files keep their bytes
    with pytest.raises(ValueError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        _specs(read_json(plain, CaseSpec))


def test_engine_validates_is_refused_outside_bench_phases() -> None:
    with pytest.raises(PlanError, match="engine_validates is a bench-case switch"):
        plan(compose_cfg("+experiment=accuracy", "+phases.accuracy.cases=[{implementation: current, group_size: 2, "
                         "num_in_group: 3, engine_validates: true, expect_error: x}]"))


def test_smoke_expectation_matches_vllms_rejection_only() -> None:
    expect = _expect()
    vllm = ("engine rejected the offload setting (component vllm, raised in vllm.engine.arg_utils:2806 "
            "create_engine_config): pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "OffloadConfig | Value error, offload_num_in_group (3) must be <= offload_group_size (2) [type=value_error]")
    assert re.search(expect, vllm)
    ours = vllm.replace("component vllm", "component offload").replace("vllm.engine.arg_utils", "offload.selection")
    for other in (ours, "exited with code 1; root cause RuntimeError: Engine core initialization failed",
                  "ValueError: offload_num_in_group (3) must be <= offload_group_size (2)"):
        assert not re.search(expect, other), other


def _fake_engine_case(tmp_path: Path, mode: str):
    sc = _smoke_case()
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    for p in (paths.log, paths.evidence, paths.record):
        p.parent.mkdir(parents=True, exist_ok=True)
    argv = case_argv(sc, model_dir=tmp_path, paths=paths, bench_command=[sys.executable, str(FAKE_BENCH)],
                     python=sys.executable)
    env = case_env(sc, run_dir=tmp_path, paths=paths, base_env={"PATH": "/usr/bin:/bin"})
    env["FAKE_BEHAVIOUR"] = f"{sc.case.label}={mode}"
    out = run_case_process(argv, env, paths.log, REPO, timeout_s=120, kill_grace_s=2)
    return finalize_bench(sc, out, run_dir=tmp_path, log_path=paths.log, evidence_path=paths.evidence,
                    record_path=paths.record, command=tuple(argv))


@pytest.mark.parametrize("mode, failure_type, expected, says", [
    ("ok", "engine_rejected", True, "component vllm, raised in vllm.engine.arg_utils"),
    ("engine_accepts", "engine_accepted_invalid", False, "the engine accepted an offload setting the project's check "
                                                         "refuses (offload_num_in_group (3) must be <="),
    ("engine_crash", "engine_rejected", False, "component __main__"),
    ("factory_rejects", "engine_rejected", False, "component offload, raised in offload.selection"),
])
@pytest.mark.heavy  # measured 2.1 s over 4 cases in the fast tier (its budget is 2 minutes)
def test_only_vllms_own_rejection_is_the_expected_failure(tmp_path: Path, mode: str, failure_type: str,
                                                          expected: bool, says: str) -> None:
    fin = _fake_engine_case(tmp_path, mode)
    assert not fin.lines and fin.failure is not None
    assert (fin.failure.failure_type, fin.expected) == (failure_type, expected), fin.failure.error_message
    assert says in fin.failure.error_message and fin.failure.exit_code == 1


@pytest.mark.engine
def test_smoke_invalid_cases_on_the_real_vllm_cpu_engine(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Both invalid cases of the smoke experiment, real processes: the pre-check (no vLLM import) and vLLM 0.32's
    own rejection of N > G (its OffloadConfig validation in the front end; no engine core, no offloader factory)."""
    proc = subprocess.run([*RUNNER, *SMOKE, "phases.smoke.baseline=false",
                           "phases.smoke.points=[]", f"results_root={tmp_path}", "run_id=eng", "analyze=false",
                           "progress=false"], cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    run_dir = tmp_path / "smoke" / "eng"
    pre, engine = read_jsonl(run_dir / "smoke-failures.jsonl", CaseFailure)
    assert (pre.label, pre.failure_type, pre.exit_code, pre.error_type) == ("invalid_g2_n3", "nonzero_exit", 2,
                                                                            "ValueError")
    pre_log = (run_dir / pre.log_path).read_text()
    assert "non-default args" not in pre_log and "Traceback" not in pre_log  # refused before vLLM was imported
    assert (engine.label, engine.failure_type, engine.exit_code, engine.error_type) == (
        "engine_invalid_g2_n3", "engine_rejected", 1, "ValidationError")
    assert re.search(_expect(), engine.error_message), engine.error_message
    assert "component vllm, raised in vllm.engine.arg_utils:" in engine.error_message
    log = (run_dir / engine.log_path).read_text()
    assert "'offload_group_size': 2, 'offload_num_in_group': 3" in log  # the setting reached vLLM's engine args
    assert "EngineCore" not in log and "offload/factory.py" not in log and "offload.prefetch" not in log
