"""What one case kind supplies to the runner: ``CaseKind``, the base of every kind.

What is modelled: a kind's traits (``bench``, ``speed_control``, ``sequential``, ``engine_workload``), its plan fields
(``phase_fields``, ``repeats``, ``num_layers``: read by ``runners.planning.plan``), the spec its process reads
and its argv (``spec``, ``spec_path``, ``argv``, ``explicit_command``; ``launch`` writes the spec and returns
the argv), the files its process writes (``files``: names from ``runners.paths.CasePaths``, the one naming
scheme), the JSONL files its success lines go to (``line_files``, ``line_key``: what a resume counts as done),
its end (``finalize``, one ``runners.outcome.finalized.Outcome`` for every kind), its live output
check against the phase's baselines (``output_check``, ``seed`` on resume) and its progress line
(``progress``; the dry run's ``workload_line``, ``rounds_cell``, ``settings_lines``). The defaults are a bench
case's where one is natural; ``spec``, ``argv`` and ``finalize`` every kind supplies.

What is deliberately not modelled: which kinds exist (``runners.kinds.registry``), the shared machinery the
kinds call (``runners.launching``, ``runners.outcome``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel

from conf.schema_matrix import CaseConfig, MatrixConfig
from conf.typed import plain
from results_schema.codec.io import write_json
from runners.cases import LaunchSpec, PhaseCase, ScheduledCase
from runners.incase.process_group import ProcessOutcome
from runners.launching.case_command import CaseCommands
from runners.outcome.finalized import Outcome
from runners.outcome.live_checks import LiveState
from runners.paths import CasePaths


class CaseKind:
    """One phase kind: subclass it in one module, give it a ``name`` (a ``PhaseKind`` value), register an
    instance in ``runners.kinds.registry.KINDS``.

    Attributes:
        name: the phase kind (``MatrixConfig.kind``, ``PhaseCase.kind``).
        bench: its cases run ``runners.incase.bench_one`` (``engine_validates`` is allowed) and their
            ``BenchRecord`` feeds the transfer-model fit (so a CPU run measures the copy bench for them).
        speed_control: a baseline of its phases may run a speed control (``step_delay_ms``, ``offload.controls``).
        sequential: its phases may run group-sequential looks (``MatrixConfig.sequential``,
            ``runners.orchestration.sequential``).
        floor_looks: its looks judge every (rate, metric) cell of each offload label against the two floor
            baselines of each block (``runners.orchestration.serving_sequential``, ``analysis.serving.sequential``)
            rather than one value per process against the baseline's.
        in_process: its cases may run in-process A/B rounds (``CaseConfig.in_process``, ``offload.inprocess``).
        engine_workload: the phase's workload is the engine's (dtype among vLLM's, input_len + max_tokens <=
            max_model_len, ``runners.planning.workload_check``); False where a protocol fixes the engine.
    """

    name: str = ""
    bench: bool = False
    speed_control: bool = False
    sequential: bool = False
    floor_looks: bool = False
    in_process: bool = False
    engine_workload: bool = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaseKind) and type(other) is type(self) and other.name == self.name

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- plan (runners.planning.plan)

    def phase_fields(self, phase: str, matrix: MatrixConfig) -> dict[str, Any]:
        """The ``PhaseCase`` fields this kind sets for every case of the phase, its settings checked first.

        Raises:
            runners.errors.PlanError: a setting of the phase is invalid (naming it, its value and what is allowed).
        """
        return {}

    def repeats(self, n: int, case: CaseConfig) -> int:
        """Process count of one case given the configured ``n`` (an accuracy baseline runs at least twice)."""
        return n

    def num_layers(self, phase: str, matrix: MatrixConfig, run_layers: int) -> int:
        """Decoder layers of the model the phase's cases load (default: the run's model's, ``run_layers``)."""
        return run_layers

    # -- launch (runners.orchestration.execute.launch_spec)

    def spec(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str) -> BaseModel:
        """The spec the case process reads (written to ``spec_path(paths)``)."""
        raise NotImplementedError(f"case kind {self.name!r} has no spec")

    def spec_path(self, paths: CasePaths) -> Path:
        """Where the spec is written (default ``paths.case``, ``records/<phase>/<stem>.case.json``)."""
        return paths.case

    def argv(self, sc: ScheduledCase, *, paths: CasePaths, python: str, commands: CaseCommands) -> tuple[str, ...]:
        """The argv of the case process (``python``: the case runtime's interpreter)."""
        raise NotImplementedError(f"case kind {self.name!r} has no argv")

    def explicit_command(self, commands: CaseCommands) -> Sequence[str] | None:
        """The run's explicit command for this kind (runs as given, not inside the runtime's prefix), or None."""
        return commands.bench_command

    def launch(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str,
               commands: CaseCommands) -> tuple[str, ...]:
        """Write the case's spec and return the argv of its process."""
        write_json(self.spec_path(paths), self.spec(sc, model_dir=model_dir, paths=paths, python=python))
        return self.argv(sc, paths=paths, python=python, commands=commands)

    def line_files(self, phase: str) -> tuple[tuple[str, type[BaseModel]], ...]:
        """The JSONL files (relative to the run directory) its success lines go to, each with its record type: a
        resume counts a case with a line there as done."""
        return ()

    def line_key(self, record: Any) -> tuple[str, int]:
        """``(label, repeat)`` of one of its success lines."""
        return (record.label, record.repeat)

    def files(self, paths: CasePaths) -> tuple[Path, ...]:
        """The files and folders a case process of this kind writes (a resume quarantines those of unrecorded
        cases): log, evidence sidecar, record and ``out_dir``."""
        return (paths.log, paths.evidence, paths.record, paths.out_dir)

    # -- end (runners.orchestration.execute.on_done)

    def finalize(self, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
        """The ``Outcome`` of a finished case process: its lines (paths relative to ``run_dir``) or its failure."""
        raise NotImplementedError(f"case kind {self.name!r} has no end")

    def output_check(self, state: LiveState, outcome: Outcome) -> str | None:
        """Live check of an expected success's outputs against the phase's baselines so far (``None``: nothing
        to say); a mismatch is also appended to ``state.token_mismatches``."""
        return None

    def seed(self, state: LiveState, run_dir: Path, phase: str) -> None:
        """On resume: the phase's baselines recorded before the interruption, into ``state``."""

    def progress(self, outcome: Outcome) -> str:
        """The status of an expected success in its progress line (``[k/n] phase/label-rR: <status> ...``)."""
        return "ok"

    # -- dry run (runners.orchestration.progress)

    def workload_line(self, c: PhaseCase) -> str:
        """The phase's workload as its cases really run it (default: the bench workload)."""
        return "  workload: " + " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                                         for k, v in sorted(plain(c.workload).items()))

    def rounds_cell(self, c: PhaseCase) -> str:
        """The schedule table's ``rounds`` cell (default: the workload's measured rounds)."""
        return str(c.workload.measured_rounds)

    def settings_lines(self, c: PhaseCase) -> list[str]:
        """More dry-run lines about what the phase's cases are held to (default none)."""
        return []
