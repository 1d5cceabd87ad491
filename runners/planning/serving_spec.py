"""Matrix side of a serving phase: config -> ``ServingCaseSpec``, finished process -> lines.

What is modelled:
* ``validate_serving``: the phase's ``serving`` settings checked before any process starts
  (rates > 0, SLO limits > 0, attainment in (0, 1], counts, timeouts), naming the field,
  the value and what is allowed.
* ``write_case_spec``: ``cases/<phase>/<stem>.serving-case.json`` from a scheduled case, and
  the argv of its process (``python -m runners.incase.serving --case FILE --run-dir DIR``).
* ``finalize_serving``: one ``ServingRun`` line per rate when the process exited 0, its
  ``ServingCaseResult`` validates and agrees with the case, and the evidence sidecar agrees
  with the single ``OFFLOAD_EVIDENCE`` line of the *server* log (the hook runs inside the
  server's engine process; ``runners.outcome.case_checks`` checks it exactly as for throughput cases);
  otherwise one ``CaseFailure`` whose ``failure_type`` / ``error_type`` is the fault's cause
  and whose log tail is the server log's.

What is deliberately not modelled: the measurement itself (``runners.incase.serving.driver``).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from conf.schema_matrix import ServingConfig, ServingSLOConfig
from conf.schema_stack import WorkloadConfig
from pydantic import ValidationError

from results_schema.records.io import RecordError, StrictJSONError, read_json, write_json
from results_schema.records.case_outcome import CaseFailure, FailureType
from results_schema.records.models import OffloadSetting
from results_schema.records.serving import ServingCaseResult, ServingRun
from results_schema.records.serving_spec import ServingCaseSpec, ServingEngine, ServingLimits, ServingLoad, ServingSLO
from runners.outcome.case_checks import CheckedCase, CheckFailed, check_evidence
from runners.outcome.finalized import Finalized
from runners.outcome.case_log import parse_kv_cache, root_cause, tail

if TYPE_CHECKING:
    from runners.incase.process_group import ProcessOutcome


class ServingCase(CheckedCase, Protocol):
    """The fields of a planned serving case (``runners.planning.plan.PhaseCase``) this module reads."""

    @property
    def serving(self) -> ServingConfig | None: ...
    @property
    def runtime_name(self) -> str: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def expect_error(self) -> str | None: ...


class ServingLaunch(Protocol):
    """The files and argv of a serving case's launch (``runners.launching.executor_base.LaunchSpec``)."""

    @property
    def argv(self) -> tuple[str, ...]: ...
    @property
    def log_path(self) -> str: ...
    @property
    def evidence_path(self) -> str: ...


class ScheduledServingCase(Protocol):
    """A serving case and its repeat (``runners.planning.plan.ScheduledCase``; plan imports this module)."""

    @property
    def case(self) -> ServingCase: ...
    @property
    def repeat(self) -> int: ...
    @property
    def stem(self) -> str: ...

DEFAULT_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _rates(values: Any) -> tuple[float | None, ...]:
    return tuple(None if math.isinf(float(v)) and float(v) > 0 else float(v) for v in values)


def _check_rates(where: str, rates: list[Any]) -> None:
    if not rates:
        raise ValueError(f"{where}.request_rates is empty: give at least one rate in req/s (> 0; .inf = all at t=0)")
    for r in rates:
        try:
            ok = float(r) > 0 and not math.isnan(float(r))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{where}.request_rates contains {r!r}: each rate must be a number > 0 (req/s) or .inf")
    if len(set(_rates(rates))) != len(rates):
        raise ValueError(f"{where}.request_rates {rates} repeats a rate: each rate once")


def _check_slo(where: str, slo: ServingSLOConfig) -> None:
    for key, v in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms)):
        if not (v > 0) or math.isinf(v):
            raise ValueError(f"{where}.slo.{key} = {v!r}: must be a finite number > 0 (ms)")
    att = slo.attainment
    if not (0 < att <= 1):
        raise ValueError(f"{where}.slo.attainment = {att!r}: must be a fraction in (0, 1]")


def validate_serving(phase: str, serving: ServingConfig) -> None:
    """Check a serving phase's settings before any process starts.

    Raises:
        ValueError: naming ``phases.<phase>.serving.<field>``, its value and what is allowed.
    """
    where = f"phases.{phase}.serving"
    _check_rates(where, list(serving.request_rates))
    _check_slo(where, serving.slo)
    mc = serving.max_concurrency
    if mc is not None and mc < 1:
        raise ValueError(f"{where}.max_concurrency = {mc!r}: must be an integer >= 1 or null")
    if serving.num_warmups < 0:
        raise ValueError(f"{where}.num_warmups = {serving.num_warmups!r}: must be an integer >= 0")
    for key in ("burstiness", "health_timeout_s", "health_poll_s", "rate_timeout_s", "stop_grace_s"):
        v = getattr(serving, key)
        if not (v > 0) or math.isinf(v):
            raise ValueError(f"{where}.{key} = {v!r}: must be a finite number > 0")
    cmd = serving.server_command
    if cmd is not None and not cmd:
        raise ValueError(f"{where}.server_command = {cmd!r}: must be a non-empty list of strings or null")


def paths_of(run_dir: Path, phase: str, stem: str) -> dict[str, Path]:
    """Files of one serving case process (see ``results_schema.records.serving``)."""
    return {
        "spec": run_dir / "cases" / phase / f"{stem}.serving-case.json",
        "record": run_dir / "records" / phase / f"{stem}.serving.json",
        "requests_dir": run_dir / "records" / phase / stem,
        "server_log": run_dir / "logs" / phase / f"{stem}.server.log",
    }


def _engine_options(w: WorkloadConfig) -> dict[str, Any]:
    """The workload's optional engine options as the API server gets them: the same ones ``vllm.LLM`` gets
    (``runners.incase.bench_one.optional_engine_kwargs``); prefix caching null = not passed."""
    from results_schema.records.models import WorkloadSpec
    from runners.incase.bench_one import optional_engine_kwargs

    from conf.typed import plain

    return {"enable_prefix_caching": None, **optional_engine_kwargs(WorkloadSpec(**plain(w)))}


def build_spec(sc: ScheduledServingCase, *, model_dir: Path, run_dir: Path, python: str) -> ServingCaseSpec:
    """The ``ServingCaseSpec`` of a scheduled serving case (``runners.planning.plan.ScheduledCase``)."""
    c = sc.case
    w = c.workload
    s = c.serving
    assert s is not None  # a serving case has its phase's settings (runners.plan)
    p = paths_of(run_dir, c.phase, sc.stem)
    offload = (OffloadSetting(offload_group_size=0, offload_num_in_group=0) if c.implementation == "baseline" else
               OffloadSetting(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                              offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params),
                              offload_backend=c.backend))
    return ServingCaseSpec(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, runtime=c.runtime_name,
        device=str(c.runtime.device), model=str(model_dir), offload=offload,
        engine=ServingEngine(dtype=w.dtype, max_model_len=w.max_model_len, enforce_eager=w.enforce_eager,
                             gpu_memory_utilization=w.gpu_memory_utilization, seed=w.seed, **_engine_options(w)),
        load=ServingLoad(backend="openai", endpoint="/v1/completions", dataset="random",
                         num_prompts=w.num_prompts, input_len=w.input_len, output_len=w.max_tokens, seed=w.seed,
                         num_warmups=s.num_warmups, burstiness=s.burstiness, max_concurrency=s.max_concurrency,
                         temperature=w.temperature, ignore_eos=True, request_rates_rps=_rates(s.request_rates)),
        slo=ServingSLO(ttft_ms=s.slo.ttft_ms, tpot_ms=s.slo.tpot_ms, attainment=s.slo.attainment),
        limits=ServingLimits(health_timeout_s=s.health_timeout_s, health_poll_s=s.health_poll_s,
                             rate_timeout_s=s.rate_timeout_s, stop_grace_s=s.stop_grace_s),
        server_command=tuple(s.server_command or (python, "-m", DEFAULT_SERVER_MODULE)),
        record_path=str(p["record"]), requests_dir=str(p["requests_dir"]), server_log_path=str(p["server_log"]))


def write_case_spec(sc: ScheduledServingCase, *, model_dir: Path, run_dir: Path, python: str = sys.executable) -> tuple[str, ...]:
    """Write the case's spec file and return the argv of its process."""
    spec = build_spec(sc, model_dir=model_dir, run_dir=run_dir, python=python)
    path = paths_of(run_dir, sc.case.phase, sc.stem)["spec"]
    write_json(path, spec)
    return (python, "-m", "runners.incase.serving", "--case", str(path), "--run-dir", str(run_dir))


@dataclass(frozen=True)
class _ServingLogs:
    """What a failed serving case's ``CaseFailure`` is built from."""

    sc: ScheduledServingCase
    outcome: ProcessOutcome
    run_dir: Path
    log_path: Path
    log_text: str
    server_log: Path
    server_text: str

    def rel(self, q: Path | str) -> str:
        return Path(q).relative_to(self.run_dir).as_posix()

    def failure(self, ftype: FailureType, message: str, error_type: str | None) -> tuple[Finalized, list[ServingRun]]:
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
        return Finalized(run=None, failure=f, expected=False), []


def _read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _process_fault(sc: ScheduledServingCase, outcome: ProcessOutcome, result: ServingCaseResult | None,
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


def finalize_serving(sc: ScheduledServingCase, spec: ServingLaunch, outcome: ProcessOutcome,
                     run_dir: Path) -> tuple[Finalized, list[ServingRun]]:
    """Check a finished serving case; return ``(runners.outcome.finalized.Finalized, lines)``.

    ``lines`` holds one ``ServingRun`` per rate on success, nothing on failure (the
    ``Finalized.failure`` then names the cause).
    """
    c = sc.case
    p = paths_of(run_dir, c.phase, sc.stem)
    logs = _ServingLogs(sc=sc, outcome=outcome, run_dir=run_dir, log_path=Path(spec.log_path),
                        log_text=_read_text(Path(spec.log_path)), server_log=p["server_log"],
                        server_text=_read_text(p["server_log"]))
    result: ServingCaseResult | None = None
    if p["record"].is_file():
        try:
            result = read_json(p["record"], ServingCaseResult)
        except (RecordError, StrictJSONError, ValidationError) as exc:
            return logs.failure("invalid_record", f"serving record does not validate: {exc}", None)
    fault = _process_fault(sc, outcome, result, p["record"])
    if fault is not None:
        return logs.failure(*fault)
    assert result is not None  # _process_fault names a missing record
    try:
        evidence = check_evidence(sc, logs.server_text, Path(spec.evidence_path), model=result.model)
    except CheckFailed as f:
        return logs.failure(f.failure_type, f.message + " (server log)", None)
    kv = parse_kv_cache(logs.server_text)
    rel = logs.rel
    lines = [ServingRun(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, runtime=result.runtime,
        model=result.model, offload=result.offload, engine=result.engine, load=result.load, slo=result.slo, rate=r,
        evidence=evidence, kv_cache=kv, server_healthy_after_s=float(result.server.healthy_after_s or 0.0),
        teardown_s=result.teardown.teardown_s, process_wall_s=outcome.wall_s, log_path=rel(logs.log_path),
        server_log_path=rel(logs.server_log), evidence_path=rel(spec.evidence_path), record_path=rel(p["record"]),
        command=tuple(spec.argv)) for r in result.rates]
    return Finalized(run=None, failure=None, expected=c.expect_error is None), lines
