"""Close stage of a matrix run: last health gate and identity check, analysis, checksums, verdict.

What is modelled: the health gate after the last phase (a failure keeps and checksums the
evidence, exit 42), the identity check at the end, the CPU copy-bandwidth measurement, the
analysis (``analysis.report.summary``, ``analysis.serving.summary``, the accuracy verifier), ``SHA256SUMS`` (even
when the analysis raises), the summary line, the exit code and the verdict line, printed last:
a failed proof never ends "ok".

What is deliberately not modelled: the statistics (``analysis``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from conf.schema import Config
from runners.errors import (EXIT_ACCURACY, EXIT_CASE_FAILURES, EXIT_FORMAL_STOP, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK,
                            RunnerError)
from runners.orchestration.execute import RunState, Timings
from runners.paths import CONTROLLED_ENV, REPO_ROOT, new_run_id
from runners.orchestration.rundir import write_sha256sums
from runners.planning.cases import ScheduledCase
from runners.planning.plan import BENCH_KINDS
from results_schema.records.copy_bench import FILE_NAME as COPY_BENCH_FILE

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
    """

    health_after: RunnerError | None = None
    validation: Any = None
    serving_valid: bool = True
    accuracy_failed: list[str] = field(default_factory=list)


def copy_bench(cfg: Config, items: Sequence[ScheduledCase], run_dir: Path, model_dir: Path,
               base_env: Mapping[str, str], console: Any, run_copy_bench: CopyBenchRun) -> None:
    """CPU runs with offload cases of a bench kind (``runners.planning.plan.BENCH_KINDS``: the cases whose
    ``BenchRecord`` the report's transfer-model fit reads): plain copy bandwidth
    (``runners.orchestration.copy_bench``) for that fit, measured in the environment of the first such case's
    runtime (a phase may set its own: thread count); ``run_copy_bench``: the bench
    (``runners.orchestration.host_measures.HostMeasures.run_copy_bench``).

    Accuracy and serving cases are left out: no fit reads them, and an accuracy phase's model
    (``accuracy_model``) is not the run's model, whose layer shapes the bench copies."""
    if (run_dir / COPY_BENCH_FILE).is_file():  # measured already (a choose run's probe)
        return
    offload = [sc for sc in items if sc.case.offload_requested and sc.case.kind in BENCH_KINDS]
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
    from results_schema.records.io import read_json
    from results_schema.records.validation import ValidationReport

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

    found = Findings()
    if todo and not state.stopped:  # published: the device is healthy after the last phase too
        try:
            health_gate(todo[-1].case.runtime, state.run_dir / "health" / f"after-last-phase-{new_run_id()}.txt")
        except RunnerError as exc:  # evidence is kept and checksummed; the run still fails (42)
            found.health_after = exc
    t = time.monotonic()
    gather_identity(cfg, identity.runtimes, when="at the end", previous=identity)
    timings.identity += time.monotonic() - t
    return found


def analyse_and_checksum(cfg: Config, items: Sequence[ScheduledCase], state: RunState, accuracy_phases: Sequence[AccuracyPhase],
                         found: Findings, timings: Timings, base_env: Mapping[str, str], console: Any,
                         run_copy_bench: CopyBenchRun) -> None:
    """Analysis (unless ``analyze=false`` or stopped), then ``SHA256SUMS`` even if the analysis raises."""
    from runners.orchestration.accuracy_phase import verify_accuracy

    run_dir = state.run_dir
    t = time.monotonic()
    try:
        if cfg.analyze and not state.stopped:
            t_bench = time.monotonic()
            copy_bench(cfg, items, run_dir, state.model_dir, base_env, console, run_copy_bench)
            t_bench = time.monotonic() - t_bench  # 0 when a choose run's probe measured it already
            timings.copy_bench += t_bench
            t += t_bench  # a measurement process, counted apart from the analysis
            found.validation, found.serving_valid = analyze(run_dir, console)
            if accuracy_phases:
                found.accuracy_failed = verify_accuracy(run_dir, accuracy_phases, console)
                refresh_html(run_dir, console)
    finally:  # the run's evidence is complete: checksum it even if the analysis raises
        timings.analysis += time.monotonic() - t
        t = time.monotonic()
        write_sha256sums(run_dir)
        timings.checksums += time.monotonic() - t


def exit_code(state: RunState, found: Findings, console: Any) -> int:
    """The run's exit code (first matching reason), printing the reason where one is printed."""
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
    if found.validation is not None and not found.validation.valid:
        return EXIT_INVALID
    return EXIT_OK


def verdict_line(found: Findings, run_dir: Path) -> str:
    """The run's last line without the exit code: the validation verdict, never "ok" for a failed proof.

    A failed health gate after the last phase or a failed accuracy verification comes first, so
    the line never starts with ``validation: VALID`` when the run failed for those reasons.
    """
    failed = []
    if found.health_after is not None:
        failed.append("FAILED: the health gate after the last phase failed")
    if found.accuracy_failed:
        failed.append(f"FAILED: accuracy verification of phase(s) {', '.join(found.accuracy_failed)}")
    if not found.serving_valid:
        verdict = "validation: INVALID: serving validation failed (summary/serving-summary.md)"
    elif found.validation is None:
        verdict = "validation: not run (analyze=false or stopped); run `python -m analysis validate " f"{run_dir}`"
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
    from runners.orchestration.resume import complete_run

    _, recorded = complete_run(run_dir, items)
    return (f"validation: INTERRUPTED: incomplete run, no verdict ({recorded} of {len(items)} cases recorded, "
            f"{len(items) - recorded} to run); resume with `python -m runners.matrix resume={run_dir}`; "
            f"exit {EXIT_INTERRUPTED}")


def recorded_verdict(run_dir: Path) -> str:
    """The verdict a finished run recorded (``summary/validation.json``), or that its validation did not run."""
    from results_schema.records.io import RecordError, read_json
    from results_schema.records.validation import ValidationReport

    path = run_dir / "summary" / "validation.json"
    if not path.is_file():
        return f"validation: not run (analyze=false or stopped); run `python -m analysis validate {run_dir}`"
    try:
        return str(read_json(path, ValidationReport).verdict())
    except RecordError as exc:
        return f"validation: unreadable summary/validation.json ({exc}); run `python -m analysis validate {run_dir}`"
