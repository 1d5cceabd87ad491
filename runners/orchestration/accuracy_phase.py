"""Accuracy phases of a matrix run: inputs checked before launch, completion lines, the verifier.

What is modelled: the pre-launch check of every accuracy phase's dataset manifest and files
(``check_accuracy_inputs``; formal mode only when every dataset is ``kind: full`` and the phase
has no ``accuracy_limit``), the completion line of a finished accuracy case
(``finalize_accuracy`` -> ``AccuracyCaseRun`` or ``CaseFailure``), the resume check that
completed cases used the same manifest, and the end-of-run verifier (``analysis.accuracy.verifier``).

What is deliberately not modelled: running an accuracy case (``runners.incase.accuracy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from runners.models.accuracy_model import check_accuracy_model
from runners.errors import EXIT_CONFIG, EXIT_IDENTITY, RunnerError
from runners.paths import REPO_ROOT, accuracy_manifest_path

if TYPE_CHECKING:
    from runners.incase.process_group import ProcessOutcome
    from runners.launching.executor_base import LaunchSpec
    from runners.planning.plan import PhaseCase, ScheduledCase



def accuracy_cases_name(phase: str) -> str:
    """File of an accuracy phase's completion lines (``AccuracyCaseRun``)."""
    return f"{phase}-accuracy-cases.jsonl"


@dataclass(frozen=True)
class AccuracyPhase:
    """What the pre-launch check learnt about one accuracy phase (used again by the end-of-run verifier).

    Attributes:
        phase: phase name.
        manifest: absolute dataset manifest path.
        entries: manifest entry name per task.
        formal: every dataset is ``kind: full`` and no ``accuracy_limit``: the verifier runs in formal mode.
        verify_limit: ``--limit`` for the verifier (None = formal mode).
        max_accuracy_drop: tolerance of the verifier's drop rule (fraction of accuracy; the phase's config).
    """

    phase: str
    manifest: Path
    entries: tuple[tuple[str, str], ...]
    formal: bool
    verify_limit: int | None
    max_accuracy_drop: float = 0.0


def _check_phase(phase: str, c: PhaseCase) -> AccuracyPhase:
    """Manifest and dataset files of one accuracy phase (first case ``c``; its protocol and tasks were checked
    when it was planned, ``runners.planning.plan``).

    Raises:
        RunnerError: (config) naming the phase, the manifest path and what is wrong.
    """
    from runners.incase.accuracy.datasets import DatasetError, load_manifest, select_entry, verify_file

    manifest = accuracy_manifest_path(str(c.accuracy_manifest))
    where = f"config: accuracy phase {phase!r}: accuracy_manifest={c.accuracy_manifest!r}"
    if not manifest.is_file():
        raise RunnerError(f"{where}: dataset manifest {manifest} does not exist (relative paths are resolved "
                          f"against the repository root {REPO_ROOT}; materialize full datasets with "
                          "`python -m runners.incase.accuracy materialize`)", EXIT_CONFIG)
    try:
        m = load_manifest(manifest)
        entries = []
        for task in c.accuracy_tasks:
            entry = select_entry(m, task)
            verify_file(manifest, entry)
            entries.append(entry)
    except DatasetError as exc:
        raise RunnerError(f"{where}: {exc}", EXIT_CONFIG) from None
    check_accuracy_model(phase, c.accuracy_model)
    formal = c.accuracy_limit is None and all(e.kind == "full" for e in entries)
    if formal:
        limit = None
    else:
        limit = int(c.accuracy_limit) if c.accuracy_limit is not None else max(e.rows for e in entries)
    return AccuracyPhase(phase=phase, manifest=manifest, entries=tuple((e.task, e.name) for e in entries),
                         formal=formal, verify_limit=limit, max_accuracy_drop=float(c.max_accuracy_drop))


def check_accuracy_inputs(items: Sequence[Any]) -> list[AccuracyPhase]:
    """Check every accuracy phase's dataset manifest and files before any process starts.

    The manifest must exist and validate, name exactly one entry for each task of the
    phase, and every file must be present with the declared SHA-256 and row count.

    Raises:
        RunnerError: (config) naming the phase, the manifest path and what is wrong.
    """
    seen: dict[str, Any] = {}
    for sc in items:
        if sc.case.kind == "accuracy" and sc.case.phase not in seen:
            seen[sc.case.phase] = sc.case
    return [_check_phase(phase, c) for phase, c in seen.items()]


def check_resumed_manifests(run_dir: Path, phases: Sequence[AccuracyPhase]) -> None:
    """Resume: completed accuracy cases must have used the dataset manifest the run uses now.

    Raises:
        RunnerError: (identity) naming the phase, the case and the manifest hashes.
    """
    from results_schema.records.accuracy import AccuracyCaseRun
    from results_schema.records.files import file_sha256
    from results_schema.records.io import read_jsonl

    for p in phases:
        path = run_dir / accuracy_cases_name(p.phase)
        if not path.is_file():
            continue
        now = file_sha256(p.manifest)
        for line in read_jsonl(path, AccuracyCaseRun):
            if line.dataset_manifest_sha256 != now or Path(line.dataset_manifest_path) != p.manifest:
                raise RunnerError(
                    f"resume: accuracy phase {p.phase!r} case {line.label!r} r{line.repeat} used dataset manifest "
                    f"{line.dataset_manifest_path} (sha256 {line.dataset_manifest_sha256}); the run now has "
                    f"{p.manifest} (sha256 {now})", EXIT_IDENTITY)


def _task_outcomes(c: PhaseCase, results: Sequence[Path], run_dir: Path) -> list[Any]:
    """``AccuracyTaskOutcome`` per task from its result file.

    Raises:
        ValueError: a result file does not validate or is for another case.
    """
    from results_schema.records.accuracy import AccuracyResult, AccuracyTaskOutcome
    from results_schema.records.files import file_sha256
    from results_schema.records.io import read_json

    outcomes = []
    for result in results:
        r = read_json(result, AccuracyResult)
        if r.label != c.label or r.implementation != c.implementation:
            raise ValueError(f"{result.name} is for case {r.label!r} ({r.implementation}), expected "
                             f"{c.label!r} ({c.implementation})")
        outcomes.append(AccuracyTaskOutcome(
            task=r.task, mode=r.mode, protocol_name=r.protocol_name, protocol_sha256=r.protocol_sha256,
            result_path=result.relative_to(run_dir).as_posix(),
            result_sha256=file_sha256(result), examples_sha256=r.examples_sha256,
            num_examples=r.num_examples, correct=r.correct, unparsable=r.unparsable, accuracy=r.accuracy))
    return outcomes


def _case_run(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, results: Sequence[Path], run_dir: Path) -> Any:
    """The ``AccuracyCaseRun`` completion line of a case whose results all exist.

    Raises:
        ValueError, OSError: a result file is unreadable, invalid or for another case.
    """
    from results_schema.records.accuracy import AccuracyCaseRun
    from results_schema.records.files import file_sha256
    from results_schema.records.models import OffloadSetting

    c = sc.case
    outcomes = _task_outcomes(c, results, run_dir)
    manifest = accuracy_manifest_path(str(c.accuracy_manifest))
    offload = (OffloadSetting(offload_group_size=0, offload_num_in_group=0) if c.implementation == "baseline"
               else OffloadSetting(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                                   offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params),
                                   offload_backend=c.backend))
    ev = Path(spec.evidence_path)
    return AccuracyCaseRun(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, offload=offload,
        tasks=tuple(o.task for o in outcomes), results=tuple(outcomes), limit=c.accuracy_limit,
        dataset_manifest_path=str(manifest), dataset_manifest_sha256=file_sha256(manifest),
        process_wall_s=outcome.wall_s, log_path=str(Path(spec.log_path).relative_to(run_dir)),
        evidence_path=str(ev.relative_to(run_dir)) if ev.is_file() else None, command=tuple(spec.argv))


def finalize_accuracy(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> tuple[Any, Any]:
    """Accuracy case: success = exit 0 and a validating ``<label>.<task>.result.json`` per task.

    Returns:
        ``(Finalized, AccuracyCaseRun | None)``: the completion line on success, else a failure.
    """
    from results_schema.records.case_outcome import CaseFailure, FailureType
    from runners.outcome.case_log import root_cause, tail
    from runners.outcome.finalized import Finalized

    c = sc.case
    log_path = Path(spec.log_path)
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    out_dir = Path(spec.record_path).parent / Path(spec.record_path).stem
    results = [out_dir / f"{c.label}.{task}.result.json" for task in c.accuracy_tasks]
    missing = [p.name for p in results if not p.is_file()]
    if outcome.exit_code == 0 and not outcome.timed_out and not missing:
        try:
            line = _case_run(sc, spec, outcome, results, run_dir)
            return Finalized(run=None, failure=None, expected=c.expect_error is None), line
        except (ValueError, OSError) as exc:
            msg = f"accuracy result does not validate: {exc}"
    else:
        msg = ("timeout" if outcome.timed_out else f"exit {outcome.exit_code} signal {outcome.signal}, "
               f"missing results {missing}")
    et, em = root_cause(log_text)
    ftype: FailureType = "timeout" if outcome.timed_out else ("signal" if outcome.signal else
                                                 ("nonzero_exit" if outcome.exit_code else "no_result"))
    f = CaseFailure(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
                    failure_type=ftype, exit_code=outcome.exit_code, signal=outcome.signal, error_type=et,
                    error_message=f"case {c.phase}/{c.label} r{sc.repeat}: {msg}" + (f"; {et}: {em}" if et else ""),
                    log_tail=tail(log_text), log_path=str(log_path.relative_to(run_dir)), duration_s=outcome.wall_s)
    return Finalized(run=None, failure=f, expected=False), None


def verify_accuracy(run_dir: Path, phases: Sequence[AccuracyPhase], console: Any) -> list[str]:
    """Run the accuracy verifier over each accuracy phase; report in ``summary/``; return failed phases.

    One accuracy phase writes ``summary/accuracy-verification.{json,md,csv}``; several write
    ``summary/accuracy-<phase>/``. The verdict and the mode (formal / LIMITED) are printed.
    """
    try:
        from analysis.accuracy.verifier import render_markdown, verify, write_report
    except ImportError as exc:
        console.print(f"[yellow]accuracy verifier unavailable ({exc}); run `python -m analysis accuracy-verify "
                      f"{run_dir}/records/<phase>` later[/]")
        return [p.phase for p in phases]
    failed = []
    for p in phases:
        report_dir = run_dir / "summary" if len(phases) == 1 else run_dir / "summary" / f"accuracy-{p.phase}"
        try:
            report = verify(run_dir / "records" / p.phase, limit=p.verify_limit, manifest=p.manifest,
                            max_accuracy_drop=p.max_accuracy_drop)
        except (ValueError, OSError) as exc:  # RecordError is a ValueError: an unreadable result file
            console.print(f"accuracy {p.phase}: FAILED (unreadable input: {exc})", markup=False)
            failed.append(p.phase)
            continue
        json_path, _ = write_report(report_dir, report)
        console.print(render_markdown(report), markup=False)
        verdict = "PASSED" if report.passed else "FAILED"
        console.print(f"accuracy {p.phase}: {verdict} ({report.mode_note}); report "
                      f"{json_path.relative_to(run_dir)}", markup=False)
        if not report.passed:
            failed.append(p.phase)
    return failed
