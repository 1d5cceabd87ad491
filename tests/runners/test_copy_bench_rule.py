"""Which runs measure the copy bench (``runners.orchestration.close.copy_bench``), on the real plans of composed
configs: a CPU run with offload cases that record throughput (a bench kind, ``runners.kinds.base.CaseKind.bench``)
does, in the first such case's runtime environment;
an accuracy-only run does not (no throughput is fitted, and its accuracy model is not the run's model, whose
layer shapes the bench would copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.orchestration.close import copy_bench
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg


class _Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str) -> None:
        self.lines.append(text)


def _measured(*overrides: str) -> tuple[list[dict[str, Any]], list[str]]:
    cfg = compose_cfg(*overrides)
    assert cfg.runtime.env["OMP_NUM_THREADS"] == "2"  # the run's own runtime: never the one measured below
    calls: list[dict[str, Any]] = []

    def bench(run_dir: Path, model_dir: Path, env: Any, cwd: Path) -> dict | None:
        calls.append({"model_dir": model_dir, "env": dict(env)})
        return None  # a failed bench: the console says so

    console = _Console()
    copy_bench(cfg, plan(cfg), Path("/nonexistent-run"), Path("/models/run-model"), {"HOME": "/h"}, console, bench)
    return calls, console.lines


def test_a_cpu_run_measures_in_the_runtime_of_its_first_throughput_offload_case() -> None:
    """The accuracy phase runs first with its own runtime (3 threads), the throughput phase with its own (1 thread),
    the run's runtime has 2: the bench takes the throughput case's environment, neither of the others."""
    calls, lines = _measured("phases.same_runtime.points=[{g: 4, n: 1}]", "+runtime@phases.same_runtime.runtime=cpu",
                             '++phases.same_runtime.runtime.env.OMP_NUM_THREADS="1"',
                             "+matrix@phases.accuracy=accuracy_tiny", "phases.accuracy.order=-1",
                             "+runtime@phases.accuracy.runtime=cpu", '++phases.accuracy.runtime.env.OMP_NUM_THREADS="3"')
    (call,) = calls
    assert call["model_dir"] == Path("/models/run-model")
    assert call["env"]["OMP_NUM_THREADS"] == "1" and call["env"]["HOME"] == "/h"
    assert lines == ["[yellow]offload_tools.bench copy measurement failed; the report has no copy bandwidth[/]"]


def test_an_accuracy_only_run_with_offload_cases_measures_nothing() -> None:
    cfg_overrides = ("~matrix@phases.same_runtime", "+matrix@phases.accuracy=accuracy_tiny")
    assert any(sc.case.offload_requested for sc in plan(compose_cfg(*cfg_overrides)))  # the rule, not an empty plan
    calls, lines = _measured(*cfg_overrides)
    assert calls == [] and lines == []
