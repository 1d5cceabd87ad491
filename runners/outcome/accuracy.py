"""The end of an accuracy case: its finished process -> one ``AccuracyCaseRun`` line or one ``CaseFailure``.

What is modelled: success is exit 0 with a validating ``<label>.<task>.result.json`` per task of the
case (each for this case); the completion line (``AccuracyCaseRun``) names every task's result file
and its SHA-256, the dataset manifest and its SHA-256, the case's offload setting and its files; any
other end is one ``CaseFailure`` (``timeout``, ``signal``, ``nonzero_exit``, ``no_result``) naming
the root cause found in the log. ``accuracy_cases_name`` is the file the completion lines go to.

What is deliberately not modelled: running the case (``runners.incase.accuracy``), the pre-launch
dataset checks and the end-of-run verifier (``runners.orchestration.accuracy_phase``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from results_schema.records.accuracy import AccuracyCaseRun, AccuracyResult, AccuracyTaskOutcome
from results_schema.records.case_outcome import CaseFailure, FailureType
from results_schema.codec.files import file_sha256
from results_schema.codec.io import read_json
from results_schema.records.identity import OffloadSetting
from runners.incase.process_group import ProcessOutcome
from runners.outcome.case_log import root_cause, tail
from runners.outcome.finalized import Line, Outcome
from runners.paths import CasePaths, accuracy_manifest_path
from runners.cases import LaunchSpec, PhaseCase, ScheduledCase


def accuracy_cases_name(phase: str) -> str:
    """File of an accuracy phase's completion lines (``AccuracyCaseRun``)."""
    return f"{phase}-accuracy-cases.jsonl"


def _task_outcomes(c: PhaseCase, results: Sequence[Path], run_dir: Path) -> list[AccuracyTaskOutcome]:
    """``AccuracyTaskOutcome`` per task from its result file.

    Raises:
        ValueError: a result file does not validate or is for another case.
    """
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


def _case_run(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, results: Sequence[Path],
              run_dir: Path) -> AccuracyCaseRun:
    """The ``AccuracyCaseRun`` completion line of a case whose results all exist.

    Raises:
        ValueError, OSError: a result file is unreadable, invalid or for another case.
    """
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


def finalize_accuracy(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome,
                      run_dir: Path) -> Outcome:
    """Accuracy case: success = exit 0 and a validating ``<label>.<task>.result.json`` per task.

    Args:
        sc: the scheduled accuracy case.
        spec: its launch (log, evidence and record paths; the results are in ``<record stem>/``).
        outcome: how its process ended.
        run_dir: the run directory (paths in the line are relative to it).

    Returns:
        ``Outcome`` with the ``AccuracyCaseRun`` completion line (``accuracy_cases_name``) on success, else
        with the ``CaseFailure`` (an unreadable or foreign result file is a failure too).
    """
    c = sc.case
    log_path = Path(spec.log_path)
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    out_dir = CasePaths.of(run_dir, c.phase, sc.stem).out_dir
    results = [out_dir / f"{c.label}.{task}.result.json" for task in c.accuracy_tasks]
    missing = [p.name for p in results if not p.is_file()]
    if outcome.exit_code == 0 and not outcome.timed_out and not missing:
        try:
            line = _case_run(sc, spec, outcome, results, run_dir)
            return Outcome(lines=(Line(accuracy_cases_name(c.phase), line),), failure=None,
                           expected=c.expect_error is None)
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
    return Outcome(lines=(), failure=f, expected=False)
