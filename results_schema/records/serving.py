"""Strict models of the serving phase: a real vLLM OpenAI-compatible server per case, driven by
vLLM's own serving benchmark (``vllm.benchmarks.serve``, the module behind ``vllm bench serve``)
over a sweep of request rates.

Files (names are part of the contract; ``results_schema.records.dispatch`` maps them):

    cases/<phase>/<label>-r<k>.serving-case.json   ``ServingCaseSpec``  what the case process runs
    records/<phase>/<label>-r<k>.serving.json       ``ServingCaseResult`` what it measured (or its fault)
    records/<phase>/<label>-r<k>/rate-<i>.requests.json  ``ServingRequests`` per-request raw data
    <phase>-serving.jsonl                           ``ServingRun``  one line per (case, repeat, rate)
    <phase>-failures.jsonl                          ``results_schema.records.case_outcome.CaseFailure`` (faults)

Metric definitions are vLLM's (``vllm/benchmarks/serve.py``, ``calculate_metrics``):

* TTFT: request send -> first streamed chunk *with content* (completions endpoint, so the
  chat "role only" first chunk does not exist).
* TPOT of one request = (E2E - TTFT) / (output tokens - 1), only for requests with more than
  one output token; percentiles are over requests. TTFT 200 ms, E2E 1200 ms, 11 tokens ->
  TPOT 100 ms.
* ITL: every gap between consecutive streamed chunks, pooled over all requests (a server that
  sends 10 tokens at once every 10 s has TPOT 1 s but ITL 10 s). TPOT and ITL are different
  numbers and are kept apart.
* E2E (``e2el``): request send -> last chunk.
* Output and prompt token counts come from the server's ``usage`` (not re-tokenised text).
  The server's prompt count must equal the dataset's count of that prompt and lie within
  ``PROMPT_LEN_TOLERANCE`` of the requested input length (vLLM's random prompts are decoded and
  re-encoded, which can add a token; a tokenizer mismatch multiplies the count).
* Request rate ``null`` means vLLM's ``inf`` (every request sent at t = 0); a finite rate draws
  Poisson gaps (burstiness 1) rescaled so the last send lands at N / rate. The achieved rate
  is ``request_throughput_req_s`` (completed / measured window).
* Goodput: completed requests per second whose TTFT and TPOT both meet the SLO (vLLM's
  ``--goodput ttft:<ms> tpot:<ms>``; a request with one output token has TPOT 0).

What is deliberately not modelled: statistics across cases or repeats (``analysis.serving.summary``).
This module must not import vLLM or torch.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from results_schema.records.dispatch import FileKind
from results_schema.records.base import REL_TOL, rel_close
from results_schema.records.base import NonNegFloat, NonNegInt, StrictModel
from results_schema.records.case_outcome import KVCacheCapacity, ServingFaultCause
from results_schema.records.host_load import HostLoad
from results_schema.records.models import RuntimeEvidence
from results_schema.records.serving_spec import (
    Fraction,
    PosFloat,
    PosInt,
    ServingEngine,
    ServingLoad,
    ServingSLO,
    Sha256Hex,
)
from results_schema.records.identity import EngineCase


FILE_KINDS: list[FileKind] = [
    FileKind("*.serving-case.json", "results_schema.records.serving_spec:ServingCaseSpec", jsonl=False),
    FileKind("*.serving.json", "results_schema.records.serving:ServingCaseResult", jsonl=False),
    FileKind("*.requests.json", "results_schema.records.serving:ServingRequests", jsonl=False),
    FileKind("*-serving.jsonl", "results_schema.records.serving:ServingRun", jsonl=True),
    FileKind("summary/serving-summary.json", "results_schema.records.serving_summary:ServingSummary", jsonl=False),
]
"""Dispatch entries contributed to ``results_schema.records.dispatch`` (they win over ``records/*/*.json``)."""

PROMPT_LEN_TOLERANCE = 0.1
"""Largest relative difference between a server-counted prompt and the requested input length."""

SERVING_SUFFIX = "-serving.jsonl"
"""File name suffix of a serving phase's lines (``<phase>-serving.jsonl``)."""


class LatencyStats(StrictModel):
    """Mean and percentiles of one latency metric over a rate's measured requests (ms, vLLM's numbers)."""

    mean_ms: NonNegFloat = Field(description="Mean (ms).")
    p50_ms: NonNegFloat = Field(description="50th percentile (ms; numpy linear interpolation).")
    p90_ms: NonNegFloat = Field(description="90th percentile (ms).")
    p99_ms: NonNegFloat = Field(description="99th percentile (ms).")

    @model_validator(mode="after")
    def _ordered(self) -> "LatencyStats":
        if not (self.p50_ms <= self.p90_ms * (1 + REL_TOL) and self.p90_ms <= self.p99_ms * (1 + REL_TOL)):
            raise ValueError(f"percentiles must be ordered p50 <= p90 <= p99 (got {self.p50_ms}, {self.p90_ms}, "
                             f"{self.p99_ms})")
        return self


class RateResult(StrictModel):
    """One request rate of one case: vLLM's serving-benchmark metrics plus server-side token checks."""

    index: NonNegInt = Field(description="Position in the sweep (0-based).")
    request_rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    max_concurrency: PosInt | None = Field(description="Client-side concurrency cap; null = none.")
    num_prompts: PosInt = Field(description="Measured requests sent (warm-up excluded).")
    completed: NonNegInt = Field(description="Requests that succeeded.")
    failed: NonNegInt = Field(description="Requests that failed (error or dropped connection).")
    duration_s: PosFloat = Field(
        description="Measured window: first measured send to last completion (s; vLLM's benchmark duration).")
    started_at_unix_s: PosFloat = Field(description="Wall clock (Unix s) when the rate's benchmark call started.")
    request_throughput_req_s: NonNegFloat = Field(description="Achieved rate = completed / duration_s (req/s).")
    output_throughput_tok_s: NonNegFloat = Field(description="total_output_tokens / duration_s (tok/s).")
    total_token_throughput_tok_s: NonNegFloat = Field(description="(input + output tokens) / duration_s (tok/s).")
    total_input_tokens: NonNegInt = Field(description="Prompt tokens of completed requests (server usage).")
    total_output_tokens: NonNegInt = Field(description="Output tokens of completed requests (server usage).")
    prompt_tokens_min: NonNegInt = Field(description="Smallest server-counted prompt of a completed request.")
    prompt_tokens_max: NonNegInt = Field(description="Largest server-counted prompt of a completed request.")
    output_tokens_min: NonNegInt = Field(description="Smallest server-counted output of a completed request.")
    output_tokens_max: NonNegInt = Field(description="Largest server-counted output of a completed request.")
    distinct_prompts: NonNegInt = Field(
        description="Distinct prompt texts among the measured requests (vLLM's RandomDataset builds each prompt "
                    "from a random offset into the vocabulary, so a small vocabulary can repeat one); warm-up "
                    "requests all reuse the first prompt. With prefix caching off a repeat is not a cache hit.")
    ttft: LatencyStats = Field(description="Time to first token (ms).")
    tpot: LatencyStats = Field(description="Time per output token, per request, excluding the first (ms).")
    itl: LatencyStats = Field(description="Inter-token latency, every chunk gap pooled over requests (ms).")
    e2el: LatencyStats = Field(description="End-to-end request latency (ms).")
    goodput_req_s: NonNegFloat = Field(description="vLLM request goodput under the SLO (good requests / duration_s).")
    good_requests: NonNegInt = Field(description="Requests meeting the SLO = goodput_req_s * duration_s.")
    slo_attainment: Fraction = Field(description="good_requests / completed (0 when nothing completed).")
    peak_concurrent_requests: NonNegInt = Field(description="vLLM's max concurrent requests in one second.")
    requests_path: str = Field(description="Per-request ServingRequests file, relative to the run directory.")
    requests_sha256: Sha256Hex = Field(description="SHA-256 of that file.")
    host_load: HostLoad | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="The host over this rate's load (runners.incase.host_load: foreign CPU work beside the case "
                    "process tree, which holds the API server and the benchmark client); absent where not read.")

    @model_validator(mode="after")
    def _check(self) -> "RateResult":
        if self.completed + self.failed != self.num_prompts:
            raise ValueError(f"completed ({self.completed}) + failed ({self.failed}) != num_prompts "
                             f"({self.num_prompts})")
        d = self.duration_s
        for name, num in (("request_throughput_req_s", self.completed),
                          ("output_throughput_tok_s", self.total_output_tokens),
                          ("total_token_throughput_tok_s", self.total_input_tokens + self.total_output_tokens)):
            if not rel_close(getattr(self, name), num / d):
                raise ValueError(f"{name} ({getattr(self, name)}) != {num} / duration_s ({d})")
        if abs(self.good_requests - self.goodput_req_s * d) > 1e-6 * max(1.0, self.good_requests):
            raise ValueError(f"good_requests ({self.good_requests}) != goodput_req_s * duration_s "
                             f"({self.goodput_req_s} * {d})")
        if self.good_requests > self.completed:
            raise ValueError(f"good_requests ({self.good_requests}) > completed ({self.completed})")
        want = self.good_requests / self.completed if self.completed else 0.0
        if not rel_close(self.slo_attainment, want):
            raise ValueError(f"slo_attainment ({self.slo_attainment}) != good_requests / completed ({want})")
        if self.distinct_prompts > self.num_prompts:
            raise ValueError(f"distinct_prompts ({self.distinct_prompts}) > num_prompts ({self.num_prompts})")
        if self.completed and not (self.prompt_tokens_min <= self.prompt_tokens_max
                                   and self.output_tokens_min <= self.output_tokens_max):
            raise ValueError("token minima must not exceed maxima")
        return self


LATENCY_PERCENTILES: tuple[int, ...] = tuple(int(m[1]) for n in LatencyStats.model_fields
                                              if (m := re.fullmatch(r"p(\d+)_ms", n)))
"""The percentiles every ``LatencyStats`` records, from its fields named exactly ``p<N>_ms`` (50, 90, 99): what the serving driver
asks vLLM's benchmark for (``--metric-percentiles``) and the analysis recomputes."""
LATENCY_METRICS: tuple[str, ...] = tuple(n for n, f in RateResult.model_fields.items() if f.annotation is LatencyStats)
"""The latency metrics every ``RateResult`` records, from its ``LatencyStats`` fields (ttft, tpot, itl, e2el): vLLM's
``--percentile-metrics``."""


class RequestOutcome(StrictModel):
    """One measured request as vLLM's benchmark client saw it (seconds)."""

    success: bool = Field(description="The request completed.")
    prompt_tokens: NonNegInt = Field(description="Prompt tokens (server usage when it completed).")
    dataset_prompt_tokens: NonNegInt = Field(
        description="Prompt tokens the benchmark's dataset counted for this prompt (client tokenizer, after vLLM's "
                    "decode/re-encode adjustment); the server's count must equal it.")
    output_tokens: NonNegInt = Field(description="Output tokens (server usage); 0 when it failed.")
    ttft_s: NonNegFloat = Field(description="Time to first content chunk (s); 0 when it failed.")
    latency_s: NonNegFloat = Field(description="End-to-end latency (s); 0 when it failed.")
    itl_s: tuple[NonNegFloat, ...] = Field(description="Gaps between consecutive streamed chunks (s).")
    error: str = Field(description="Error text of a failed request ('' on success).")
    output_token_ids_sha256: Sha256Hex | None = Field(
        description="SHA-256 of the output token ids the server streamed (return_token_ids; comma-joined "
                    "decimals, runners.incase.serving.token_ids); null when the request failed. Compared with "
                    "the baseline's for the same prompt at the same rate (analysis.serving.outputs).")


class ServingRequests(StrictModel):
    """``records/<phase>/<stem>/rate-<i>.requests.json``: raw per-request data of one rate."""

    schema_version: Literal[1] = Field(default=1, description="Schema version (always 1).")
    phase: str = Field(description="Matrix phase.")
    label: str = Field(description="Case label.")
    repeat: NonNegInt = Field(description="Repeat index.")
    rate_index: NonNegInt = Field(description="Position of the rate in the sweep.")
    request_rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    requests: tuple[RequestOutcome, ...] = Field(description="Measured requests, in dataset order.")


class ServerStartup(StrictModel):
    """How the API server came up."""

    argv: tuple[str, ...] = Field(description="Exact argv of the server process.")
    host: Literal["127.0.0.1"] = Field(description="Loopback address it listened on.")
    port: Annotated[int, Field(ge=1, le=65535)] = Field(description="Free port chosen for it.")
    pid: PosInt = Field(description="PID of the API server (leader of its own process group).")
    healthy_after_s: NonNegFloat | None = Field(description="Launch -> first GET /health 200 (s); null if never.")
    health_polls: NonNegInt = Field(description="GET /health attempts made.")
    log_path: str = Field(description="Server log, relative to the run directory.")


class Teardown(StrictModel):
    """How the server's whole process tree was stopped (process group + every descendant seen)."""

    processes_seen: NonNegInt = Field(description="Server process + descendants observed while it ran.")
    server_exited_before_stop: bool = Field(description="The API server process had already exited when stop began.")
    sigterm_sent: bool = Field(description="SIGTERM was sent to the process group.")
    escalated_to_sigkill: bool = Field(description="Something was still alive after the grace period: SIGKILL sent.")
    left_after_sigterm: tuple[str, ...] = Field(
        description="'pid name' of processes alive after SIGTERM + grace (before SIGKILL).")
    left_after_kill: tuple[str, ...] = Field(description="'pid name' of processes alive at the end (must be empty).")
    port_free: bool = Field(description="The server's port could be bound again after teardown.")
    teardown_s: NonNegFloat = Field(description="Seconds spent stopping the tree.")


class ServingFault(StrictModel):
    """The first thing that went wrong in a serving case."""

    cause: ServingFaultCause = Field(description="What went wrong.")
    message: str = Field(description="One line naming the case, the rate and the values.")
    rate_index: NonNegInt | None = Field(default=None, description="Rate being measured, if any.")
    server_exit_code: int | None = Field(default=None, description="Server return code if it had exited (<0 = signal).")


class ServedCase(EngineCase):
    """An ``EngineCase`` served over HTTP: the server's other engine arguments, the benchmark client and the SLO."""

    engine: ServingEngine = Field(description="Other engine arguments of the server.")
    load: ServingLoad = Field(description="Benchmark client settings (the whole sweep).")
    slo: ServingSLO = Field(description="Goodput SLO.")


class ServingCaseResult(ServedCase):
    """``records/<phase>/<stem>.serving.json``: what one serving case process measured, or its fault (after its
    ``ServedCase`` fields)."""

    server: ServerStartup = Field(description="Server launch and readiness.")
    rates: tuple[RateResult, ...] = Field(description="Completed rates, in sweep order.")
    teardown: Teardown = Field(description="How the server tree was stopped.")
    fault: ServingFault | None = Field(description="First fault; null when every rate ran and teardown was clean.")
    vllm_version: str = Field(description="vllm.__version__ of the benchmark client.")
    wall_s: NonNegFloat = Field(description="Case process wall seconds (server start to teardown end).")

    @model_validator(mode="after")
    def _check(self) -> "ServingCaseResult":
        if [r.index for r in self.rates] != list(range(len(self.rates))):
            raise ValueError(f"rate indices {[r.index for r in self.rates]} must be 0..{len(self.rates) - 1}")
        for r in self.rates:
            if r.request_rate_rps != self.load.request_rates_rps[r.index]:
                raise ValueError(f"rate {r.index}: {r.request_rate_rps} != configured "
                                 f"{self.load.request_rates_rps[r.index]}")
        if self.fault is None:
            if len(self.rates) != len(self.load.request_rates_rps):
                raise ValueError(f"no fault but {len(self.rates)} of {len(self.load.request_rates_rps)} rates ran")
            if self.teardown.left_after_kill or not self.teardown.port_free:
                raise ValueError("no fault but the teardown left processes or the port behind")
        return self


class ServingRun(ServedCase):
    """One line of ``<phase>-serving.jsonl``: one (case, repeat, rate) with the server's evidence (after its
    ``ServedCase`` fields)."""

    rate: RateResult = Field(description="This rate's metrics.")
    evidence: RuntimeEvidence = Field(description="Offloader evidence published inside the server's engine process.")
    kv_cache: KVCacheCapacity = Field(description="KV cache capacity parsed from the server log.")
    server_healthy_after_s: NonNegFloat = Field(description="Server launch -> healthy (s).")
    teardown_s: NonNegFloat = Field(description="Seconds spent stopping the server tree.")
    process_wall_s: NonNegFloat = Field(description="Wall seconds of the case process.")
    log_path: str = Field(description="Case process log, relative to the run directory.")
    server_log_path: str = Field(description="Server log, relative to the run directory.")
    evidence_path: str = Field(description="Evidence sidecar, relative to the run directory.")
    record_path: str = Field(description="ServingCaseResult file, relative to the run directory.")
    command: tuple[str, ...] = Field(description="argv of the case process.")
    step_delay_ms: NonNegFloat = Field(
        default=0.0, exclude_if=lambda v: not v, description="Speed control: ms every forward of a baseline server's model slept first (no "
        "byte moved; offload.controls); 0 = none. Its outputs join the baselines' floor, its timing does not.")

    @model_validator(mode="after")
    def _check(self) -> "ServingRun":
        if self.step_delay_ms and self.implementation != "baseline":
            raise ValueError(f"step_delay_ms {self.step_delay_ms} on implementation {self.implementation!r}: the "
                             "speed control is a baseline")
        if self.rate.index >= len(self.load.request_rates_rps) or \
                self.load.request_rates_rps[self.rate.index] != self.rate.request_rate_rps:
            raise ValueError(f"rate {self.rate.index} ({self.rate.request_rate_rps}) is not in the sweep "
                             f"{self.load.request_rates_rps}")
        if self.evidence.implementation != self.implementation:
            raise ValueError(f"evidence implementation {self.evidence.implementation!r} != {self.implementation!r}")
        return self


