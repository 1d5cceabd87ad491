"""The bench kinds: ``throughput``, ``ttft`` and ``stability`` phases, whose cases run ``runners.incase.bench_one``.

What is modelled: ``BenchKind`` (spec: a ``CaseSpec`` of kind ``bench`` in ``records/<phase>/<stem>.case.json``;
argv ``[python, -m, <bench_module>, --case, PATH]`` or the run's ``bench_command`` prefix; end:
``runners.outcome.bench.finalize_bench`` -> one ``CaseRun`` line in ``<phase>-runs.jsonl``; live check: greedy
tokens against the phase's baselines, ``runners.outcome.live_checks.token_check``; progress: throughput, measured
window, what was offloaded, host contention) and its three kinds: ``THROUGHPUT`` (may run a speed control, sequential looks and in-process cases),
``TTFT`` and ``STABILITY`` (every measured round must produce a token).

What is deliberately not modelled: the checks (``runners.outcome.case_checks``), the bench process
(``runners.incase.bench_one``).
"""

from __future__ import annotations

from pathlib import Path

from results_schema.records.case import CaseSpec
from results_schema.records.models import BenchRecord, CaseRun
from runners.cases import LaunchSpec, ScheduledCase
from runners.incase.process_group import ProcessOutcome
from runners.kinds.base import CaseKind
from runners.launching.case_command import CaseCommands, case_workload, spec_fields
from runners.outcome.bench import finalize_bench, runs_name
from runners.outcome.case_checks import CheckFailed
from runners.outcome.finalized import Outcome
from runners.outcome.live_checks import LiveState, seed_bench, token_check
from runners.paths import CasePaths


class BenchKind(CaseKind):
    """A phase whose cases run ``runners.incase.bench_one`` and end in one ``CaseRun``."""

    bench = True

    def spec(self, sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, python: str) -> CaseSpec:
        c = sc.case
        return CaseSpec(kind="bench", workload=case_workload(c.workload), engine_validates=c.engine_validates,
                        in_process=c.in_process, **spec_fields(sc, model_dir=model_dir, paths=paths))

    def argv(self, sc: ScheduledCase, *, paths: CasePaths, python: str, commands: CaseCommands) -> tuple[str, ...]:
        prefix = list(commands.bench_command) if commands.bench_command else [python, "-m", commands.bench_module]
        return (*prefix, "--case", str(paths.case))

    def line_files(self, phase: str) -> tuple[tuple[str, type[CaseRun]], ...]:
        return ((runs_name(phase), CaseRun),)

    def line_key(self, record: CaseRun) -> tuple[str, int]:
        return (record.record.label, record.record.repeat)

    def check_record(self, record: BenchRecord) -> None:
        """The kind's own check of a record that passed ``runners.outcome.case_checks.check_record`` (none here).

        Raises:
            CheckFailed: the record does not show what the kind measures.
        """

    def finalize(self, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
        return finalize_bench(sc, outcome, run_dir=run_dir, log_path=Path(spec.log_path),
                              evidence_path=Path(spec.evidence_path), record_path=Path(spec.record_path),
                              command=tuple(spec.argv), record_check=self.check_record)

    def output_check(self, state: LiveState, outcome: Outcome) -> str | None:
        runs = outcome.records(CaseRun)
        return token_check(state, runs[0].record) if runs else None

    def seed(self, state: LiveState, run_dir: Path, phase: str) -> None:
        seed_bench(state, run_dir, phase)

    def progress(self, outcome: Outcome) -> str:
        status = "ok"
        for run in outcome.records(CaseRun):
            ev, rec = run.evidence, run.record
            status += (f" {rec.throughput_tok_s:.1f} tok/s over {rec.elapsed_s:.2f} s measured in "
                       f"{len(rec.rounds)} rounds (min {rec.workload.min_measured_s or 0:g} s), "
                       f"wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
            if outcome.note:  # e.g. the KV cache memory changed during the case
                status += f"; {outcome.note}"
            hl = rec.host_load
            if hl is not None and hl.contended:
                status += (f"; CONTENDED: {hl.foreign_cores:.2f} foreign cores, steal {hl.steal_fraction * 100:.1f}% "
                           "while it measured (verdicts resting on it are withheld)")
        return status


class Throughput(BenchKind):
    """Offline throughput rounds; a baseline may run the speed control (``step_delay_ms``); the phase may run
    group-sequential looks."""

    name = "throughput"
    speed_control = True
    sequential = True
    in_process = True


class Ttft(BenchKind):
    """Time to first token (``max_tokens=1`` proxy)."""

    name = "ttft"


class Stability(BenchKind):
    """Long runs: every measured round must produce output."""

    name = "stability"

    def line_files(self, phase: str) -> tuple[tuple[str, type[CaseRun]], ...]:
        return ((runs_name(phase), CaseRun),)

    def line_key(self, record: CaseRun) -> tuple[str, int]:
        return (record.record.label, record.record.repeat)

    def check_record(self, record: BenchRecord) -> None:
        empty = [r.index for r in record.rounds if r.output_tokens == 0]
        if empty:
            raise CheckFailed("invalid_record", f"stability: rounds {empty[:10]} produced no output token")


THROUGHPUT, TTFT, STABILITY = Throughput(), Ttft(), Stability()
