"""Reading a case's log text: KV cache capacity, root-cause exception, fatal signals, the log tail.

What is modelled: KV cache capacity parsed from a vLLM log (every known format,
thousands separators; a missing line gives null, never 0), the root-cause exception
named in the log, the signal that killed a process of the case (faulthandler's
``Fatal Python error`` or vLLM's ``Failed core proc(s)``), the log tail kept in a
``CaseFailure``. Which lines carry a case process's result markers is ``results_schema.rules.log_rule`` (the
offline validation uses the same rule).

What is deliberately not modelled: the agreement checks of a case
(``runners.outcome.case_checks``), turning a finished process into one line (``runners.outcome.bench``).
"""

from __future__ import annotations

import re

from results_schema.records.case_outcome import KVCacheCapacity
from results_schema.rules.log_rule import kv_cache_gib_values

LOG_TAIL_LINES = 30

_NUM = r"(\d[\d,]*(?:\.\d+)?)"
_KV_TOKENS = re.compile(r"(?:GPU|CPU|NPU|XPU)?\s*KV cache size:\s*" + _NUM + r"\s*tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for\s*" + _NUM + r"\s*tokens per request:\s*" + _NUM + r"\s*x")
_EXC_LINE = re.compile(r"^(?:\([^)]*\)\s*)?(?:[A-Z]+\s+[\d-]+\s+[\d:]+\s+\[[^\]]*\]\s*)?"
                       r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(.*))?$")
_RANK_PREFIX = re.compile(r"^(\([^)]*\)\s*)?\[rank\d+\]:\s?")
"""The ``[rank0]: `` prefix torch.distributed puts before each line of an uncaught exception's traceback in
a rank process (vLLM's engine in the case process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""


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
    gib = kv_cache_gib_values(log_text)
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
    failed``, so the first traceback's exception is the root cause. A ``[rank0]: `` line prefix
    (the engine in the case process) is read past.

    Returns:
        ``(error_type, message)``; ``(None, None)`` when the log names no exception.
    """
    lines = log_text.splitlines()
    in_tb = False
    found: list[tuple[str, str]] = []
    for raw in lines:
        line = _RANK_PREFIX.sub(r"\1", raw)  # keeps a "(EngineCore pid=N) " process prefix
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
    (``runners.incase.bench_one`` enables faulthandler for itself and, via ``PYTHONFAULTHANDLER``,
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


def tail(log_text: str, n: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``n`` lines of a log, each cut to 2,000 characters (a ``CaseFailure``'s ``log_tail``)."""
    return tuple(line[:2000] for line in log_text.splitlines()[-n:])
