"""The end of a serving case: its finished process -> one ``ServingRun`` line per rate, or one ``CaseFailure``.

What is modelled: success is a process that exited 0 whose ``ServingCaseResult`` validates and
names the case, and whose evidence sidecar agrees with the single ``OFFLOAD_EVIDENCE`` line of the
*server* log (the hook runs inside the server's engine process; ``runners.outcome.case_checks``
checks it exactly as for bench cases): one ``ServingRun`` per rate. Anything else is one
``CaseFailure`` whose ``failure_type`` / ``error_type`` is the fault's cause and whose log tail is
the server log's. A speed control (``step_delay_ms``, :mod:`offload.controls`) must also show its applied
and acted lines in the server log, else ``missing_evidence``.

What is deliberately not modelled: the measurement (``runners.incase.serving.driver``), the case's
spec (``runners.launching.serving_case``) and files (``runners.paths.CasePaths``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from results_schema.records.case_outcome import CaseFailure, FailureType
from results_schema.codec.io import RecordError, StrictJSONError, read_json
from results_schema.records.serving import ServingCaseResult, ServingRun
from runners.incase.process_group import ProcessOutcome
from runners.outcome.case_checks import CheckFailed, check_evidence, control_missing
from runners.outcome.case_log import parse_kv_cache, root_cause, tail
from runners.outcome.finalized import Line, Outcome
from runners.cases import LaunchSpec, ScheduledCase
from runners.paths import CasePaths


@dataclass(frozen=True)
class _ServingLogs:
    """What a failed serving case's ``CaseFailure`` is built from."""

    sc: ScheduledCase
    outcome: ProcessOutcome
    run_dir: Path
    log_path: Path
    log_text: str
    server_log: Path
    server_text: str

    def rel(self, q: Path | str) -> str:
        return Path(q).relative_to(self.run_dir).as_posix()

    def failure(self, ftype: FailureType, message: str, error_type: str | None) -> Outcome:
        c, sc, outcome = self.sc.case, self.sc, self.outcome
        text = self.server_text or self.log_text
        et, em = root_cause(text)
        f = CaseFailure(
            phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, failure_type=ftype,
            exit_code=outcome.exit_code, signal=outcome.signal, error_type=error_type or et,
            error_message=" | ".join(f"case {c.phase}/{c.label} r{sc.repeat}: {message}".splitlines())
            + (f"; server log names {et}: {em}" if et and error_type else "")
            + (f" (server log {self.rel(self.server_log)})" if self.server_log.is_file() else ""),
            log_tail=tail(text), log_path=self.rel(self.log_path), duration_s=outcome.wall_s)
        return Outcome(lines=(), failure=f, expected=False)


def _read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _process_fault(sc: ScheduledCase, outcome: ProcessOutcome, result: ServingCaseResult | None,
                   record: Path) -> tuple[FailureType, str, str | None] | None:
    """The serving case's fault as ``(failure_type, message, error_type)`` before the evidence check, or None."""
    c = sc.case
    if result is not None and result.fault is not None:
        return result.fault.cause, result.fault.message, result.fault.cause
    if outcome.launch_error is not None:
        return "launch_error", outcome.launch_error, None
    if outcome.timed_out:
        return "timeout", f"killed after the {c.timeout_s:g} s case timeout (TERM, then KILL)", None
    if outcome.signal is not None:
        return "signal", f"case process killed by signal {outcome.signal}", None
    if outcome.exit_code != 0:
        return "nonzero_exit", f"case process exited with code {outcome.exit_code}", None
    if result is None:
        return "no_result", f"serving record {record.name} was not written", None
    want = (c.phase, c.label, c.implementation, sc.repeat)
    got = (result.phase, result.label, result.implementation, result.repeat)
    if want != got:
        return "invalid_record", f"serving record identifies {got}, the case is {want}", None
    return None


def serving_name(phase: str) -> str:
    """File of a serving phase's ``ServingRun`` lines."""
    return f"{phase}-serving.jsonl"


def finalize_serving(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome, run_dir: Path) -> Outcome:
    """Check a finished serving case; return its ``Outcome``.

    Args:
        sc: the scheduled serving case.
        spec: its launch (the driver's log and evidence paths, its argv).
        outcome: how the driver process ended.
        run_dir: the run directory (paths in the lines are relative to it).

    Returns:
        ``Outcome.lines`` holds one ``ServingRun`` per rate (``serving_name``) on success, nothing on failure
        (``Outcome.failure`` then names the cause).
    """
    c = sc.case
    p = CasePaths.of(run_dir, c.phase, sc.stem)
    logs = _ServingLogs(sc=sc, outcome=outcome, run_dir=run_dir, log_path=Path(spec.log_path),
                        log_text=_read_text(Path(spec.log_path)), server_log=p.server_log,
                        server_text=_read_text(p.server_log))
    result: ServingCaseResult | None = None
    if p.serving_record.is_file():
        try:
            result = read_json(p.serving_record, ServingCaseResult)
        except (RecordError, StrictJSONError, ValidationError) as exc:
            return logs.failure("invalid_record", f"serving record does not validate: {exc}", None)
    fault = _process_fault(sc, outcome, result, p.serving_record)
    if fault is not None:
        return logs.failure(*fault)
    assert result is not None  # _process_fault names a missing record
    try:
        evidence = check_evidence(sc, logs.server_text, Path(spec.evidence_path), model=result.model)
    except CheckFailed as f:
        return logs.failure(f.failure_type, f.message + " (server log)", None)
    missing = control_missing(c.step_delay_ms, logs.server_text)
    if missing:
        return logs.failure("missing_evidence", missing + " (server log)", None)
    kv = parse_kv_cache(logs.server_text)
    rel = logs.rel
    lines = [ServingRun(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, runtime=result.runtime,
        model=result.model, offload=result.offload, engine=result.engine, load=result.load, slo=result.slo, rate=r,
        evidence=evidence, kv_cache=kv, server_healthy_after_s=float(result.server.healthy_after_s or 0.0),
        teardown_s=result.teardown.teardown_s, process_wall_s=outcome.wall_s, log_path=rel(logs.log_path),
        server_log_path=rel(logs.server_log), evidence_path=rel(spec.evidence_path), record_path=rel(p.serving_record),
        command=tuple(spec.argv), step_delay_ms=c.step_delay_ms) for r in result.rates]
    return Outcome(lines=tuple(Line(serving_name(c.phase), ln) for ln in lines), failure=None,
                   expected=c.expect_error is None)
