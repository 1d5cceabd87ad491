"""Close stage of a matrix run: last health gate and identity check, analysis, checksums, verdict.

What is modelled: the health gate after the last phase (a failure keeps and checksums the
evidence, exit 42), the identity check at the end, the CPU copy-bandwidth measurement, the
analysis (``analysis.report.summary``, ``analysis.serving.summary``, the accuracy verifier), ``SHA256SUMS``
(written only by a close whose every step completed: its presence is what makes a run finished), the summary
line, the exit code and the verdict line, printed last: a failed proof never ends "ok". A step that fails
(a full disk, a permission, any error of the analysis, report or checksums) ends the run in one line naming the
step, the file and the cause, exit ``EXIT_IO``; a resume redoes the close only, rewriting the incomplete
``summary/``.

What is deliberately not modelled: the statistics (``analysis``).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from conf.schema import Config
from runners.errors import (EXIT_ACCURACY, EXIT_CASE_FAILURES, EXIT_FORMAL_STOP, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_IO,
                            EXIT_OK, RunnerError)
from runners.orchestration.execute import RunState, Timings
from runners.paths import CONTROLLED_ENV, REPO_ROOT, new_run_id
from runners.orchestration.rundir import write_sha256sums
from runners.cases import ScheduledCase
from runners.kinds.registry import kind_of
from results_schema.records.choice import read_decisions
from results_schema.records.copy_bench import FILE_NAME as COPY_BENCH_FILE
from results_schema.codec.io import RecordError, read_json
from results_schema.records.validation import ValidationReport
from runners.errors import os_error_cause
from runners.orchestration.accuracy_phase import verify_accuracy
from runners.orchestration.resume import complete_run

if TYPE_CHECKING:
    from runners.identity.gates import GateObservation
    from runners.orchestration.accuracy_phase import AccuracyPhase
    from runners.orchestration.host_measures import CopyBenchRun


@dataclass
class Findings:
    """What the close stage found after the cases ran.

    Attributes:
        health_after: the health gate after the last phase failed (None: passed or not run).
        validation: ``summary/validation.json`` (None: the analysis did not run).
        serving_valid: False when the run has serving phases and their validation failed.
        accuracy_failed: accuracy phases whose verification failed.
        close_error: a step of the close failed (``close_step``): the step, the file and the cause; no
            ``SHA256SUMS`` was written.
        choice_stopped: a choose run whose choice stopped before predicting (its probe stayed contended): the
            ``stopped`` decision's line (``results_schema.records.choice``), printed last; None otherwise.
    """

    health_after: RunnerError | None = None
    close_error: str | None = None
    validation: Any = None
    serving_valid: bool = True
    accuracy_failed: list[str] = field(default_factory=list)
    choice_stopped: str | None = None


def copy_bench(cfg: Config, items: Sequence[ScheduledCase], run_dir: Path, model_dir: Path,
               base_env: Mapping[str, str], console: Any, run_copy_bench: CopyBenchRun) -> None:
    """CPU runs with offload cases of a bench kind (``runners.kinds.base.CaseKind.bench``: the cases whose
    ``BenchRecord`` the report's transfer-model fit reads): plain copy bandwidth
    (``runners.orchestration.copy_bench``) for that fit, measured in the environment of the first such case's
    runtime (a phase may set its own: thread count); ``run_copy_bench``: the bench
    (``runners.orchestration.host_measures.HostMeasures.run_copy_bench``).

    Accuracy and serving cases are left out: no fit reads them, and an accuracy phase's model
    (``accuracy_model``) is not the run's model, whose layer shapes the bench copies."""
    if (run_dir / COPY_BENCH_FILE).is_file():  # measured already (a choose run's probe)
        return
    offload = [sc for sc in items if sc.case.offload_requested and kind_of(sc.case).bench]
    rt = offload[0].case.runtime if offload else cfg.runtime
    if rt.device != "cpu" or not offload or cfg.bench_command:
        return
    env = {k: v for k, v in base_env.items() if k not in CONTROLLED_ENV}
    env.update({str(k): str(v) for k, v in rt.env.items()})
    env["PYTHONPATH"] = str(REPO_ROOT)
    if run_copy_bench(run_dir, model_dir, env, REPO_ROOT) is None:
        console.print("[yellow]offload_tools.bench copy measurement failed; the report has no copy bandwidth[/]")


def analyze(run_dir: Path, console: Any) -> tuple[Any, bool]:
    """Write ``summary/`` (Markdown, JSON, plots, report.html) and print the decision table, verdict last.

    Analysis errors are shown, not hidden; the full Markdown stays in ``summary/``.

    Returns:
        ``(validation, serving_valid)``: ``summary/validation.json`` as a ``ValidationReport``
        (None when the analysis stack is not installed: the run's verdict is then "not run"),
        and False when the run has serving phases and their validation failed (``analysis.serving.summary``).
    """
    try:
        from analysis.report.console import print_summary
        from analysis.report.summary import write_summary
    except ImportError as exc:
        console.print(f"[yellow]analysis unavailable ({exc}); run `python -m analysis report {run_dir}` later[/]")
        return None, True
    write_summary(run_dir)
    print_summary(run_dir / "summary", console)
    serving_valid = True
    if any(run_dir.glob("cases/*/*.serving-case.json")):
        from analysis.serving.summary import write_serving_summary

        md = write_serving_summary(run_dir)
        console.print(md, markup=False)
        serving_valid = md.startswith("serving: VALID")

    return read_json(run_dir / "summary" / "validation.json", ValidationReport), serving_valid


def refresh_html(run_dir: Path, console: Any) -> None:
    """Re-render ``summary/report.html`` once the accuracy verifier wrote its report (it runs after)."""
    try:
        from analysis.report.html import write_report_html
    except ImportError:
        return
    path = write_report_html(run_dir)
    console.print(f"report: {path}", markup=False)


def final_checks(cfg: Config, todo: Sequence[ScheduledCase], state: RunState, identity: GateObservation,
                 timings: Timings) -> Findings:
    """Health gate after the last phase (failure kept in ``Findings``), then the identity check at the end.

    Raises:
        RunnerError: (identity) something changed since the run started.
    """
    from runners.identity.gates import gather_identity, health_gate

    found = Findings(choice_stopped=choice_stop(state.run_dir))
    if todo and not state.stopped:  # published: the device is healthy after the last phase too
        try:
            health_gate(todo[-1].case.runtime, state.run_dir / "health" / f"after-last-phase-{new_run_id()}.txt")
        except RunnerError as exc:  # evidence is kept and checksummed; the run still fails (42)
            found.health_after = exc
    t = time.monotonic()
    gather_identity(cfg, identity.runtimes, when="at the end", previous=identity)
    timings.identity += time.monotonic() - t
    return found


def choice_stop(run_dir: Path) -> str | None:
    """The line of a choose run's ``stopped`` decision (``choose-decisions.jsonl``), None when there is none (or the
    file does not validate: the analysis's ``choice`` check names it)."""
    try:
        return next((d.note for d in read_decisions(run_dir) if d.stage == "stopped"), None)
    except ValueError:
        return None


def analyse_and_checksum(cfg: Config, items: Sequence[ScheduledCase], state: RunState, accuracy_phases: Sequence[AccuracyPhase],
                         found: Findings, timings: Timings, base_env: Mapping[str, str], console: Any,
                         run_copy_bench: CopyBenchRun) -> None:
    """Analysis (unless ``analyze=false`` or stopped), then ``SHA256SUMS``, written only when every step completed.

    An incomplete ``summary/`` left by an earlier close that failed (no ``SHA256SUMS``: never part of a finished
    run) is removed first and written anew. A step that fails (an ``OSError`` such as a full disk, or any error of
    the analysis, the accuracy verifier, the report or the checksums) ends the close: ``found.close_error`` names the
    step, the file and the cause (a traceback other than an ``OSError``'s goes to ``logs/close-error.txt`` where it
    can be written) and no ``SHA256SUMS`` is written, so a resume redoes the close.
    """

    run_dir = state.run_dir
    summary = run_dir / "summary"
    t = time.monotonic()
    try:
        if summary.exists():  # analyze=false on the resume too: no incomplete summary/ enters the checksums
            with close_step("analysis", summary):
                import shutil

                console.print("close: removing the incomplete summary/ of an earlier close that failed (no "
                              "SHA256SUMS: never part of a finished run); it is written anew", markup=False)
                shutil.rmtree(summary)
        if cfg.analyze and not state.stopped:
            with close_step("analysis", summary):
                t_bench = time.monotonic()
                copy_bench(cfg, items, run_dir, state.model_dir, base_env, console, run_copy_bench)
                t_bench = time.monotonic() - t_bench  # 0 when a choose run's probe measured it already
                timings.copy_bench += t_bench
                t += t_bench  # a measurement process, counted apart from the analysis
                found.validation, found.serving_valid = analyze(run_dir, console)
            if accuracy_phases:
                with close_step("accuracy verification", summary):
                    found.accuracy_failed = verify_accuracy(run_dir, accuracy_phases, console)
                with close_step("report", summary / "report.html"):
                    refresh_html(run_dir, console)
    except CloseStepError as exc:
        found.close_error = exc.text(run_dir)
        return
    finally:
        timings.analysis += time.monotonic() - t
    t = time.monotonic()
    try:
        with close_step("checksums", run_dir / "SHA256SUMS"):
            write_sha256sums(run_dir)
    except CloseStepError as exc:
        (run_dir / "SHA256SUMS").unlink(missing_ok=True)  # never a partial one: its presence means "finished"
        found.close_error = exc.text(run_dir)
    timings.checksums += time.monotonic() - t


class CloseStepError(Exception):
    """A step of the close stage failed: the step, the file it was writing and the cause, one line each."""

    def __init__(self, step: str, file: Path, cause: str, traceback_text: str | None) -> None:
        super().__init__(f"close ({step}): {file}: {cause}")
        self.step, self.file, self.cause, self.traceback_text = step, file, cause, traceback_text

    def text(self, run_dir: Path) -> str:
        """The one-line error (the traceback, when there is one, written to ``logs/close-error.txt`` first)."""
        where = ""
        if self.traceback_text is not None:
            from results_schema.codec.files import write_text_atomic

            log = run_dir / "logs" / "close-error.txt"
            try:
                write_text_atomic(log, self.traceback_text)
                where = f" (traceback: {log.relative_to(run_dir)})"
            except OSError as exc:
                where = f" (traceback not written: {exc.strerror or exc})"
        return f"{self}{where}"


@contextmanager
def close_step(step: str, file: Path) -> Iterator[None]:
    """Run one step of the close stage; any error it raises becomes a ``CloseStepError`` naming ``step``, the file
    (an ``OSError``'s own, else ``file``) and the cause.

    ``RunnerError`` (a gate's verdict, with its own exit code) and ``BaseException`` outside ``Exception``
    (an interrupt) pass through.
    """

    try:
        yield
    except RunnerError:
        raise
    except OSError as exc:
        where = Path(exc.filename) if exc.filename is not None else file
        raise CloseStepError(step, where, os_error_cause(exc), None) from None
    except Exception as exc:  # any error of the close: the run is not finished; named in one line, resumable
        import traceback

        raise CloseStepError(step, file, f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None


def close_failed_line(found: Findings, items: Sequence[ScheduledCase], run_dir: Path) -> str:
    """The last line of a run whose close failed: the step, file and cause, what is kept, how to finish it."""

    _, recorded = complete_run(run_dir, items)
    return (f"error: {found.close_error}; {recorded} of {len(items)} cases recorded and kept, no SHA256SUMS "
            f"(the run is not finished); once the cause is gone, `python -m runners.matrix resume={run_dir}` "
            f"redoes the close only; exit {EXIT_IO}")


def exit_code(state: RunState, found: Findings, console: Any) -> int:
    """The run's exit code (first matching reason), printing the reason where one is printed."""
    if found.close_error is not None:  # the run is not finished: no verdict of the evidence yet
        return EXIT_IO
    if found.health_after is not None:  # the health gate after the last phase failed: evidence kept and checksummed
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(str(found.health_after))} (after the last phase)")
        return found.health_after.exit_code
    if state.stopped:
        console.print("[bold red]formal run stopped at its first failure[/] (completed evidence kept)")
        return EXIT_FORMAL_STOP
    if state.unexpected:
        return EXIT_CASE_FAILURES
    if not found.serving_valid:
        console.print("[bold red]serving validation FAILED[/] (summary/serving-summary.md)")
        return EXIT_INVALID
    if found.accuracy_failed:
        console.print(f"[bold red]accuracy verification FAILED[/] for phase(s) {', '.join(found.accuracy_failed)}")
        return EXIT_ACCURACY
    if found.choice_stopped is not None or (found.validation is not None and not found.validation.valid):
        return EXIT_INVALID
    return EXIT_OK


def verdict_line(found: Findings, run_dir: Path) -> str:
    """The run's last line without the exit code: the validation verdict, never "ok" for a failed proof.

    A failed health gate after the last phase, a failed accuracy verification or a stopped choice comes first, so
    the line never starts with ``validation: VALID`` when the run failed for those reasons; a stopped choice whose
    validation fails only its ``choice`` check (the stop itself) is not repeated by the verdict.
    """
    failed = [] if found.choice_stopped is None else [found.choice_stopped]
    if found.health_after is not None:
        failed.append("FAILED: the health gate after the last phase failed")
    if found.accuracy_failed:
        failed.append(f"FAILED: accuracy verification of phase(s) {', '.join(found.accuracy_failed)}")
    if not found.serving_valid:
        verdict = "validation: INVALID: serving validation failed (summary/serving-summary.md)"
    elif found.validation is None:
        verdict = "validation: not run (analyze=false or stopped); run `python -m analysis validate " f"{run_dir}`"
    elif found.choice_stopped is not None and [c.name for c in found.validation.checks if not c.passed] == ["choice"]:
        verdict = "validation: INVALID: failing checks: choice (1: the stopped choice)"
    else:
        verdict = str(found.validation.verdict())
    return "; ".join([*failed, verdict])


def print_done(state: RunState, timings: Timings, console: Any) -> None:
    """The ``done:`` line (counts and where the runner's time went) and every unexpected outcome."""
    wall = time.monotonic() - timings.t_start
    differ = f"{len(state.token_mismatches)} with tokens differing from the baseline, " \
        if state.token_mismatches else ""
    n = max(1, state.successes + state.expected_failures + len(state.unexpected))
    over = wall - state.case_wall_s - timings.copy_bench - timings.model_build
    console.print(f"done: {state.successes} ok, {differ}{state.expected_failures} expected failure(s), "
                  f"{len(state.unexpected)} unexpected, runner wall {wall:.1f} s, case processes "
                  f"{state.case_wall_s:.1f} s, copy bench {timings.copy_bench:.1f} s, model build "
                  f"{timings.model_build:.1f} s (first run only), runner overhead {over:.1f} s "
                  f"= {over / n:.2f} s/case (identity {timings.identity:.1f} s, spawn+reap "
                  f"{timings.launch:.1f} s, finalize {state.finalize_s:.1f} s, cooldown "
                  f"{timings.cooldown:.1f} s, analysis {timings.analysis:.1f} s, checksums "
                  f"{timings.checksums:.1f} s); {state.run_dir}")
    for line in [*state.token_mismatches, *state.unexpected]:
        console.print(f"  [red]{line}[/]")


def interrupted_line(items: Sequence[ScheduledCase], run_dir: Path) -> str:
    """The last line of an interrupted run: its verdict (none yet: incomplete), how many cases are recorded, how to resume."""

    _, recorded = complete_run(run_dir, items)
    return (f"validation: INTERRUPTED: incomplete run, no verdict ({recorded} of {len(items)} cases recorded, "
            f"{len(items) - recorded} to run); resume with `python -m runners.matrix resume={run_dir}`; "
            f"exit {EXIT_INTERRUPTED}")


def recorded_verdict(run_dir: Path) -> str:
    """The verdict a finished run recorded (``summary/validation.json``), or that its validation did not run."""

    path = run_dir / "summary" / "validation.json"
    if not path.is_file():
        return f"validation: not run (analyze=false or stopped); run `python -m analysis validate {run_dir}`"
    try:
        return str(read_json(path, ValidationReport).verdict())
    except RecordError as exc:
        return f"validation: unreadable summary/validation.json ({exc}); run `python -m analysis validate {run_dir}`"
