"""Turn one finished case process into exactly one ``CaseRun`` or one ``CaseFailure``.

What is modelled: the agreement checks of a case (exit status; exactly one
``BENCH_RESULT`` line equal to the record file; record fields equal to the case;
evidence sidecar present and equal to the single ``OFFLOAD_EVIDENCE`` log line;
evidence describing the case's implementation and offload parameters; a requested
offload with no wrapped module, zero bytes or no ``post_init`` is a failure, never a data
point; the record's workload and model equal the plan's; on accelerators exactly one
``Available KV cache memory`` line per log (published runner rules);
a baseline that wrapped something is a mismatch; stability cases must produce
output in every round), KV cache capacity parsed from the log (every known format,
thousands separators; a missing line gives null, never 0), the root-cause
exception named in the log, and expected failures (``expect_error``); the CPU GEMM
kernel line (``OFFLOAD_CPU_KERNELS``) against the runtime's ``cpu_kernel_path``; a
process of the case (the bench process or vLLM's engine-core worker) killed by a
signal is named (``worker died: SIGILL (illegal instruction)``) with the prompt length
and the CPU's ISA flags.

What is deliberately not modelled: statistics (analysis), selection-vs-formula
validation (analysis validation), writing the lines (``runners.matrix``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from results_schema.io import RecordError, StrictJSONError, parse_line, read_json
from results_schema.models import (
    BenchRecord,
    CaseFailure,
    CaseRun,
    CpuKernelEvidence,
    KVCacheCapacity,
    RuntimeEvidence,
)
from runners.launch import ProcessOutcome
from runners.plan import ScheduledCase

RESULT_PREFIX = "BENCH_RESULT "
EVIDENCE_PREFIX = "OFFLOAD_EVIDENCE "
KERNELS_PREFIX = "OFFLOAD_CPU_KERNELS "
LOG_TAIL_LINES = 30

_NUM = r"(\d[\d,]*(?:\.\d+)?)"
_SIGNED_NUM = r"([-+\u2212]?\s*\d[\d,]*(?:\.\d+)?)"
_KV_GIB = re.compile(r"Available KV cache memory:\s*" + _SIGNED_NUM + r"\s*GiB")
_KV_TOKENS = re.compile(r"(?:GPU|CPU|NPU|XPU)?\s*KV cache size:\s*" + _NUM + r"\s*tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for\s*" + _NUM + r"\s*tokens per request:\s*" + _NUM + r"\s*x")
_EXC_LINE = re.compile(r"^(?:\([^)]*\)\s*)?(?:[A-Z]+\s+[\d-]+\s+[\d:]+\s+\[[^\]]*\]\s*)?"
                       r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(.*))?$")


def _num(text: str) -> float:
    return float(text.replace(",", "").replace("\u2212", "-").replace(" ", ""))


def parse_kv_cache(log_text: str) -> KVCacheCapacity:
    """KV cache capacity from a vLLM log (last occurrence of each form wins).

    Forms: ``Available KV cache memory: 15.66 GiB``, ``GPU KV cache size: 2,042,016 tokens``,
    ``CPU KV cache size: 524,288 tokens``, ``Maximum concurrency for 2,048 tokens per request: 997.08x``.
    A form that is absent gives null. The GiB value keeps its sign: vLLM logs a negative
    ``Available KV cache memory`` when the weights and activations leave no room for
    KV cache (``kv_cache_gib < 0``; see ``kv_cache_problem``). When the log holds the
    GiB line more than once, every value is kept in ``kv_cache_gib_history``.
    """
    gib = [_num(g) for g in _KV_GIB.findall(log_text)]
    tokens = _KV_TOKENS.findall(log_text)
    conc = _CONCURRENCY.findall(log_text)
    return KVCacheCapacity(
        kv_cache_tokens=int(_num(tokens[-1])) if tokens else None,
        kv_cache_gib=gib[-1] if gib else None,
        kv_cache_gib_history=tuple(gib) if len(gib) > 1 else (),
        max_concurrency=_num(conc[-1][1]) if conc else None,
    )


def kv_cache_problem(kv: KVCacheCapacity) -> str | None:
    """The error of a case whose log reports no room for KV cache, or None.

    Returns:
        ``"Available KV cache memory: -0.87 GiB (no room for KV cache)"`` (with the
        history when the value changed) when the last reported value is negative.
    """
    if kv.kv_cache_gib is None or kv.kv_cache_gib >= 0:
        return None
    return f"Available KV cache memory: {kv.kv_cache_gib:g} GiB (no room for KV cache){kv_cache_change(kv)}"


def kv_cache_change(kv: KVCacheCapacity) -> str:
    """``"; the value changed during the case: 1.5 -> -0.87 GiB (recorded the last)"`` or ``""``."""
    hist = kv.kv_cache_gib_history
    if len(set(hist)) <= 1:
        return ""
    return f"; the value changed during the case: {' -> '.join(f'{v:g}' for v in hist)} GiB (recorded the last)"


def root_cause(log_text: str) -> tuple[str | None, str | None]:
    """The first exception line of the first traceback (the root cause), else the last exception-like line.

    vLLM V1 prints the engine-core child's traceback (e.g. upstream's
    ``AssertionError``) before the parent's ``RuntimeError: Engine core initialization
    failed``, so the first traceback's exception is the root cause.

    Returns:
        ``(error_type, message)``; ``(None, None)`` when the log names no exception.
    """
    lines = log_text.splitlines()
    in_tb = False
    found: list[tuple[str, str]] = []
    for line in lines:
        stripped = line.strip()
        if "Traceback (most recent call last):" in line:
            in_tb = True
            continue
        m = _EXC_LINE.match(stripped)
        if m and (in_tb or not line.startswith(" ")):
            found.append((m.group(1), (m.group(2) or "").strip()))
            if in_tb:
                return m.group(1).rsplit(".", 1)[-1], (m.group(2) or "").strip()
    if found:
        name, msg = found[-1]
        return name.rsplit(".", 1)[-1], msg
    return None, None


FATAL_SIGNALS = {
    "Illegal instruction": (4, "SIGILL", "illegal instruction"),
    "Aborted": (6, "SIGABRT", "abort"),
    "Bus error": (7, "SIGBUS", "bus error"),
    "Floating-point exception": (8, "SIGFPE", "floating-point exception"),
    "Floating point exception": (8, "SIGFPE", "floating-point exception"),
    "Segmentation fault": (11, "SIGSEGV", "segmentation fault"),
}
"""faulthandler's ``Fatal Python error: <text>`` -> (signal number, name, description)."""

SIGNAL_NAMES = {4: ("SIGILL", "illegal instruction"), 6: ("SIGABRT", "abort"), 7: ("SIGBUS", "bus error"),
                8: ("SIGFPE", "floating-point exception"), 9: ("SIGKILL", "killed"),
                11: ("SIGSEGV", "segmentation fault"), 15: ("SIGTERM", "terminated")}

_FATAL = re.compile(r"Fatal Python error:\s*(" + "|".join(re.escape(k) for k in FATAL_SIGNALS) + r")")
_FAILED_PROCS = re.compile(r"Failed core proc\(s\):\s*\{([^}]*)\}")


def worker_signal(log_text: str) -> int | None:
    """Signal number that killed a process of the case (the bench process or vLLM's engine core).

    Sources, first match wins: faulthandler's ``Fatal Python error: Illegal instruction``
    (``runners.bench_one`` enables faulthandler for itself and, via ``PYTHONFAULTHANDLER``,
    the engine-core child), then vLLM's ``Failed core proc(s): {'EngineCore_DP0': -4}``.
    None when the log shows no fatal signal.
    """
    m = _FATAL.search(log_text)
    if m:
        return FATAL_SIGNALS[m.group(1)][0]
    m = _FAILED_PROCS.search(log_text)
    if m:
        for code in re.findall(r":\s*(-\d+)", m.group(1)):
            return -int(code)
    return None


def describe_signal(signum: int) -> str:
    """``SIGILL (illegal instruction)`` style text of a signal number."""
    name, what = SIGNAL_NAMES.get(signum, (f"signal {signum}", "fatal signal"))
    return f"{name} ({what})"


def _platform_note(sc: ScheduledCase) -> str:
    from runners.numerics import cpu_facts, describe

    _, flags = cpu_facts()
    w = sc.case.workload or {}
    return f"prompt length {w.get('input_len', '?')} tokens; CPU flags: {describe(flags)}"


def tail(log_text: str, n: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    return tuple(line[:2000] for line in log_text.splitlines()[-n:])


@dataclass(frozen=True)
class Finalized:
    """Result of finalizing one case: exactly one of ``run`` / ``failure``.

    ``expected`` is True when the outcome matches the case's expectation (a
    success without ``expect_error``, or a failure matching it).
    """

    run: CaseRun | None
    failure: CaseFailure | None
    expected: bool
    note: str = ""


class _Fail(Exception):
    def __init__(self, failure_type: str, message: str) -> None:
        super().__init__(message)
        self.failure_type = failure_type
        self.message = message


def _lines_with(log_text: str, prefix: str) -> list[str]:
    out = []
    for line in log_text.splitlines():
        idx = line.find(prefix)
        if idx == 0 or (idx > 0 and line[:idx].rstrip().endswith(")")):  # vLLM child prefix "(EngineCore pid=1) "
            out.append(line[idx + len(prefix):])
    return out


def _check_record(sc: ScheduledCase, log_text: str, record_path: Path) -> BenchRecord:
    c = sc.case
    results = _lines_with(log_text, RESULT_PREFIX)
    if len(results) > 1:
        raise _Fail("duplicate_result", f"{len(results)} BENCH_RESULT lines in the log (exactly one expected)")
    if not results:
        raise _Fail("no_result", "no BENCH_RESULT line in the log")
    try:
        from_log = parse_line(results[0], BenchRecord, path="BENCH_RESULT", line=1)
    except (RecordError, StrictJSONError) as exc:
        raise _Fail("invalid_record", f"BENCH_RESULT line does not validate: {exc}") from None
    if not record_path.is_file():
        raise _Fail("no_result", f"record file {record_path.name} was not written")
    try:
        record = read_json(record_path, BenchRecord)
    except (RecordError, StrictJSONError, ValidationError) as exc:
        raise _Fail("invalid_record", f"record file does not validate: {exc}") from None
    if record != from_log:
        raise _Fail("invalid_record", "record file and BENCH_RESULT line disagree")
    want = dict(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat)
    got = dict(phase=record.phase, label=record.label, implementation=record.implementation, repeat=record.repeat)
    if want != got:
        raise _Fail("invalid_record", f"record identifies {got}, the case is {want}")
    o = record.offload
    want_off = (c.group_size, c.num_in_group, c.prefetch_step, tuple(c.params), c.backend)
    got_off = (o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step, tuple(o.offload_params),
               o.offload_backend)
    if want_off != got_off:
        raise _Fail("invalid_record", f"record offload {got_off} != case offload {want_off}")
    _check_plan_match(c, record)
    if c.kind == "stability":
        empty = [r.index for r in record.rounds if r.output_tokens == 0]
        if empty:
            raise _Fail("invalid_record", f"stability: rounds {empty[:10]} produced no output token")
    return record


def _check_plan_match(c: object, record: BenchRecord) -> None:
    """Published rule: the record's workload and model are the plan's (issue 15)."""
    from results_schema.models import WorkloadSpec

    want_w = dict(c.workload)  # type: ignore[attr-defined]
    try:
        planned = WorkloadSpec(**{k: v for k, v in want_w.items() if k in WorkloadSpec.model_fields})
    except ValidationError:
        return  # the plan validated it; a partial test double has nothing to compare
    if record.workload != planned:
        diff = {k: (getattr(record.workload, k), getattr(planned, k)) for k in WorkloadSpec.model_fields
                if getattr(record.workload, k) != getattr(planned, k)}
        raise _Fail("invalid_record", f"record workload differs from the plan's (record, plan): {diff}")


def check_plan_model(record: BenchRecord, command: tuple[str, ...]) -> None:
    """The record's model is the model of the ``--case`` file the case was started with (raises ``_Fail``)."""
    if "--case" in command[:-1]:
        from results_schema.case import CaseSpec

        try:
            want = read_json(command[command.index("--case") + 1], CaseSpec).model
        except (OSError, ValueError) as exc:
            raise _Fail("invalid_record", f"case file of the command unreadable: {exc}") from None
        if record.model != want:
            raise _Fail("invalid_record", f"record model {record.model!r} != the plan's {want!r}")


def check_kv_lines(c: object, log_text: str) -> None:
    """Published rule: on accelerators exactly one ``Available KV cache memory`` line per case log."""
    device = str((c.runtime or {}).get("device", "cpu"))  # type: ignore[attr-defined]
    if device == "cpu" or c.kind == "accuracy":  # type: ignore[attr-defined]
        return
    n = sum(1 for line in log_text.splitlines() if "Available KV cache memory" in line)
    if n != 1:
        raise _Fail("kv_cache_lines", f"{n} 'Available KV cache memory' lines in the log of a {device} case "
                    "(exactly one expected: missing means no capacity, repeated means the engine was profiled twice)")


def _check_evidence(sc: ScheduledCase, log_text: str, evidence_path: Path) -> RuntimeEvidence:
    c = sc.case
    lines = _lines_with(log_text, EVIDENCE_PREFIX)
    if not evidence_path.is_file():
        raise _Fail("missing_evidence", f"evidence sidecar {evidence_path.name} was not written")
    if not lines:
        raise _Fail("missing_evidence", "no OFFLOAD_EVIDENCE line in the log")
    if len(lines) > 1:
        raise _Fail("evidence_mismatch", f"{len(lines)} OFFLOAD_EVIDENCE lines in the log (exactly one expected)")
    try:
        sidecar = read_json(evidence_path, RuntimeEvidence)
        logged = parse_line(lines[0], RuntimeEvidence, path="OFFLOAD_EVIDENCE", line=1)
    except (RecordError, StrictJSONError, ValidationError) as exc:
        raise _Fail("evidence_mismatch", f"evidence does not validate: {exc}") from None
    if sidecar != logged:
        raise _Fail("evidence_mismatch", "evidence sidecar and OFFLOAD_EVIDENCE line disagree")
    if sidecar.implementation != c.implementation:
        raise _Fail("evidence_mismatch",
                    f"evidence implementation {sidecar.implementation!r} != case {c.implementation!r}")
    if c.offload_requested:
        if (sidecar.offload_group_size, sidecar.offload_num_in_group) != (c.group_size, c.num_in_group):
            raise _Fail("evidence_mismatch",
                        f"evidence G/N ({sidecar.offload_group_size}, {sidecar.offload_num_in_group}) != case "
                        f"({c.group_size}, {c.num_in_group})")
        if not sidecar.post_init_called:
            raise _Fail("no_offload_evidence", f"the offloader ({sidecar.offloader_class}) never ran post_init: "
                        "its weights were not re-synced after loading, the evidence is rejected")
        if sidecar.wrapped_count == 0 or sidecar.offloaded_bytes == 0:
            raise _Fail("no_offload_evidence",
                        f"offload requested (G={c.group_size}, N={c.num_in_group}) but the evidence shows "
                        f"{sidecar.wrapped_count} wrapped modules and {sidecar.offloaded_bytes} offloaded bytes "
                        f"(offloader {sidecar.offloader_class})")
    elif sidecar.wrapped_count or sidecar.offloaded_bytes:
        raise _Fail("evidence_mismatch",
                    f"baseline case but the evidence shows {sidecar.wrapped_count} wrapped modules / "
                    f"{sidecar.offloaded_bytes} bytes")
    return sidecar


def _check_kernels(sc: ScheduledCase, log_text: str) -> CpuKernelEvidence | None:
    """The case's ``OFFLOAD_CPU_KERNELS`` line, checked against the runtime's ``cpu_kernel_path``.

    ``plain``: every processed linear layer must run ``torch_linear``; ``packed``: none may
    (the runner allows ``packed`` only without offload). No path configured: the line is
    recorded when present, never required.
    """
    runtime = sc.case.runtime or {}
    want = runtime.get("cpu_kernel_path") if str(runtime.get("device", "cpu")) == "cpu" else None
    lines = list(dict.fromkeys(_lines_with(log_text, KERNELS_PREFIX)))
    if len(lines) > 1:
        raise _Fail("kernel_mismatch", f"{len(lines)} different OFFLOAD_CPU_KERNELS lines (one expected)")
    if not lines:
        if want:
            raise _Fail("kernel_mismatch", f"cpu_kernel_path {want!r} asked for, but no OFFLOAD_CPU_KERNELS line "
                                           "in the log (the offload plugin did not apply it)")
        return None
    try:
        got = parse_line(lines[0], CpuKernelEvidence, path="OFFLOAD_CPU_KERNELS", line=1)
    except (RecordError, StrictJSONError) as exc:
        raise _Fail("kernel_mismatch", f"OFFLOAD_CPU_KERNELS line does not validate: {exc}") from None
    if want and got.path != want:
        raise _Fail("kernel_mismatch", f"case ran cpu_kernel_path {got.path!r}, the runtime asks for {want!r}")
    plain = got.kernels.get("torch_linear", 0)
    if got.path == "plain" and plain != got.layers:
        raise _Fail("kernel_mismatch", f"cpu_kernel_path 'plain' but only {plain} of {got.layers} linear layers "
                                       f"run torch_linear (kernels {got.kernels})")
    if got.path == "packed" and plain:
        raise _Fail("kernel_mismatch", f"cpu_kernel_path 'packed' but {plain} of {got.layers} linear layers run "
                                       f"torch_linear (kernels {got.kernels}); packed is for cases without offload")
    return got


def finalize(sc: ScheduledCase, outcome: ProcessOutcome, *, run_dir: Path, log_path: Path, evidence_path: Path,
             record_path: Path, command: tuple[str, ...]) -> Finalized:
    """Check one finished case and build its single line.

    Args:
        sc: the scheduled case.
        outcome: how its process ended.
        run_dir: the run directory (paths in lines are relative to it).
        log_path, evidence_path, record_path: the case's files.
        command: argv it was started with.

    Returns:
        ``Finalized`` with either a ``CaseRun`` or a ``CaseFailure``.
    """
    c = sc.case
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    rel_log = str(log_path.relative_to(run_dir))
    err_type, err_msg = root_cause(log_text)
    kv = parse_kv_cache(log_text)
    kv_problem = kv_cache_problem(kv)
    kv_seen = kv if kv != KVCacheCapacity() else None

    def failure(failure_type: str, message: str, signum: int | None = None) -> Finalized:
        f = CaseFailure(
            phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
            failure_type=failure_type, exit_code=outcome.exit_code,
            signal=outcome.signal if signum is None else signum, error_type=err_type,
            error_message=" | ".join(f"case {c.phase}/{c.label} r{sc.repeat}: {message}".splitlines()),
            log_tail=tail(log_text),
            log_path=rel_log, duration_s=outcome.wall_s, kv_cache=kv_seen,
        )
        expected = False
        if c.expect_error is not None:
            haystack = f"{err_type or ''}: {err_msg or ''}\n{message}"
            expected = re.search(c.expect_error, haystack) is not None
        note = f"expected failure ({c.expect_error})" if expected else ""
        return Finalized(run=None, failure=f, expected=expected, note=note)

    if outcome.launch_error is not None:
        return failure("launch_error", outcome.launch_error)
    if outcome.timed_out:
        return failure("timeout", f"killed after the {c.timeout_s:g} s timeout (TERM, then KILL)")
    if kv_problem is not None:  # a log that reports no room for KV cache fails the case, whatever the exit
        how = f"exited with code {outcome.exit_code}" if outcome.exit_code is not None else f"signal {outcome.signal}"
        cause = f"; root cause {err_type}: {err_msg}" if err_type else ""
        return failure("no_kv_cache_memory", f"{kv_problem}; process {how}{cause}")
    if outcome.signal is not None:
        return failure("signal", f"killed by {describe_signal(outcome.signal)}; {_platform_note(sc)}"
                       + (f"; log names {err_type}: {err_msg}" if err_type else ""))
    dead = worker_signal(log_text) if outcome.exit_code != 0 else None
    if dead is not None:
        return failure("worker_signal", f"worker died: {describe_signal(dead)}; {_platform_note(sc)}; bench "
                       f"process exit code {outcome.exit_code}"
                       + (f"; log names {err_type}: {err_msg}" if err_type else ""), signum=dead)
    if outcome.exit_code != 0:
        cause = f"{err_type}: {err_msg}" if err_type else "no exception in the log"
        return failure("nonzero_exit", f"exited with code {outcome.exit_code}; root cause {cause}")
    try:
        record = _check_record(sc, log_text, record_path)
        check_plan_model(record, command)
        evidence = _check_evidence(sc, log_text, evidence_path)
        kernels = _check_kernels(sc, log_text)
        check_kv_lines(c, log_text)
    except _Fail as f:
        return failure(f.failure_type, f.message)
    run = CaseRun(record=record, evidence=evidence, kv_cache=kv, process_wall_s=outcome.wall_s,
                  log_path=rel_log, evidence_path=str(evidence_path.relative_to(run_dir)), command=command,
                  cpu_kernels=kernels)
    change = kv_cache_change(kv).lstrip("; ")
    if c.expect_error is not None:
        return Finalized(run=run, failure=None, expected=False,
                         note=f"expected an error matching {c.expect_error!r}, but the case succeeded"
                              + (f"; KV cache memory {change}" if change else ""))
    return Finalized(run=run, failure=None, expected=True, note=f"KV cache memory {change}" if change else "")
