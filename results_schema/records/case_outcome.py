"""What the runner reads from a case log, and how a case failed.

``KVCacheCapacity`` and ``CpuKernelEvidence`` are parsed from the case log (``runners.outcome.case_log``);
``CaseFailure`` is one line of ``<phase>-failures.jsonl`` per case that produced no data point.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from results_schema.records.base import FiniteFloat, NonNegFloat, NonNegInt, StrictModel
from results_schema.records.identity import CaseKey


class KVCacheCapacity(StrictModel):
    """KV cache capacity parsed from the case log; null fields when the line is absent."""

    kv_cache_tokens: NonNegInt | None = Field(default=None, description="'GPU/CPU KV cache size: N tokens'.")
    kv_cache_gib: FiniteFloat | None = Field(
        default=None,
        description="'Available KV cache memory: X GiB', the last such line; negative = no room for KV cache "
                    "(the case then fails with no_kv_cache_memory).",
    )
    kv_cache_gib_history: tuple[FiniteFloat, ...] = Field(
        default=(),
        exclude_if=lambda v: not v,  # written only when present: lines from before this field stay byte-identical
        description="Every 'Available KV cache memory' value in log order, when the log holds more than one "
                    "(empty otherwise); the value changed when they differ.",
    )
    max_concurrency: NonNegFloat | None = Field(
        default=None, description="'Maximum concurrency for T tokens per request: Xx'."
    )


class CpuKernelEvidence(StrictModel):
    """The ``OFFLOAD_CPU_KERNELS`` line of a CPU case: which GEMM kernel each linear layer got.

    Printed by ``offload.cpu_kernels`` in the process that loaded the model, after
    ``load_model``; the runner checks it against the path it asked for.
    """

    path: Literal["plain", "packed"] = Field(description="CPU kernel path the case ran with.")
    layers: NonNegInt = Field(description="UnquantizedLinearMethod layers processed (tiny model: 4 per decoder layer).")
    kernels: dict[str, NonNegInt] = Field(
        description="Layers per kernel: torch_linear (plain), onednn, sgl_weight_packed, zentorch, other."
    )



ServingFaultCause = Literal[
    "server_never_healthy",
    "server_exited_before_healthy",
    "server_died",
    "server_left_processes",
    "rate_timeout",
    "benchmark_error",
    "token_count_mismatch",
    "request_failed",
]
"""Why a serving case produced no data point (closed set; also the ``error_type`` of its CaseFailure)."""

FailureType = Literal[
    "timeout",
    "signal",
    "nonzero_exit",
    "no_result",
    "duplicate_result",
    "missing_evidence",
    "evidence_mismatch",
    "no_offload_evidence",
    "invalid_record",
    "launch_error",
    ServingFaultCause,
    "no_kv_cache_memory",
    "worker_signal",
    "kernel_mismatch",
    "kv_cache_lines",
    "engine_rejected",
    "engine_accepted_invalid",
]


class CaseFailure(CaseKey):
    """One line of ``<phase>-failures.jsonl``: a case that did not produce a data point (after its ``CaseKey``)."""

    failure_type: FailureType = Field(description="What went wrong, as a closed set.")
    exit_code: int | None = Field(description="Process exit code; null when killed by a signal or never started.")
    signal: int | None = Field(default=None, description="Signal number that ended the process, if any.")
    error_type: str | None = Field(default=None, description="Exception class named in the log, e.g. AssertionError.")
    error_message: str = Field(description="One-line explanation naming the case.")
    log_tail: tuple[str, ...] = Field(description="Last log lines.")
    log_path: str = Field(description="Case log, relative to the run directory.")
    duration_s: NonNegFloat = Field(description="Wall seconds from launch to end.")
    kv_cache: KVCacheCapacity | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="KV cache capacity parsed from the case log (absent when the log had no form of it)."
    )
