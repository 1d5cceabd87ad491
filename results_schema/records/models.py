"""Strict pydantic models of everything this project writes to disk.

Every model is frozen, forbids unknown fields, carries ``schema_version``
(``Literal[1]``) and rejects non-finite floats (NaN/inf), so a record that
parses is a record that can be trusted. Units are in field names
(``_bytes``, ``_s``, ``_tok_s``, ``_gib``) and in descriptions.

What is deliberately not modelled here: anything derived (aggregates,
verdicts) is analysis output and lives in ``analysis``; this package must
not import vLLM or torch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from results_schema.records.process_state import ProcessState
from results_schema.records.inprocess import InProcessRounds, check_in_process_rounds

from results_schema.records.base import (
    Digest,
    Implementation,
    NonNegFloat,
    NonNegInt,
    PromptMode,
    SchemaVersion,
    StrictModel,
    rel_close,
)
from results_schema.records.case_outcome import (
    CpuKernelEvidence,
    KVCacheCapacity,
)
from results_schema.records.host_load import HostLoad
from results_schema.records.identity import EngineCase
from results_schema.records.load_metrics import (
    check_before_peak_after,
    check_device_memory,
    check_requests,
    check_round_latency,
)


class RuntimeEvidence(StrictModel):
    """What the offloader really did, observed in the process that loaded the model.

    Written by ``runners/incase/evidence_hook/sitecustomize.py``. Layer indices come
    from the modules actually passed through ``wrap_modules`` and actually
    wrapped, never from the selection formula. A baseline publishes explicit
    empty evidence (``offloader_class`` of the no-op offloader, zero bytes).
    """

    schema_version: SchemaVersion = Field(default=1, description="Schema version of this record (always 1).")
    offloader_class: str = Field(description="Fully qualified class name of the installed offloader.")
    implementation: Implementation = Field(description="Implementation switch the process was started with.")
    offload_group_size: NonNegInt = Field(description="G as seen by the offloader.")
    offload_num_in_group: NonNegInt = Field(description="N as seen by the offloader.")
    offload_prefetch_step: NonNegInt = Field(description="prefetch_step as seen by the offloader (0 when not applicable).")
    offload_params: tuple[str, ...] = Field(default=(), description="offload_params segments as seen by the offloader.")
    num_layers: NonNegInt = Field(description="Decoder layers passed to wrap_modules (0 if never called).")
    selected_layers: tuple[NonNegInt, ...] = Field(description="Layer indices the offloader selected.")
    wrapped_layers: tuple[NonNegInt, ...] = Field(
        description="Layer indices with at least one parameter really moved to host storage."
    )
    wrapped_count: NonNegInt = Field(description="Number of modules really wrapped (== len(wrapped_layers)).")
    offloaded_bytes: NonNegInt = Field(description="Bytes of parameters held in host storage, after post_init.")
    static_buffer_bytes: NonNegInt = Field(description="Bytes of device-side static prefetch buffers.")
    released_bytes: int = Field(description="Net device bytes released = offloaded_bytes - static_buffer_bytes.")
    post_init_called: bool = Field(description="Whether post_init ran (weights re-synced after processing).")
    pid: NonNegInt = Field(description="PID of the process that loaded the model.")
    device: str = Field(description="Device type the model ran on: cpu, cuda, npu.")
    copy_protocol: Literal["synchronous", "captured_join", "crossing", "compute_stream"] | None = Field(
        default=None,
        description="Event protocol of this project's offloader's copies: synchronous (CPU), captured_join "
                    "(every refill captured and joined inside a graph, upstream's), crossing (refills whose "
                    "consumer is in the next step issued before each replay behind external events), "
                    "compute_stream (sync reference); null when not recorded (other offloaders, older records).",
    )

    @model_validator(mode="after")
    def _check_counts(self) -> "RuntimeEvidence":
        if self.wrapped_count != len(self.wrapped_layers):
            raise ValueError(
                f"wrapped_count ({self.wrapped_count}) != len(wrapped_layers) ({len(self.wrapped_layers)})"
            )
        if not set(self.wrapped_layers) <= set(self.selected_layers):
            raise ValueError(
                f"wrapped_layers {self.wrapped_layers} not a subset of selected_layers {self.selected_layers}"
            )
        if self.released_bytes != self.offloaded_bytes - self.static_buffer_bytes:
            raise ValueError(
                f"released_bytes ({self.released_bytes}) != offloaded_bytes ({self.offloaded_bytes}) "
                f"- static_buffer_bytes ({self.static_buffer_bytes})"
            )
        return self


DEFAULT_MIN_MEASURED_S = 3.0
"""Default minimum measured window per case (seconds): measured rounds repeat until both
``measured_rounds`` and this many seconds are reached, as MLPerf LoadGen's ``min_duration``
(600 s for its formal runs) does. The runner's default (``conf.schema_stack.WorkloadConfig.min_measured_s``)
and the shortest window ``analysis validate`` accepts without a warning (``short_measurement_window``).
3 s keeps the embedded CPU default (5 cases, ~0.15 s rounds) at ~20 rounds per case for ~15 s of extra
wall time; ``conf/workload/seed.yaml`` asks 10 s. The seed design measured 3 rounds x 64 tokens, about
0.4 s against ~20 s of engine load, and nothing flagged it."""


class WorkloadSpec(StrictModel):
    """The offline-throughput workload of one case."""

    num_prompts: Annotated[int, Field(ge=1)] = Field(description="Prompts per round.")
    input_len: Annotated[int, Field(ge=1)] = Field(description="Exact prompt length in tokens.")
    max_tokens: Annotated[int, Field(ge=1)] = Field(description="Max output tokens per request.")
    max_model_len: Annotated[int, Field(ge=2)] = Field(description="vLLM max_model_len (tokens).")
    seed: NonNegInt = Field(description="Sampling and prompt seed.")
    dtype: str = Field(description="Model dtype passed to vLLM (bfloat16, float16, auto).")
    enforce_eager: bool = Field(description="vLLM enforce_eager.")
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = Field(
        description="vLLM gpu_memory_utilization (fraction)."
    )
    warmup_rounds: NonNegInt = Field(description="Rounds run and excluded from measurement.")
    measured_rounds: Annotated[int, Field(ge=1)] = Field(
        description="Minimum measured rounds (more run while the measured window is shorter than min_measured_s)."
    )
    min_measured_s: NonNegFloat | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Minimum measured seconds per case: measured rounds repeat until both measured_rounds and this "
                    "are reached (like MLPerf LoadGen's min_duration). null: written before the window rule.",
    )
    enable_prefix_caching: bool | None = Field(
        description="vLLM enable_prefix_caching; null = not passed (vLLM's default, as the published runs).")
    prompts_vary_per_round: bool = Field(description="Whether each round uses fresh prompts (no prefix-cache reuse).")
    temperature: NonNegFloat = Field(default=0.0, description="Sampling temperature (0 = greedy).")
    # --- published-workload options; defaults = the project's own workload
    prompt_mode: PromptMode = Field(
        default=PromptMode.random_ids, description="random_ids: seeded token ids; seed_text: the published repeated seed "
        "text truncated to input_len tokens with the model's tokenizer (runners.incase.prompts).")
    prompt_seed_text: str | None = Field(default=None, description="Seed text of prompt_mode=seed_text "
                                         "(null = runners.incase.prompts.DEFAULT_SEED_TEXT).")
    ignore_eos: bool = Field(default=True, description="SamplingParams.ignore_eos (published runs: false).")
    trust_remote_code: bool = Field(default=False, description="vLLM trust_remote_code.")
    max_num_seqs: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="vLLM max_num_seqs; null = vLLM's default (published: 8).")
    max_num_batched_tokens_factor: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="vLLM max_num_batched_tokens = max_model_len x this; null = vLLM's default "
        "(published: 8).")

    @model_serializer(mode="wrap")
    def _omit_default_published_options(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave the published-workload options out while at their defaults: records of the project's
        own workload serialize exactly as before these fields existed (they parse back to the defaults)."""
        data = handler(self)
        for name in _PUBLISHED_OPTIONS:
            if name in data and data[name] == WorkloadSpec.model_fields[name].default:
                del data[name]
        return data


_PUBLISHED_OPTIONS = ("prompt_mode", "prompt_seed_text", "ignore_eos", "trust_remote_code", "max_num_seqs",
                      "max_num_batched_tokens_factor")


class RoundResult(StrictModel):
    """One measured round: one ``LLM.generate`` call over all prompts."""

    index: NonNegInt = Field(description="Measured round index (warmup excluded).")
    elapsed_s: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = Field(description="Wall seconds of the generate call.")
    prompt_tokens: NonNegInt = Field(description="Prompt tokens actually submitted.")
    output_tokens: NonNegInt = Field(description="Tokens actually generated (sum of len(token_ids)).")
    throughput_tok_s: NonNegFloat = Field(description="output_tokens / elapsed_s (tok/s).")
    token_digest: Digest = Field(description="SHA-256 (hex) of the generated token ids of every request, in prompt order.")

    @model_validator(mode="after")
    def _check_throughput(self) -> "RoundResult":
        if not rel_close(self.throughput_tok_s, self.output_tokens / self.elapsed_s):
            raise ValueError(
                f"throughput_tok_s ({self.throughput_tok_s}) != output_tokens / elapsed_s "
                f"({self.output_tokens} / {self.elapsed_s})"
            )
        return self


class MeasurementWindow(StrictModel):
    """How long one case process measured: the window its throughput rests on."""

    measured_s: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = Field(
        description="Sum of measured-round wall seconds (= BenchRecord.elapsed_s)."
    )
    rounds: Annotated[int, Field(ge=1)] = Field(description="Measured rounds run (= len(BenchRecord.rounds)).")
    min_measured_s: NonNegFloat = Field(description="Minimum measured seconds asked for (workload.min_measured_s).")
    min_rounds: Annotated[int, Field(ge=1)] = Field(description="Minimum measured rounds asked for (measured_rounds).")
    reached: bool = Field(description="measured_s >= min_measured_s and rounds >= min_rounds.")

    @model_validator(mode="after")
    def _check_reached(self) -> "MeasurementWindow":
        want = self.measured_s >= self.min_measured_s and self.rounds >= self.min_rounds
        if self.reached != want:
            raise ValueError(f"reached ({self.reached}) contradicts measured_s {self.measured_s} / rounds "
                             f"{self.rounds} vs minimum {self.min_measured_s} s / {self.min_rounds} rounds")
        return self


class BenchRecord(EngineCase):
    """One case, one process: what ``runners.incase.bench_one`` measured and printed (after the case's key and
    engine, ``results_schema.records.identity.EngineCase``)."""

    workload: WorkloadSpec = Field(description="Workload the case ran.")
    load_seconds: NonNegFloat = Field(description="Seconds to construct LLM(...) (model load + engine start).")
    rounds: tuple[RoundResult, ...] = Field(description="Measured rounds, in order.")
    output_tokens: NonNegInt = Field(description="Sum of generated tokens over measured rounds.")
    elapsed_s: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = Field(
        description="Sum of measured-round wall seconds."
    )
    throughput_tok_s: NonNegFloat = Field(description="Process output throughput = output_tokens / elapsed_s (tok/s).")
    token_digest: Digest = Field(
        description="SHA-256 (hex) over the per-round token digests of the first measured_rounds rounds (greedy "
                    "identity check; rounds a minimum window adds beyond them vary per case and are not included)."
    )
    peak_rss_bytes: NonNegInt = Field(description="Peak resident set size of the bench process (bytes).")
    device_memory_bytes: NonNegInt | None = Field(
        default=None, description="Device memory in use after load (bytes); null on CPU."
    )
    window: MeasurementWindow | None = Field(
        default=None, exclude_if=lambda v: v is None, description="The measured window (seconds, rounds, minimum asked); null: written before the window rule."
    )
    # --- per-process metrics of the published bench_one; rules in results_schema.records.load_metrics
    requests: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Requests completed in the measured rounds = workload.num_prompts x len(rounds) (a round is one "
                    "LLM.generate call over all prompts); null: written before this field.")
    requests_per_s: NonNegFloat | None = Field(
        default=None, exclude_if=lambda v: v is None, description="requests / elapsed_s (req/s).")
    round_latency_p50_s: NonNegFloat | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="This process's P50 round latency: the 50th percentile of the measured rounds' elapsed_s "
                    "(seconds per generate call over all prompts; not a per-request latency), linear interpolation "
                    "(numpy method='linear', type 7).")
    round_latency_p95_s: NonNegFloat | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="The 95th percentile of the measured rounds' elapsed_s, as round_latency_p50_s (seconds).")
    rss_before_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="RSS of this process and its descendants just before LLM(...) (vLLM and torch imported), bytes.")
    rss_peak_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Peak RSS of this process and its descendants while LLM(...) ran: the maximum of samples every "
                    "runners.incase.memory_sampler.RSS_INTERVAL_S and of the before / after samples (bytes). peak_rss_bytes "
                    "is the peak over the whole process (load and measurement), hence >= this.")
    rss_after_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="RSS of this process and its descendants just after LLM(...) returned (bytes).")
    device_memory_before_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Used memory of the case's physical device (all processes on it) just before LLM(...), bytes "
                    "(npu-smi: HBM-Usage used MB x 2**20); null on CPU or when unavailable (device_memory_error).")
    device_memory_peak_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Peak used device memory while LLM(...) ran: samples every "
                    "runners.incase.memory_sampler.DEVICE_INTERVAL_S and the before / after samples (bytes).")
    device_memory_after_load_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Used device memory just after LLM(...) returned (bytes).")
    device_memory_total_bytes: NonNegInt | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Total memory of the case's physical device (npu-smi HBM total, nvidia-smi memory.total), bytes; "
                    "null on CPU or when unavailable. Free memory beside the baseline = total - peak used.")
    device_memory_source: Literal["npu-smi", "nvidia-smi"] | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Where the device memory before / peak / after came from: 'npu-smi' (npu-smi info, HBM-Usage of "
                    "the case's NPU and chip), 'nvidia-smi' (memory.used of the case's GPU).")
    device_memory_device: str | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="The physical device sampled, e.g. 'npu 3 chip 0' or 'cuda 1'.")
    device_memory_error: str | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Why device memory before / peak / after is null on an accelerator runtime (npu-smi missing, "
                    "unparsable, device not listed); analysis.validation.validate warns (missing, never 0).")
    host_load: HostLoad | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="The host's load over the measured window: CPU time outside the case's process tree and the "
                    "runner, steal, and whether that made the case contended (results_schema.records.host_load); "
                    "null: not read (no /proc/stat) or written before this field.")
    vllm_version: str = Field(description="vllm.__version__ in the case process.")
    torch_version: str = Field(description="torch.__version__ in the case process.")
    pid: NonNegInt = Field(description="PID of the bench process.")
    process_state: ProcessState | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Memory and thread placement of the bench process over its measured rounds (AnonHugePages, page "
                    "faults, CPU affinity, THP mode: results_schema.records.process_state); null where not read.")
    in_process: InProcessRounds | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="In-process case only (docs/inprocess.md): the measured rounds alternated the offloader's copies "
                    "off (A) and on (B) in ABBA order; per round its arm, mode and copies "
                    "(results_schema.records.inprocess). Null = a plain case. Never the verdict of record.")
    step_delay_ms: NonNegFloat = Field(
        default=0.0, exclude_if=lambda v: not v,
        description="Speed control (a known-size cost): ms every forward of a baseline's model slept first (no byte "
                    "moved; offload.controls); 0 = none. Judged against the phase's undelayed baselines, never one "
                    "of them, never on a front or in a recommendation.")

    @model_validator(mode="after")
    def _check_published_metrics(self) -> "BenchRecord":
        if self.step_delay_ms and self.implementation != "baseline":
            raise ValueError(f"step_delay_ms {self.step_delay_ms} on implementation {self.implementation!r}: the "
                             "speed control is a baseline")
        check_requests(self.requests, self.requests_per_s, num_prompts=self.workload.num_prompts,
                       rounds=len(self.rounds), elapsed_s=self.elapsed_s)
        check_round_latency(self.round_latency_p50_s, self.round_latency_p95_s, [r.elapsed_s for r in self.rounds])
        check_before_peak_after("RSS", self.rss_before_load_bytes, self.rss_peak_load_bytes, self.rss_after_load_bytes)
        if self.rss_peak_load_bytes is not None and self.peak_rss_bytes < self.rss_peak_load_bytes:
            raise ValueError(f"peak_rss_bytes ({self.peak_rss_bytes}) < rss_peak_load_bytes "
                             f"({self.rss_peak_load_bytes}): the process peak covers the load window")
        device = (self.device_memory_before_load_bytes, self.device_memory_peak_load_bytes,
                  self.device_memory_after_load_bytes)
        check_before_peak_after("device memory", *device)
        check_device_memory(device, self.device_memory_source, self.device_memory_error)
        return self

    @model_validator(mode="after")
    def _check_totals(self) -> "BenchRecord":
        n, want = len(self.rounds), self.workload.measured_rounds
        min_s = self.workload.min_measured_s
        if n < want:
            raise ValueError(f"rounds ({n}) < measured_rounds ({want})")
        if self.in_process is not None:
            check_in_process_rounds(self.in_process, self.rounds, want, min_s)
        elif n > want:
            before_last = sum(r.elapsed_s for r in self.rounds[:-1])
            if min_s is None or before_last >= min_s:
                raise ValueError(
                    f"rounds ({n}) > measured_rounds ({want}) although the window before the last round "
                    f"({before_last:.6g} s) already reached min_measured_s ({min_s})"
                )
        total = sum(r.output_tokens for r in self.rounds)
        if total != self.output_tokens:
            raise ValueError(f"output_tokens ({self.output_tokens}) != sum over rounds ({total})")
        indices = [r.index for r in self.rounds]
        if indices != list(range(len(self.rounds))):
            raise ValueError(f"round indices {indices} must be 0..{len(self.rounds) - 1} in order")
        elapsed = sum(r.elapsed_s for r in self.rounds)
        if not rel_close(self.elapsed_s, elapsed):
            raise ValueError(f"elapsed_s ({self.elapsed_s}) != sum of round elapsed_s ({elapsed})")
        if not rel_close(self.throughput_tok_s, self.output_tokens / self.elapsed_s):
            raise ValueError(
                f"throughput_tok_s ({self.throughput_tok_s}) != output_tokens / elapsed_s "
                f"({self.output_tokens} / {self.elapsed_s})"
            )
        w = self.window
        if w is not None:
            if not rel_close(w.measured_s, self.elapsed_s) or w.rounds != n or w.min_rounds != want \
                    or w.min_measured_s != (min_s or 0.0):
                raise ValueError(f"window {w.model_dump()} disagrees with the record (elapsed_s {self.elapsed_s}, "
                                 f"{n} rounds, measured_rounds {want}, min_measured_s {min_s})")
        return self


class CaseRun(StrictModel):
    """One validated line of ``<phase>-runs.jsonl``: record + evidence + what the runner observed."""

    schema_version: SchemaVersion = Field(default=1, description="Schema version of this record (always 1).")
    record: BenchRecord = Field(description="The bench record (identical to the BENCH_RESULT line).")
    evidence: RuntimeEvidence = Field(description="The evidence sidecar (identical to the OFFLOAD_EVIDENCE line).")
    kv_cache: KVCacheCapacity = Field(description="KV cache capacity parsed from the case log.")
    process_wall_s: NonNegFloat = Field(description="Wall seconds of the case process, launch to exit.")
    log_path: str = Field(description="Case log, relative to the run directory.")
    evidence_path: str = Field(description="Evidence sidecar, relative to the run directory.")
    command: tuple[str, ...] = Field(description="argv the case process was started with.")
    cpu_kernels: CpuKernelEvidence | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="CPU GEMM kernels the case ran (CPU runtimes with a kernel path); absent otherwise.",
    )
