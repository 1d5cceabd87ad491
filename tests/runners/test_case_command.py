"""case.json: the runner writes one typed case file per process and the case reads it back; one
validation of an offload setting, one label format, one implementation registry."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from offload.selection import case_label, check_offload_setting
from results_schema.records.case import CaseSpec
from results_schema.codec.io import read_json
from results_schema.records.base import IMPLEMENTATIONS, Implementation
from runners.incase.case_input import checked_offload
from runners.kinds.registry import case_argv
from runners.paths import CasePaths
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg


def test_case_argv_writes_the_case_file_next_to_the_record(tmp_path: Path) -> None:
    items = plan(compose_cfg())
    sc = next(s for s in items if s.case.label == "current_g4_n1")
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    argv = case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py")
    assert argv == ("py", "-m", "runners.incase.bench_one", "--case", str(paths.record.with_name(f"{sc.stem}.case.json")))
    case = read_json(argv[-1], CaseSpec)
    assert (case.kind, case.phase, case.label, case.implementation, case.repeat, case.model, case.record) == (
        "bench", sc.case.phase, "current_g4_n1", "current", 0, "/m", str(paths.record))
    assert (case.offload.offload_group_size, case.offload.offload_num_in_group) == (4, 1)
    assert case.workload is not None and case.workload.num_prompts == sc.case.workload.num_prompts
    fake = case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=[sys.executable, "fake.py"], python="py")
    assert fake == (sys.executable, "fake.py", "--case", argv[-1])


def test_serving_case_argv_reads_its_spec_and_takes_the_runs_serving_command(tmp_path: Path) -> None:
    """A serving case runs ``python -m runners.incase.serving`` on its spec, or the run's ``serving_command`` prefix
    (tests: ``tests/runners/fake_serving.py``), which also runs as given, outside the runtime's prefix."""
    from results_schema.records.serving_spec import ServingCaseSpec
    from runners.kinds.registry import kind_of
    from runners.launching.case_command import CaseCommands

    sc = next(s for s in plan(compose_cfg("+experiment=serving")) if s.case.phase == "serving")
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    tail = ("--case", str(paths.serving_spec), "--run-dir", str(tmp_path))
    argv = case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py")
    assert argv == ("py", "-m", "runners.incase.serving", *tail)
    assert read_json(paths.serving_spec, ServingCaseSpec).label == sc.case.label
    fake = case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=["bench"], python="py",
                     serving_command=[sys.executable, "fake_serving.py"])
    assert fake == (sys.executable, "fake_serving.py", *tail)  # bench_command is not serving's
    assert kind_of(sc.case).explicit_command(CaseCommands(serving_command=["s"], bench_command=["b"])) == ["s"]
    assert kind_of(sc.case).explicit_command(CaseCommands(bench_command=["b"])) is None


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_accuracy_case_file(tmp_path: Path) -> None:
    items = plan(compose_cfg("+experiment=accuracy"))
    sc = items[1]
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    argv = case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py",
                     accuracy_command=["acc"])
    assert argv == ("acc", "run", "--case", str(paths.case))
    case = read_json(paths.case, CaseSpec)
    assert case.kind == "accuracy" and case.workload is None and case.accuracy is not None
    assert case.accuracy.tasks == ("gsm8k", "gpqa") and case.accuracy.protocol == "qwen-chat-v1"
    assert case.accuracy.out_dir == str(tmp_path / "records" / "accuracy" / sc.stem)
    assert checked_offload(case).offload_group_size == 4


def test_accuracy_case_file_carries_the_phase_backend(tmp_path: Path) -> None:
    """A phase's offload_backend (published: prefetch) reaches every offload accuracy case."""
    items = plan(compose_cfg("+experiment=accuracy", "+phases.accuracy.offload_backend=prefetch"))
    backends = {}
    for sc in items:
        paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
        case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py", accuracy_command=["acc"])
        case = read_json(paths.case, CaseSpec)
        backends[case.label] = checked_offload(case).offload_backend
    assert backends == {"baseline": "auto", "current_g4_n1": "prefetch", "current_g2_n1": "prefetch"}


def test_an_expected_failure_reaches_the_case_process(tmp_path: Path) -> None:
    """smoke's invalid_g2_n3 (N > G) is written as planned; the case process refuses it (exit 2)."""
    sc = next(s for s in plan(compose_cfg("+experiment=smoke")) if s.case.label == "invalid_g2_n3")
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    case_argv(sc, model_dir=Path("/m"), paths=paths, bench_command=None, python="py")
    with pytest.raises(ValueError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        checked_offload(read_json(paths.case, CaseSpec))


@pytest.mark.parametrize("args, message", [
    (("baseline", 4, 1), "implementation baseline needs offload_group_size 0 (got 4)"),
    (("current", 0, 0), "implementation current needs offload_group_size > 0 and offload_num_in_group > 0"),
    (("current", 2, 3), "offload_num_in_group (3) must be <= offload_group_size (2)"),
    (("current", 4, 1, 0), "offload_prefetch_step (0) must be >= 1"),
    (("magic", 4, 1), "implementation 'magic' must be one of ('baseline', 'current', 'official', 'sync', 'overlay')"),
])
def test_one_validation_of_an_offload_setting(args, message) -> None:
    with pytest.raises(ValueError) as exc:
        check_offload_setting(*args)
    assert message in str(exc.value)
    check_offload_setting("baseline", 0, 0)
    check_offload_setting("sync", 4, 1, 2, "prefetch")


def test_one_label_format() -> None:
    assert case_label("baseline", 0, 0) == "baseline"
    assert case_label("current", 4, 1, 2) == "current_g4_n1_p2"
    assert case_label("current", 4, 1, 1, ("mlp",), "uva") == "current_g4_n1_params-mlp_uva"
    assert case_label("current", 4, 1, 2, style="point") == "(4,1,k2)"
    assert case_label("current", 4, 1, style="point") == "(4,1)"
    assert case_label("baseline", 0, 0, style="point") == "baseline"
    with pytest.raises(ValueError, match="label style 'x'"):
        case_label("current", 4, 1, style="x")


def test_one_implementation_registry() -> None:
    from typing import Any

    from runners.incase.accuracy.cli import build_parser

    assert IMPLEMENTATIONS == tuple(m.value for m in Implementation)
    parser: Any = build_parser()  # argparse's private sub-parser table is untyped
    run = next(a for a in parser._subparsers._group_actions[0].choices["run"]._actions  # noqa: SLF001
               if a.dest == "implementation")
    assert tuple(run.choices) == IMPLEMENTATIONS
