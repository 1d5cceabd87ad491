"""``cases/<phase>/<stem>.serving-case.json``: what one serving case process runs (:mod:`results_schema.records.serving`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from results_schema.records.base import NonNegFloat, NonNegInt, StrictModel
from results_schema.records.identity import OffloadSetting
from results_schema.records.identity import CaseKey


PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ServingSLO(StrictModel):
    """The service-level objective goodput is measured against.

    A request is *good* when its TTFT <= ``ttft_ms`` and its TPOT <= ``tpot_ms`` (vLLM's goodput
    rule). A rate *meets the SLO* when no request failed and at least ``attainment`` of the
    completed requests were good (``analysis.serving.summary``).
    """

    ttft_ms: PosFloat = Field(description="TTFT limit of one request (ms).")
    tpot_ms: PosFloat = Field(description="TPOT limit of one request (ms).")
    attainment: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        description="Fraction of completed requests that must be good for a rate to meet the SLO.")


class ServingLoad(StrictModel):
    """What the benchmark client sends (``vllm.benchmarks.serve`` arguments)."""

    backend: Literal["openai"] = Field(description="vLLM benchmark backend (streaming /v1/completions).")
    endpoint: Literal["/v1/completions"] = Field(
        description="API endpoint; the completions endpoint has no content-free first chunk.")
    dataset: Literal["random"] = Field(description="vLLM RandomDataset: independent random token ids per request.")
    num_prompts: PosInt = Field(description="Measured requests per rate.")
    input_len: PosInt = Field(description="Requested prompt length (tokens).")
    output_len: PosInt = Field(description="Requested output length (tokens; ignore_eos makes it exact).")
    seed: NonNegInt = Field(description="Dataset and arrival-time seed (the same prompts at every rate and case).")
    num_warmups: NonNegInt = Field(description="Warm-up requests before the clock starts (excluded).")
    burstiness: PosFloat = Field(description="Gamma shape of inter-arrival gaps (1 = Poisson).")
    max_concurrency: PosInt | None = Field(description="Client-side cap on in-flight requests; null = none.")
    temperature: NonNegFloat = Field(description="Sampling temperature sent with every request.")
    ignore_eos: Literal[True] = Field(description="Generation runs to output_len (token counts are exact).")
    request_rates_rps: tuple[PosFloat | None, ...] = Field(
        min_length=1, description="Configured request rates (req/s; null = inf, all sent at t=0) in the order "
                                  "this case ran them: the phase's order rotated by the repeat index "
                                  "(runners.launching.serving_case.rotated).")


class ServingEngine(StrictModel):
    """Engine arguments of the API server besides the offload setting."""

    dtype: str = Field(description="vLLM --dtype.")
    max_model_len: Annotated[int, Field(ge=2)] = Field(description="vLLM --max-model-len (tokens).")
    enforce_eager: bool = Field(description="vLLM --enforce-eager.")
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        description="vLLM --gpu-memory-utilization (fraction).")
    seed: NonNegInt = Field(description="vLLM --seed.")
    enable_prefix_caching: bool | None = Field(
        description="vLLM --[no-]enable-prefix-caching as passed to the server; null = not passed (vLLM's default).")
    trust_remote_code: bool | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="vLLM --trust-remote-code when true; null/false = not passed (absent: written before this field).")
    max_num_seqs: Annotated[int, Field(ge=1)] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="vLLM --max-num-seqs; null = not passed.")
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="vLLM --max-num-batched-tokens (tokens; max_model_len x the workload's factor); null = not passed.")


class ServingLimits(StrictModel):
    """Bounds of the case process."""

    health_timeout_s: PosFloat = Field(description="Longest wait for GET /health to return 200 (s).")
    health_poll_s: PosFloat = Field(description="Seconds between two /health polls.")
    rate_timeout_s: PosFloat = Field(description="Longest benchmark run of one rate (s).")
    stop_grace_s: PosFloat = Field(description="Seconds between SIGTERM to the server's group and SIGKILL.")


class ServingCaseSpec(CaseKey):
    """``cases/<phase>/<stem>.serving-case.json``: everything one serving case process runs.

    Written by ``runners.matrix``; read by ``python -m runners.incase.serving --case FILE``.
    """

    runtime: str = Field(description="Runtime name (cpu, cuda, ascend_latest, ...).")
    device: str = Field(description="Device kind: cpu, cuda, npu.")
    model: str = Field(description="Model directory served.")
    offload: OffloadSetting = Field(description="Offload engine arguments of the server.")
    engine: ServingEngine = Field(description="Other engine arguments of the server.")
    load: ServingLoad = Field(description="Benchmark client settings.")
    slo: ServingSLO = Field(description="Goodput SLO.")
    limits: ServingLimits = Field(description="Timeouts of the case process.")
    server_command: tuple[str, ...] = Field(
        min_length=1, description="argv prefix of the server (default: python -m vllm.entrypoints.openai.api_server).")
    record_path: str = Field(description="Absolute path of the ServingCaseResult to write.")
    requests_dir: str = Field(description="Absolute directory of the per-rate ServingRequests files.")
    server_log_path: str = Field(description="Absolute path of the server's log (new file).")
