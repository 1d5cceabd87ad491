"""A case kind is one registered object (``runners.kinds``): a stand-in kind registered here, and nothing else
changed, plans, launches, finalizes into the one ``Outcome`` type and prints its progress line through the
runner's own functions, and a resume counts it done; and no runner module outside the registry dispatches on a
kind's name."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from conf.schema_matrix import CaseConfig, MatrixConfig
from results_schema.records.base import PhaseKind
from results_schema.codec.io import read_json
from runners.cases import LaunchSpec, PhaseCase, ScheduledCase
from runners.incase import REPO_ROOT
from runners.incase.process_group import ProcessOutcome
from runners.kinds import registry
from runners.kinds.base import CaseKind
from runners.launching.case_command import CaseCommands
from runners.orchestration.execute import RunState, launch_spec, on_done
from runners.orchestration.progress import Progress, schedule_settings
from runners.orchestration.rundir import completed_keys
from runners.outcome.finalized import Line, Outcome
from runners.paths import CasePaths
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg


class StandInSpec(BaseModel):
    """What a stand-in case process reads."""

    label: str
    repeat: int
    out: str


class StandInLine(BaseModel):
    """The stand-in's record line."""

    label: str
    repeat: int
    answer: int


class StandIn(CaseKind):
    """A kind that exists only in this test: one module (this class) plus its registry entry."""

    name = "standin"
    engine_workload = True

    def phase_fields(self, phase: str, matrix: MatrixConfig) -> dict[str, Any]:
        return dict(timed=False)

    def repeats(self, n: int, case: CaseConfig) -> int:
        return n + 1

    def spec(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str) -> StandInSpec:
        return StandInSpec(label=sc.case.label, repeat=sc.repeat, out=str(paths.out_dir / "answer.json"))

    def argv(self, sc: ScheduledCase, *, paths: CasePaths, python: str, commands: CaseCommands) -> tuple[str, ...]:
        return (python, "-m", "standin", "--case", str(paths.case))

    def explicit_command(self, commands: CaseCommands) -> None:
        return None

    def finalize(self, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
        paths = CasePaths.of(run_dir, sc.case.phase, sc.stem)
        answer = json.loads((paths.out_dir / "answer.json").read_text())["answer"]
        line = StandInLine(label=sc.case.label, repeat=sc.repeat, answer=answer)
        return Outcome(lines=(Line(f"{sc.case.phase}-standin.jsonl", line),), failure=None, expected=True)

    def line_files(self, phase: str) -> tuple[tuple[str, type[StandInLine]], ...]:
        return ((f"{phase}-standin.jsonl", StandInLine),)

    def progress(self, outcome: Outcome) -> str:
        return "ok answers " + ", ".join(str(ln.answer) for ln in outcome.records(StandInLine))

    def workload_line(self, c: PhaseCase) -> str:
        return "  workload: the stand-in's own"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    kind = StandIn()
    monkeypatch.setitem(registry.KINDS, kind.name, kind)
    return kind


def test_a_registered_stand_in_kind_runs_through_the_runner(standin: StandIn, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = compose_cfg()
    phase = next(iter(cfg.phases))
    cfg = dataclasses.replace(cfg, phases={phase: dataclasses.replace(cfg.phases[phase], kind="standin")})
    items = plan(cfg)  # the production expansion, with the stand-in's plan fields and repeats
    assert {sc.case.kind for sc in items} == {"standin"}
    assert all(not sc.case.timed for sc in items)
    assert max(sc.repeat for sc in items) + 1 == cfg.phases[phase].repeats + 1
    assert "  workload: the stand-in's own" in schedule_settings(items, cfg)

    sc = items[0]
    state = RunState(run_dir=tmp_path, model_dir=tmp_path / "model", python="py", bench_command=None, formal=True,
                     progress=Progress(1, live=False))
    spec = launch_spec(state, sc, {})
    paths = CasePaths.of(tmp_path, sc.case.phase, sc.stem)
    assert spec.argv[-3:] == ("standin", "--case", str(paths.case)) and spec.log_path == str(paths.log)
    assert read_json(paths.case, StandInSpec).label == sc.case.label  # the kind's spec, at its path

    paths.out_dir.mkdir(parents=True)  # what the stand-in's process would have written
    (paths.out_dir / "answer.json").write_text(json.dumps({"answer": 42}))
    assert on_done(state, sc, spec, ProcessOutcome(exit_code=0, signal=None, timed_out=False, wall_s=1.0, pid=None))
    lines = (tmp_path / f"{sc.case.phase}-standin.jsonl").read_text().splitlines()
    assert [StandInLine.model_validate_json(ln).answer for ln in lines] == [42]
    assert state.successes == 1 and not state.unexpected
    assert f"[1/1] {sc.case.phase}/{sc.stem}: ok answers 42 (1.0 s)" in capsys.readouterr().out
    assert completed_keys(tmp_path, items, tmp_path / "q") == {sc.key}  # a resume counts it done


def test_an_unknown_kind_is_named_with_the_registered_ones() -> None:
    with pytest.raises(ValueError, match="unknown case kind 'nope'; registered kinds: throughput, ttft"):
        registry.kind("nope")


def test_every_phase_kind_is_registered_once() -> None:
    assert list(registry.KINDS) == [k.value for k in PhaseKind]
    assert all(isinstance(k, CaseKind) and k.name == name for name, k in registry.KINDS.items())


def _kind_names(node: ast.AST) -> list[str]:
    """Phase kind names written as string constants directly in ``node`` (or its tuple / list / set)."""
    names = {k.value for k in PhaseKind}
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in items if isinstance(e, ast.Constant) and e.value in names]


def kind_dispatch(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each dispatch on a phase kind's name in ``source``: a comparison (``==``, ``!=``,
    ``in``, ``not in``, ``is``) with a kind name or a tuple of them, a ``match`` case on one, a dict keyed by one,
    a tuple / list / set of them (``BENCH_KINDS = ("throughput", ...)``, compared with elsewhere; not a type's
    ``Literal[...]``)."""
    found: list[tuple[int, str]] = []
    compared: set[int] = set()
    nodes = list(ast.walk(ast.parse(source)))
    for node in nodes:
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                compared.add(id(operand))
                found += [(node.lineno, f"comparison with {n!r}") for n in _kind_names(operand)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, f"match case {n!r}") for n in _kind_names(node.value)]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, f"dict key {n!r}") for k in node.keys if k is not None for n in _kind_names(k)]
        elif isinstance(node, ast.Subscript):  # a type, e.g. the placement kind Literal["performance", "accuracy"]
            compared.add(id(node.slice))
    for node in nodes:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in compared:
            found += [(node.lineno, f"collection of kind names {n!r}") for n in _kind_names(node)]
    return sorted(found)


def test_the_scan_finds_each_form_of_dispatch() -> None:
    src = ('if c.kind == "serving": pass\nx = c.kind in ("throughput", "ttft")\n'
           'match k:\n    case "accuracy": pass\nd = {"stability": 1}\nok = c.kind == "full"\n'
           'BENCH = ("throughput", "ttft")\nlabel = "serving"\nt: Literal["accuracy", "other"]\n')
    assert kind_dispatch(src) == [(1, "comparison with 'serving'"), (2, "comparison with 'throughput'"),
                                  (2, "comparison with 'ttft'"), (4, "match case 'accuracy'"),
                                  (5, "dict key 'stability'"), (7, "collection of kind names 'throughput'"),
                                  (7, "collection of kind names 'ttft'")]


def test_no_runner_module_outside_the_registry_dispatches_on_a_kind_name() -> None:
    """Inside ``runners/`` outside ``kinds/`` (the registry and the kinds) and ``incase/`` (the case process,
    which cannot import the runner)."""
    root = REPO_ROOT / "runners"
    found = [f"{p.relative_to(REPO_ROOT)}:{line}: {what}" for p in sorted(root.rglob("*.py"))
             if not p.is_relative_to(root / "kinds") and not p.is_relative_to(root / "incase")
             for line, what in kind_dispatch(p.read_text())]
    assert found == []
