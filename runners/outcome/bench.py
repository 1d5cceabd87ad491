"""The end of a bench case (throughput, ttft, stability): its finished process -> one ``CaseRun`` or one ``CaseFailure``.

What is modelled: the order in which a finished case is judged (launch error; timeout;
a log that reports no room for KV cache, whatever the exit; a signal; a process of the
case (the bench process or vLLM's engine-core worker) killed by a signal, named
(``worker died: SIGILL (illegal instruction)``) with the prompt length and the CPU's ISA
flags; a non-zero exit with the engine path's outcome (``engine_rejected``: the engine's own
rejection, naming the component that raised; ``engine_accepted_invalid``) or the root-cause
exception; then the agreement checks of
``runners.outcome.case_checks``), and expected failures (``expect_error``).

What is deliberately not modelled: parsing the log (``runners.outcome.case_log``), the checks
themselves (``runners.outcome.case_checks``), statistics (analysis), selection-vs-formula
validation (analysis validation), writing the lines (``runners.orchestration.execute``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, cast

from results_schema.records.case_outcome import CaseFailure, FailureType, KVCacheCapacity
from results_schema.records.models import BenchRecord, CaseRun
from runners.outcome.case_checks import (
    CheckFailed,
    check_evidence,
    check_kernels,
    check_kv_lines,
    check_plan_model,
    check_record,
)
from runners.outcome.case_log import (
    describe_signal,
    kv_cache_change,
    kv_cache_problem,
    parse_kv_cache,
    root_cause,
    tail,
    worker_signal,
)
from runners.outcome.finalized import Line, Outcome
from runners.incase.engine_path import engine_outcome
from runners.incase.process_group import ProcessOutcome
from runners.cases import ScheduledCase
from runners.identity.numerics import cpu_facts, describe


def _platform_note(sc: ScheduledCase) -> str:
    _, flags = cpu_facts()
    return f"prompt length {sc.case.workload.input_len} tokens; CPU flags: {describe(flags)}"


@dataclass(frozen=True)
class _Judged:
    """A failed case before its line is built: ``failure_type``, message and (worker) signal."""

    failure_type: FailureType
    message: str
    signum: int | None = None


def _process_failure(sc: ScheduledCase, outcome: ProcessOutcome, log_text: str, kv: KVCacheCapacity) -> _Judged | None:
    """How the process itself failed (before any record is read), or None when it exited 0."""
    c = sc.case
    err_type, err_msg = root_cause(log_text)
    named = f"; log names {err_type}: {err_msg}" if err_type else ""
    kv_problem = kv_cache_problem(kv)
    if outcome.launch_error is not None:
        return _Judged("launch_error", outcome.launch_error)
    if outcome.timed_out:
        return _Judged("timeout", f"killed after the {c.timeout_s:g} s timeout (TERM, then KILL)")
    if kv_problem is not None:  # a log that reports no room for KV cache fails the case, whatever the exit
        how = f"exited with code {outcome.exit_code}" if outcome.exit_code is not None else f"signal {outcome.signal}"
        cause = f"; root cause {err_type}: {err_msg}" if err_type else ""
        return _Judged("no_kv_cache_memory", f"{kv_problem}; process {how}{cause}")
    if outcome.signal is not None:
        return _Judged("signal", f"killed by {describe_signal(outcome.signal)}; {_platform_note(sc)}" + named)
    dead = worker_signal(log_text) if outcome.exit_code != 0 else None
    if dead is not None:
        return _Judged("worker_signal", f"worker died: {describe_signal(dead)}; {_platform_note(sc)}; bench "
                       f"process exit code {outcome.exit_code}" + named, signum=dead)
    if outcome.exit_code != 0:
        return _exit_failure(sc, outcome, log_text, err_type, err_msg)
    return None


def _exit_failure(sc: ScheduledCase, outcome: ProcessOutcome, log_text: str, err_type: str | None,
                  err_msg: str | None) -> _Judged:
    """A non-zero exit: the engine path's outcome (``runners.incase.engine_path``) when the case has one, else the root cause."""
    engine = engine_outcome(log_text) if sc.case.engine_validates else None
    if engine is not None:
        return _Judged(cast(FailureType, engine.failure_type), f"{engine.message}; exited with code {outcome.exit_code}")
    cause = f"{err_type}: {err_msg}" if err_type else "no exception in the log"
    return _Judged("nonzero_exit", f"exited with code {outcome.exit_code}; root cause {cause}")


def _failed(sc: ScheduledCase, outcome: ProcessOutcome, judged: _Judged, *, log_text: str, rel_log: str,
            kv: KVCacheCapacity) -> Outcome:
    """The ``CaseFailure`` line of a failed case; expected when its text matches the case's ``expect_error``."""
    c = sc.case
    err_type, err_msg = root_cause(log_text)
    f = CaseFailure(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
        failure_type=judged.failure_type, exit_code=outcome.exit_code,
        signal=outcome.signal if judged.signum is None else judged.signum, error_type=err_type,
        error_message=" | ".join(f"case {c.phase}/{c.label} r{sc.repeat}: {judged.message}".splitlines()),
        log_tail=tail(log_text),
        log_path=rel_log, duration_s=outcome.wall_s, kv_cache=kv if kv != KVCacheCapacity() else None,
    )
    expected = False
    if c.expect_error is not None:
        haystack = f"{err_type or ''}: {err_msg or ''}\n{judged.message}"
        expected = re.search(c.expect_error, haystack) is not None
    note = f"expected failure ({c.expect_error})" if expected else ""
    return Outcome(lines=(), failure=f, expected=expected, note=note)


def runs_name(phase: str) -> str:
    """File of a bench phase's ``CaseRun`` lines."""
    return f"{phase}-runs.jsonl"


def finalize_bench(sc: ScheduledCase, outcome: ProcessOutcome, *, run_dir: Path, log_path: Path, evidence_path: Path,
                   record_path: Path, command: tuple[str, ...],
                   record_check: Callable[[BenchRecord], None] | None = None) -> Outcome:
    """Check one finished case and build its single line.

    Args:
        sc: the scheduled case.
        outcome: how its process ended.
        run_dir: the run directory (paths in lines are relative to it).
        log_path, evidence_path, record_path: the case's files.
        command: argv it was started with.
        record_check: the case kind's own check of its record, run right after ``check_record`` (raises
            ``CheckFailed``; the stability kind's: every round produced a token).

    Returns:
        ``Outcome`` with either a ``CaseRun`` line (``<phase>-runs.jsonl``) or a ``CaseFailure``.
    """
    c = sc.case
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    rel_log = str(log_path.relative_to(run_dir))
    kv = parse_kv_cache(log_text)
    judged = _process_failure(sc, outcome, log_text, kv)
    if judged is None:
        try:
            record = check_record(sc, log_text, record_path)
            if record_check is not None:
                record_check(record)
            check_plan_model(record, command)
            evidence = check_evidence(sc, log_text, evidence_path, model=record.model)
            kernels = check_kernels(sc, log_text)
            check_kv_lines(c, log_text)
        except CheckFailed as exc:
            judged = _Judged(exc.failure_type, exc.message)
    if judged is not None:
        return _failed(sc, outcome, judged, log_text=log_text, rel_log=rel_log, kv=kv)
    run = CaseRun(record=record, evidence=evidence, kv_cache=kv, process_wall_s=outcome.wall_s,
                  log_path=rel_log, evidence_path=str(evidence_path.relative_to(run_dir)), command=command,
                  cpu_kernels=kernels)
    change = kv_cache_change(kv).lstrip("; ")
    lines = (Line(runs_name(c.phase), run),)
    if c.expect_error is not None:
        return Outcome(lines=lines, failure=None, expected=False,
                       note=f"expected an error matching {c.expect_error!r}, but the case succeeded"
                            + (f"; KV cache memory {change}" if change else ""))
    return Outcome(lines=lines, failure=None, expected=True, note=f"KV cache memory {change}" if change else "")
