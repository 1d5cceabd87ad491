"""The agreement checks of a finished case: record, plan, evidence, CPU kernels, KV cache lines.

What is modelled: exactly one ``BENCH_RESULT`` line equal to the record file; record
fields equal to the case; the record's workload and model equal the plan's; evidence
sidecar present and equal to the single ``OFFLOAD_EVIDENCE`` log line; evidence
describing the case's implementation and offload parameters (a requested offload with
no wrapped module, zero bytes or no ``post_init`` is a failure, never a data point; a
baseline that wrapped something is a mismatch); a speed control (``step_delay_ms``) records its delay and its log shows the control's applied and
acted lines; the CPU GEMM kernel line (``OFFLOAD_CPU_KERNELS``) against the runtime's
``cpu_kernel_path``; on accelerators exactly one ``Available KV cache memory`` line per
log (published runner rules). Each check raises ``CheckFailed`` naming the
``failure_type`` of the case's ``CaseFailure``.

What is deliberately not modelled: parsing the log (``runners.outcome.case_log``), building the
case's line (``runners.outcome.bench``, ``runners.outcome.serving``), a kind's own check of its record (the
stability kind's, ``runners.kinds.bench``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from offload import controls
from offload.selection import select_offload_layers
from results_schema.rules.evidence_rule import config_num_layers, evidence_problems
from results_schema.codec.io import RecordError, StrictJSONError, parse_line, read_json
from results_schema.records.case_outcome import CpuKernelEvidence, FailureType
from results_schema.records.models import BenchRecord, RuntimeEvidence, WorkloadSpec
from results_schema.records.identity import OffloadSetting
from results_schema.rules.log_rule import (BENCH_RESULT, OFFLOAD_CPU_KERNELS, OFFLOAD_EVIDENCE, kv_cache_gib_values,
    marked_lines)
from runners.cases import PhaseCase, ScheduledCase
from conf.typed import plain


class CheckFailed(Exception):
    """A check of a finished case failed: ``failure_type`` (a ``FailureType``) and ``message``."""

    def __init__(self, failure_type: FailureType, message: str) -> None:
        super().__init__(message)
        self.failure_type = failure_type
        self.message = message


def check_in_process(c: PhaseCase, record: BenchRecord) -> None:
    """An in-process case's record has its design, and every pair's A and B rounds generated the same tokens.

    Raises:
        CheckFailed: ``invalid_record`` naming what differs.
    """
    design = record.in_process.design if record.in_process is not None else None
    if design != c.in_process:
        raise CheckFailed("invalid_record", f"record in_process {design!r} != the case's {c.in_process!r}")
    if record.in_process is not None and not record.in_process.tokens_identical:
        raise CheckFailed("invalid_record", "in-process rounds: the two rounds of a pair (same prompts, greedy) "
                          "generated different tokens: mode A does not compute what mode B computes")


def check_record(sc: ScheduledCase, log_text: str, record_path: Path) -> BenchRecord:
    """The case's record: one ``BENCH_RESULT`` line equal to the record file, naming the case.

    Raises:
        CheckFailed: ``duplicate_result``, ``no_result`` or ``invalid_record``.
    """
    c = sc.case
    results = marked_lines(log_text, BENCH_RESULT)
    if len(results) > 1:
        raise CheckFailed("duplicate_result", f"{len(results)} BENCH_RESULT lines in the log (exactly one expected)")
    if not results:
        raise CheckFailed("no_result", "no BENCH_RESULT line in the log")
    try:
        from_log = parse_line(results[0], BenchRecord, path="BENCH_RESULT", line=1)
    except (RecordError, StrictJSONError) as exc:
        raise CheckFailed("invalid_record", f"BENCH_RESULT line does not validate: {exc}") from None
    if not record_path.is_file():
        raise CheckFailed("no_result", f"record file {record_path.name} was not written")
    try:
        record = read_json(record_path, BenchRecord)
    except (RecordError, StrictJSONError, ValidationError) as exc:
        raise CheckFailed("invalid_record", f"record file does not validate: {exc}") from None
    if record != from_log:
        raise CheckFailed("invalid_record", "record file and BENCH_RESULT line disagree")
    want = dict(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat)
    got = dict(phase=record.phase, label=record.label, implementation=record.implementation, repeat=record.repeat)
    if want != got:
        raise CheckFailed("invalid_record", f"record identifies {got}, the case is {want}")
    o = record.offload
    want_off = (c.group_size, c.num_in_group, c.prefetch_step, tuple(c.params), c.backend)
    got_off = (o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step, tuple(o.offload_params),
               o.offload_backend)
    if want_off != got_off:
        raise CheckFailed("invalid_record", f"record offload {got_off} != case offload {want_off}")
    check_in_process(c, record)
    check_plan_match(c, record)
    check_control(c, record, log_text)
    return record


def control_missing(step_delay_ms: float, log_text: str) -> str | None:
    """What the log of a speed control lacks (``offload.controls``: the applied and the acted line, each naming the
    configured delay), or None (also for a case without a delay). A serving case passes its server's log."""
    if not step_delay_ms:
        return None
    want = f"step_delay_ms={step_delay_ms:g}"
    for prefix in (controls.APPLIED, controls.ACTED):
        if not any(ln.startswith(f"{prefix} {want}:") for ln in log_text.splitlines()):
            return f"speed control {want}: no '{prefix} {want}' line: the delay did not take effect"
    return None


def check_control(c: PhaseCase, record: BenchRecord, log_text: str) -> None:
    """A speed control's record carries the case's delay and its log shows the delay applied and acting.

    Raises:
        CheckFailed: ``invalid_record`` (another delay) or ``missing_evidence`` (a control line missing).
    """
    if record.step_delay_ms != c.step_delay_ms:
        raise CheckFailed("invalid_record", f"record step_delay_ms {record.step_delay_ms:g} != the case's "
                          f"{c.step_delay_ms:g} (the speed control's delay)")
    missing = control_missing(c.step_delay_ms, log_text)
    if missing:
        raise CheckFailed("missing_evidence", missing)


def check_plan_match(c: PhaseCase, record: BenchRecord) -> None:
    """Published rule: the record's workload and model are the plan's."""

    try:
        planned = WorkloadSpec(**plain(c.workload))
    except ValidationError as exc:  # the plan validated it, so this is a corrupted case: fail closed
        raise CheckFailed("invalid_record", "the plan's workload of this case does not validate, so the record "
                          f"cannot be compared with it: {' '.join(str(exc).split())[:300]}") from None
    if record.workload != planned:
        diff = {k: (getattr(record.workload, k), getattr(planned, k)) for k in WorkloadSpec.model_fields
                if getattr(record.workload, k) != getattr(planned, k)}
        raise CheckFailed("invalid_record", f"record workload differs from the plan's (record, plan): {diff}")


def check_plan_model(record: BenchRecord, command: tuple[str, ...]) -> None:
    """The record's model is the model of the ``--case`` file the case was started with (raises ``CheckFailed``)."""
    if "--case" in command[:-1]:
        from results_schema.records.case import CaseSpec

        try:
            want = read_json(command[command.index("--case") + 1], CaseSpec).model
        except (OSError, ValueError) as exc:
            raise CheckFailed("invalid_record", f"case file of the command unreadable: {exc}") from None
        if record.model != want:
            raise CheckFailed("invalid_record", f"record model {record.model!r} != the plan's {want!r}")


def check_kv_lines(c: PhaseCase, log_text: str) -> None:
    """Published rule: on accelerators exactly one ``Available KV cache memory`` line per bench case log."""
    device = str(c.runtime.device)
    if device == "cpu":
        return
    n = len(kv_cache_gib_values(log_text))
    if n != 1:
        raise CheckFailed("kv_cache_lines", f"{n} 'Available KV cache memory' lines in the log of a {device} case "
                    "(exactly one expected: missing means no capacity, repeated means the engine was profiled twice)")


def check_evidence(sc: ScheduledCase, log_text: str, evidence_path: Path,
                   model: str | None = None) -> RuntimeEvidence:
    """The case's evidence: sidecar equal to the one ``OFFLOAD_EVIDENCE`` line, describing the case.

    "Describing the case" is ``results_schema.rules.evidence_rule.evidence_problems`` (the validation's rule);
    the first problem is the failure. ``model``: the model directory the case loaded (its record's
    ``model``); its ``config.json`` layer count is checked against the evidence's, as the validation does.

    Raises:
        CheckFailed: ``missing_evidence``, ``evidence_mismatch`` or ``no_offload_evidence``.
    """
    c = sc.case
    lines = marked_lines(log_text, OFFLOAD_EVIDENCE)
    if not evidence_path.is_file():
        raise CheckFailed("missing_evidence", f"evidence sidecar {evidence_path.name} was not written")
    if not lines:
        raise CheckFailed("missing_evidence", "no OFFLOAD_EVIDENCE line in the log")
    if len(lines) > 1:
        raise CheckFailed("evidence_mismatch", f"{len(lines)} OFFLOAD_EVIDENCE lines in the log (exactly one expected)")
    try:
        sidecar = read_json(evidence_path, RuntimeEvidence)
        logged = parse_line(lines[0], RuntimeEvidence, path="OFFLOAD_EVIDENCE", line=1)
    except (RecordError, StrictJSONError, ValidationError) as exc:
        raise CheckFailed("evidence_mismatch", f"evidence does not validate: {exc}") from None
    if sidecar != logged:
        raise CheckFailed("evidence_mismatch", "evidence sidecar and OFFLOAD_EVIDENCE line disagree")
    setting = OffloadSetting.model_construct(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                                             offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params))
    problems = evidence_problems(sidecar, implementation=c.implementation, setting=setting,
                                 overlay_class=c.runtime.overlay_class, select=select_offload_layers,
                                 config_layers=config_num_layers(model))
    if problems:
        raise CheckFailed(problems[0].failure_type, problems[0].message)
    return sidecar


def check_kernels(sc: ScheduledCase, log_text: str) -> CpuKernelEvidence | None:
    """The case's ``OFFLOAD_CPU_KERNELS`` line, checked against the runtime's ``cpu_kernel_path``.

    ``plain``: every processed linear layer must run ``torch_linear``; ``packed``: none may
    (the runner allows ``packed`` only without offload). No path configured: the line is
    recorded when present, never required.
    """
    runtime = sc.case.runtime
    want = runtime.cpu_kernel_path if runtime.device == "cpu" else None
    lines = list(dict.fromkeys(marked_lines(log_text, OFFLOAD_CPU_KERNELS)))
    if len(lines) > 1:
        raise CheckFailed("kernel_mismatch", f"{len(lines)} different OFFLOAD_CPU_KERNELS lines (one expected)")
    if not lines:
        if want:
            raise CheckFailed("kernel_mismatch", f"cpu_kernel_path {want!r} asked for, but no OFFLOAD_CPU_KERNELS line "
                                           "in the log (the offload plugin did not apply it)")
        return None
    try:
        got = parse_line(lines[0], CpuKernelEvidence, path="OFFLOAD_CPU_KERNELS", line=1)
    except (RecordError, StrictJSONError) as exc:
        raise CheckFailed("kernel_mismatch", f"OFFLOAD_CPU_KERNELS line does not validate: {exc}") from None
    if want and got.path != want:
        raise CheckFailed("kernel_mismatch", f"case ran cpu_kernel_path {got.path!r}, the runtime asks for {want!r}")
    plain = got.kernels.get("torch_linear", 0)
    if got.path == "plain" and plain != got.layers:
        raise CheckFailed("kernel_mismatch", f"cpu_kernel_path 'plain' but only {plain} of {got.layers} linear layers "
                                       f"run torch_linear (kernels {got.kernels})")
    if got.path == "packed" and plain:
        raise CheckFailed("kernel_mismatch", f"cpu_kernel_path 'packed' but {plain} of {got.layers} linear layers run "
                                       f"torch_linear (kernels {got.kernels}); packed is for cases without offload")
    return got


