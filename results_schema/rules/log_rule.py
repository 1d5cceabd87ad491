"""Which lines of a case log carry a marked payload: one rule for the live check and the offline one.

A case process publishes its results as one line each: ``BENCH_RESULT <json>`` (the bench process,
``runners.incase.bench_one``), ``OFFLOAD_EVIDENCE <json>`` (the evidence hook, in whichever process loads
the model) and ``OFFLOAD_CPU_KERNELS <json>`` (``offload.cpu_kernels``). The runner reads them while the run
goes on (``runners.outcome.case_checks``, stopping at the first problem) and ``analysis validate`` reads
them again from the saved log (``analysis.validation.records``, collecting every problem); both call
:func:`marked_lines`, so the two can never count a different set of lines.

The rule: a line carries ``marker`` when the marker starts the line, or follows only process tags in
parentheses, such as the ``(EngineCore pid=1) `` that vLLM versions before 0.11 put before every line of an
engine-core child's output (and vLLM-Ascend forks still do). The payload is the whole rest of the line, as
printed: it must then parse as the expected model, so trailing text is a parse error, not ignored. A marker
anywhere else (``[rank0]: OFFLOAD_EVIDENCE ...`` inside a traceback torch.distributed re-printed,
``INFO ... OFFLOAD_EVIDENCE ...`` quoted by a logger) is not a publication and is not counted.

vLLM's own ``Available KV cache memory: X GiB`` line is matched by one pattern, :data:`KV_CACHE_GIB`
(:func:`kv_cache_gib_values`): the runner's count of those lines per case log
(``runners.outcome.case_checks.check_kv_lines``) and its parse of the capacity
(``runners.outcome.case_log.parse_kv_cache``) read the same lines.
"""

from __future__ import annotations

import re

BENCH_RESULT = "BENCH_RESULT "
"""Marker of the bench process's record line (``results_schema.records.models.BenchRecord`` JSON)."""

OFFLOAD_EVIDENCE = "OFFLOAD_EVIDENCE "
"""Marker of the evidence hook's line (``results_schema.records.models.RuntimeEvidence`` JSON)."""

OFFLOAD_CPU_KERNELS = "OFFLOAD_CPU_KERNELS "
"""Marker of the CPU kernel report (``results_schema.records.case_outcome.CpuKernelEvidence`` JSON)."""

_PROCESS_TAGS = re.compile(r"(?:\([^()]*\)\s*)+")


def marked_lines(log_text: str, marker: str) -> list[str]:
    """The payload (rest of the line after ``marker``) of every line of ``log_text`` carrying ``marker``.

    Args:
        log_text: the whole log, any line endings.
        marker: one of this module's markers (ends with its separating space).

    Returns:
        The payloads in log order, duplicates kept (a check counts them).
    """
    out = []
    for line in log_text.splitlines():
        idx = line.find(marker)
        if idx < 0:
            continue
        if idx == 0 or _PROCESS_TAGS.fullmatch(line[:idx]):
            out.append(line[idx + len(marker):])
    return out


KV_CACHE_GIB = re.compile(r"Available KV cache memory:\s*([-+\u2212]?\s*\d[\d,]*(?:\.\d+)?)\s*GiB")
"""vLLM's ``Available KV cache memory: 15.66 GiB`` (thousands separators, a sign: negative = no room for
KV cache; vLLM logs it once per engine profile, wherever in the line, after any logger prefix)."""


def kv_cache_gib_values(log_text: str) -> list[float]:
    """Every ``Available KV cache memory`` value of ``log_text`` in GiB, in log order (:data:`KV_CACHE_GIB`).

    Returns:
        One value per occurrence, sign kept (``"-1,024.5"`` -> ``-1024.5``); [] when the log has none.
    """
    return [float(v.replace(",", "").replace("\u2212", "-").replace(" ", "")) for v in KV_CACHE_GIB.findall(log_text)]
