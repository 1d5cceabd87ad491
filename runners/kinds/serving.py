"""The serving kind: a phase whose cases each run a vLLM OpenAI-compatible server under vLLM's serving benchmark.

What is modelled: ``SERVING``: its plan fields (the phase's ``serving`` settings, checked across values before any
process starts by ``validate_serving``: a rate given, each rate once, naming the field, the value and what is
allowed; each number's range is ``conf.ranges``'), its spec and argv (``runners.launching.serving_case``), its files (the
bench files plus ``serving_spec``, ``serving_record``, ``server_log`` of ``runners.paths.CasePaths``), its end
(``runners.outcome.serving.finalize_serving`` -> one ``ServingRun`` line per rate), its progress line (TPOT P50
per rate, what was offloaded, contended rates) and its dry-run lines (the serving load, the rates).

What is deliberately not modelled: the measurement (``runners.incase.serving``), the outputs compared under
load (``analysis.serving.outputs``: at the end, not live).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conf.schema_matrix import MatrixConfig, ServingConfig
from results_schema.records.serving import ServingRun
from results_schema.records.serving_spec import ServingCaseSpec
from runners.cases import LaunchSpec, PhaseCase, ScheduledCase
from runners.errors import PlanError
from runners.incase.process_group import ProcessOutcome
from runners.kinds.base import CaseKind
from runners.launching.case_command import CaseCommands
from runners.launching.serving_case import build_spec, serving_argv, spec_rates
from runners.outcome.finalized import Outcome
from runners.outcome.serving import finalize_serving, serving_name
from runners.paths import CasePaths


def validate_serving(phase: str, serving: ServingConfig) -> None:
    """Check a serving phase's settings across values before any process starts: at least one request rate,
    each rate once, a ``server_command`` that is null or non-empty. Each number's own range (rates > 0 or
    ``.inf``, SLO limits, attainment, counts, timeouts) is ``conf.ranges``' (``runners.planning.plan`` checks it
    first).

    Raises:
        ValueError: naming ``phases.<phase>.serving.<field>``, its value and what is allowed.
    """
    where = f"phases.{phase}.serving"
    rates = list(serving.request_rates)
    if not rates:
        raise ValueError(f"{where}.request_rates is empty: give at least one rate in req/s (> 0; .inf = all at t=0)")
    if len(set(spec_rates(rates))) != len(rates):
        raise ValueError(f"{where}.request_rates {rates} repeats a rate: each rate once")
    cmd = serving.server_command
    if cmd is not None and not cmd:
        raise ValueError(f"{where}.server_command = {cmd!r}: must be a non-empty list of strings or null")


class Serving(CaseKind):
    """One API server per case, vLLM's serving benchmark over the phase's request rates; the phase may run
    group-sequential looks (``runners.orchestration.serving_sequential``)."""

    name = "serving"
    speed_control = True
    sequential = True
    floor_looks = True

    def phase_fields(self, phase: str, matrix: MatrixConfig) -> dict[str, Any]:
        try:
            validate_serving(phase, matrix.serving)
        except ValueError as exc:
            raise PlanError(f"phase {phase!r}: {exc}") from None
        return dict(serving=matrix.serving)

    def spec(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str) -> ServingCaseSpec:
        return build_spec(sc, model_dir=model_dir, run_dir=paths.run_dir, python=python)

    def spec_path(self, paths: CasePaths) -> Path:
        return paths.serving_spec

    def argv(self, sc: ScheduledCase, *, paths: CasePaths, python: str, commands: CaseCommands) -> tuple[str, ...]:
        return serving_argv(paths, python, commands.serving_command)

    def explicit_command(self, commands: CaseCommands) -> Sequence[str] | None:
        return commands.serving_command

    def line_files(self, phase: str) -> tuple[tuple[str, type[ServingRun]], ...]:
        return ((serving_name(phase), ServingRun),)

    def files(self, paths: CasePaths) -> tuple[Path, ...]:
        return (*super().files(paths), paths.serving_spec, paths.serving_record, paths.server_log)

    def finalize(self, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
        return finalize_serving(sc, spec, outcome, run_dir)

    def progress(self, outcome: Outcome) -> str:
        status = "ok"
        lines = outcome.records(ServingRun)
        if not lines:
            return status
        ev = lines[0].evidence
        status += (" " + ", ".join(f"{ln.rate.request_rate_rps or 'inf'} req/s: TPOT P50 {ln.rate.tpot.p50_ms:.1f} ms "
                                   f"(n {ln.rate.completed})" for ln in lines)
                   + f"; wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
        hot = [ln for ln in lines if ln.rate.host_load is not None and ln.rate.host_load.contended]
        if hot:
            status += "; CONTENDED at " + ", ".join(
                f"{ln.rate.request_rate_rps or 'inf'} req/s ({ln.rate.host_load.foreign_cores:.2f} foreign cores)"
                for ln in hot if ln.rate.host_load is not None) + " (verdicts resting on them are withheld)"
        return status

    def workload_line(self, c: PhaseCase) -> str:
        """The engine options passed to the API server and the serving benchmark's load."""
        return super().workload_line(c) + (
            "\n  serving load: `vllm bench serve`, random dataset of num_prompts x input_len / max_tokens, "
            "ignore_eos (exact token counts), temperature; the workload's prompt_mode, prompts_vary_per_round "
            "and ignore_eos do not apply; its engine options go to the API server")

    def rounds_cell(self, c: PhaseCase) -> str:
        assert c.serving is not None  # a serving case has its phase's settings (phase_fields)
        return "serving: " + ", ".join(f"{r:g}" for r in c.serving.request_rates) + " req/s"


SERVING = Serving()
