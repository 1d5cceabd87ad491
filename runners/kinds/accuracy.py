"""The accuracy kind: a phase whose cases evaluate tasks under a registered protocol (``runners.incase.accuracy``).

What is modelled: ``ACCURACY``: its plan fields (tasks, protocol, dataset manifest, ``max_accuracy_drop``, its
own model; checked before any process starts; its cases are not timed), its baseline's minimum process count
(``ACCURACY_BASELINE_RUNS``), its model's layer count (``accuracy_model``), its spec (a ``CaseSpec`` of kind
``accuracy``) and argv (``[python, -m, runners.incase.accuracy, run, --case, PATH]`` or the run's
``accuracy_command``), its end (``runners.outcome.accuracy.finalize_accuracy`` -> one ``AccuracyCaseRun``
line), its live output check (``runners.outcome.live_checks.accuracy_output_check``), its progress line (each
task's score) and its dry-run lines (the protocol's engine and sampling; what the verifier holds it to).

What is deliberately not modelled: the evaluation (``runners.incase.accuracy``), the dataset checks before
launch and the verifier at the end (``runners.orchestration.accuracy_phase``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from conf.schema_matrix import CaseConfig, MatrixConfig
from results_schema.records.accuracy import AccuracyCaseRun
from results_schema.records.case import AccuracyCaseSettings, CaseSpec
from results_schema.records.protocols import UnknownProtocolError, check_protocol, protocol_spec
from runners.cases import LaunchSpec, PhaseCase, ScheduledCase
from runners.errors import PlanError
from runners.incase.process_group import ProcessOutcome
from runners.kinds.base import CaseKind
from runners.launching.case_command import CaseCommands, spec_fields
from runners.models.accuracy_model import accuracy_model_dir, phase_layers
from runners.outcome.accuracy import accuracy_cases_name, finalize_accuracy
from runners.outcome.finalized import Outcome
from runners.outcome.live_checks import LiveState, accuracy_output_check, seed_accuracy
from runners.paths import CasePaths, accuracy_manifest_path

ACCURACY_BASELINE_RUNS = 2
"""An accuracy phase's baseline runs at least this often (repeat-major: the runs bracket the offload cases), so
the verifier compares them with each other before it blames an offloader (``analysis.accuracy.baselines``)."""


def _tasks(phase: str, matrix: MatrixConfig) -> tuple[str, ...]:
    """The phase's tasks, after checking them against its registered protocol (raises ``PlanError`` naming the
    setting; the numbers' ranges, ``max_accuracy_drop`` and ``accuracy_limit``, are ``conf.ranges``')."""
    tasks = tuple(str(t) for t in matrix.accuracy_tasks)
    if not tasks:
        raise PlanError(f"phase {phase!r}: an accuracy phase needs accuracy_tasks (e.g. [gsm8k])")
    key = "accuracy_protocol"  # the registered protocol and its tasks: refused here, before a dry run prints them
    try:
        check_protocol(str(matrix.accuracy_protocol))
        key = "accuracy_tasks"
        for task in tasks:
            protocol_spec(str(matrix.accuracy_protocol), task)
    except UnknownProtocolError as exc:
        raise PlanError(f"phase {phase!r}: {key}: {exc}") from None
    return tasks


def _manifest_state(configured: str) -> str:
    """``present`` or ``missing: a real run stops before any process`` (a dry run does not check the files)."""
    return "present" if accuracy_manifest_path(configured).is_file() else "missing: a real run stops before any process"


class Accuracy(CaseKind):
    """Outputs under a protocol, not timings; the protocol fixes the engine, not the workload."""

    name = "accuracy"
    engine_workload = False

    def phase_fields(self, phase: str, matrix: MatrixConfig) -> dict[str, Any]:
        return dict(accuracy_tasks=_tasks(phase, matrix), accuracy_manifest=matrix.accuracy_manifest,
                    accuracy_protocol=matrix.accuracy_protocol, max_accuracy_drop=matrix.max_accuracy_drop,
                    accuracy_model=matrix.accuracy_model or None, timed=False)

    def repeats(self, n: int, case: CaseConfig) -> int:
        return max(n, ACCURACY_BASELINE_RUNS) if case.implementation == "baseline" else n

    def num_layers(self, phase: str, matrix: MatrixConfig, run_layers: int) -> int:
        return phase_layers(phase, matrix, run_layers)

    def spec(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str) -> CaseSpec:
        c = sc.case
        if c.accuracy_model:  # the phase's own model (verified before launch)
            model_dir = accuracy_model_dir(c.accuracy_model)
        acc = AccuracyCaseSettings(tasks=tuple(c.accuracy_tasks),
                                   manifest=str(accuracy_manifest_path(str(c.accuracy_manifest))),
                                   protocol=str(c.accuracy_protocol), limit=c.accuracy_limit, out_dir=str(paths.out_dir))
        return CaseSpec(kind="accuracy", accuracy=acc, **spec_fields(sc, model_dir=model_dir, paths=paths))

    def argv(self, sc: ScheduledCase, *, paths: CasePaths, python: str, commands: CaseCommands) -> tuple[str, ...]:
        prefix = list(commands.accuracy_command) if commands.accuracy_command else [python, "-m",
                                                                                    "runners.incase.accuracy"]
        return (*prefix, "run", "--case", str(paths.case))

    def explicit_command(self, commands: CaseCommands) -> Sequence[str] | None:
        return commands.accuracy_command

    def line_files(self, phase: str) -> tuple[tuple[str, type[AccuracyCaseRun]], ...]:
        return ((accuracy_cases_name(phase), AccuracyCaseRun),)

    def finalize(self, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
        return finalize_accuracy(sc, spec, outcome, run_dir)

    def output_check(self, state: LiveState, outcome: Outcome) -> str | None:
        lines = outcome.records(AccuracyCaseRun)
        return accuracy_output_check(state, lines[0]) if lines else None

    def seed(self, state: LiveState, run_dir: Path, phase: str) -> None:
        seed_accuracy(state, run_dir, phase)

    def progress(self, outcome: Outcome) -> str:
        status = "ok"
        for line in outcome.records(AccuracyCaseRun):
            status += " " + ", ".join(f"{o.task} {o.correct}/{o.num_examples} ({o.mode})" for o in line.results)
        return status

    def workload_line(self, c: PhaseCase) -> str:
        """The protocol's engine and sampling (the workload's prompts, dtype and lengths do not apply)."""
        specs = [protocol_spec(str(c.accuracy_protocol), t) for t in c.accuracy_tasks]
        engine = specs[0].engine.model_dump(exclude_none=True) if specs else {}
        sampling = ", ".join(f"{s.task}: temperature={s.sampling.temperature:g} max_tokens={s.sampling.max_tokens}"
                             for s in specs)
        return (f"  workload: the protocol's, not the bench workload: engine {engine or '{}'} (other engine "
                f"arguments: vLLM's defaults); {sampling}")

    def settings_lines(self, c: PhaseCase) -> list[str]:
        """What the accuracy verifier holds the phase to."""
        return [f"  accuracy: tasks={','.join(c.accuracy_tasks)} protocol={c.accuracy_protocol} "
                f"manifest={c.accuracy_manifest} ({_manifest_state(str(c.accuracy_manifest))}) "
                f"limit={c.accuracy_limit} max_accuracy_drop={c.max_accuracy_drop:g} (fraction); "
                "backends checked against plan.json"]


ACCURACY = Accuracy()
