"""One case, one process: build ``LLM(...)`` with the case's offload parameters and measure.

Usage: ``python -m runners.incase.bench_one --case CASE_JSON``; the case file is a
``results_schema.records.case.CaseSpec`` (``kind=bench``) written by ``runners.matrix``
(``records/<phase>/<stem>.case.json``): offload setting (``OffloadSetting``) and
workload (``WorkloadSpec``, the same model the record carries).

What is modelled: offline throughput of one vLLM engine for one offload setting.
Prompts (``runners.incase.prompts``) are exact token-id prompts (``TokensPrompt``) drawn
deterministically from ``(seed, round)``, so input lengths are exact and every case of a
run sees the same prompts; measured rounds repeat until both ``workload.measured_rounds`` and
``workload.min_measured_s`` are reached (the window is recorded in ``BenchRecord.window``); each
round (warmup included) gets fresh prompts unless ``workload.prompts_vary_per_round`` is false.
An in-process case (``CaseSpec.in_process``, CPU only, docs/inprocess.md) runs its measured rounds in whole ABBA
blocks of the installed offloader's copies off (A) and on (B), both rounds of a pair on the same prompts
(``runners.incase.rounds.run_inprocess_rounds``), and records each round's arm, mode and copies.
``prompt_mode=seed_text`` builds the published prompts instead (a seed text cut to exactly
``input_len`` tokens, the same in every round). Prefix caching is whatever
``enable_prefix_caching`` says (null: vLLM's default); engine arguments are built in
``engine_kwargs`` (all recorded in the workload). Decoding is greedy, with ``ignore_eos``
unless the workload says otherwise (published), so the token counts are real;
generated tokens are counted from ``len(token_ids)`` of every output, and a SHA-256
digest of the generated ids is kept per round (greedy identity across cases).
The host is read at the start and the end of the measured rounds (``runners.incase.host_load``): CPU time
used outside this process tree and the runner, and steal, recorded as ``BenchRecord.host_load`` with whether
that foreign work made the case ``contended``.
Peak RSS is sampled over this process and its children (vLLM V1 runs the engine
core in a child process). Per the published runner, the record also carries the request count,
requests/s and P50 / P95 round latency (``request_metrics``), and RSS and device memory before,
at the peak of and after ``LLM(...)`` (``LoadWindow``: ``runners.incase.memory_sampler``; device
memory from ``npu-smi info`` HBM / ``nvidia-smi`` of the case's physical device,
``runners.incase.device_memory``; null with the reason on a device it cannot read, nothing on CPU).

What is deliberately not modelled: statistics across processes (analysis), the
offloader evidence (the evidence hook publishes it), server mode / latency SLOs.

Output: the ``BenchRecord`` JSON at the case's ``record`` path (atomic) and exactly one
``BENCH_RESULT <json>`` line on stdout. Exit 0 on success, 2 on an invalid case file
(``ValueError: ...`` on stderr, before vLLM is imported), otherwise the
exception propagates (traceback in the log, non-zero exit). A case with ``engine_validates``
skips the offload pre-check and gives the setting to the engine as configured
(``runners.incase.engine_path``: the engine's own rejection is what is tested).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any
from pathlib import Path

from offload.controls import step_delay_requested
from runners.incase.process_state import ProcessStateReader
from runners.incase.prompts import DEFAULT_SEED_TEXT, make_prompt_ids, seed_text_prompts
from results_schema.records.case import CaseSpec, RequestedOffload
from results_schema.codec.io import dumps_model, write_json
from results_schema.records.load_metrics import percentile_linear
from results_schema.rules.log_rule import BENCH_RESULT
from results_schema.records.inprocess import InProcessRounds
from results_schema.records.models import BenchRecord, MeasurementWindow, RoundResult, WorkloadSpec
from results_schema.records.identity import OffloadSetting
from runners.incase.case_input import checked_offload, read_case
from runners.incase.device_memory import DeviceMemoryError, device_probe, process_tree_cuda_bytes
from runners.incase.host_load import HostReading, read_host, window_load
from runners.incase.import_heap import engine_in_process, frozen_import
from runners.incase.memory_sampler import DEVICE_INTERVAL_S, RSS_INTERVAL_S, PeakRSS, WindowSampler, tree_rss_bytes
from runners.incase.rounds import overall_digest, run_inprocess_rounds, run_rounds, window_reached
from offload.inprocess import worker_set_mode



def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m runners.incase.bench_one", description=__doc__.split("\n")[0])
    ap.add_argument("--case", required=True,
                    help="case.json (results_schema.records.case.CaseSpec, kind=bench) written by runners.matrix")
    return ap


def load_case(path: str | Path) -> CaseSpec:
    """Read a bench ``case.json`` (``runners.incase.case_input.read_case``). Raises ``ValueError``."""
    return read_case(path, "bench")


def _specs(case: CaseSpec) -> tuple[OffloadSetting | RequestedOffload, WorkloadSpec]:
    """Validate the case (before vLLM is imported); returns the record's offload and workload models.

    With ``engine_validates`` the offload setting is returned as configured (``RequestedOffload``,
    not checked here: the engine checks it, ``runners.incase.engine_path``).
    """
    w = case.workload
    if w is None:
        raise ValueError(f"case {case.phase}/{case.label}: a bench case needs a workload")
    offload = case.offload if case.engine_validates else checked_offload(case)
    from offload.cpu_kernels import requested_path

    requested_path()  # ValueError naming OFFLOAD_CPU_KERNEL_PATH and the allowed values
    if w.input_len + w.max_tokens > w.max_model_len:
        raise ValueError(f"input_len ({w.input_len}) + max_tokens ({w.max_tokens}) exceeds max_model_len "
                         f"({w.max_model_len})")
    if w.prompt_mode == "seed_text" and w.prompts_vary_per_round:
        raise ValueError("prompt_mode seed_text uses the same prompts in every round: set "
                         "workload.prompts_vary_per_round=false")
    return offload, w


def optional_engine_kwargs(workload: WorkloadSpec) -> dict[str, Any]:
    """The workload's optional engine settings that are set, by vLLM's parameter names (null = absent, so
    vLLM keeps its default): ``trust_remote_code`` (only when true), ``enable_prefix_caching``,
    ``max_num_seqs``, ``max_num_batched_tokens`` = ``max_model_len`` x ``max_num_batched_tokens_factor``
    (tokens). Used for ``vllm.LLM`` (``engine_kwargs``) and for the serving phase's API server."""
    kwargs: dict[str, Any] = {}
    if workload.trust_remote_code:
        kwargs["trust_remote_code"] = True
    if workload.enable_prefix_caching is not None:
        kwargs["enable_prefix_caching"] = workload.enable_prefix_caching
    if workload.max_num_seqs is not None:
        kwargs["max_num_seqs"] = workload.max_num_seqs
    if workload.max_num_batched_tokens_factor is not None:
        kwargs["max_num_batched_tokens"] = workload.max_model_len * workload.max_num_batched_tokens_factor
    return kwargs


def engine_kwargs(model: str, offload: OffloadSetting | RequestedOffload, workload: WorkloadSpec) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for one case (vLLM's parameter names).

    Optional engine settings (``enable_prefix_caching``, ``max_num_seqs``,
    ``max_num_batched_tokens`` = ``max_model_len`` x ``max_num_batched_tokens_factor``) are
    passed only when set, so null keeps vLLM's own default; the offload parameters only
    when the case offloads.
    """
    kwargs: dict[str, Any] = dict(
        model=model, dtype=workload.dtype, max_model_len=workload.max_model_len, seed=workload.seed,
        enforce_eager=workload.enforce_eager, gpu_memory_utilization=workload.gpu_memory_utilization,
        **optional_engine_kwargs(workload),
    )
    if offload.offload_group_size > 0:
        kwargs.update(offload_group_size=offload.offload_group_size,
                      offload_num_in_group=offload.offload_num_in_group,
                      offload_prefetch_step=offload.offload_prefetch_step,
                      offload_params=set(offload.offload_params),
                      offload_backend=offload.offload_backend)
    return kwargs


def request_metrics(rounds: Sequence[RoundResult], num_prompts: int) -> dict[str, Any]:
    """The published per-process request fields of ``BenchRecord`` (``results_schema.records.load_metrics``).

    ``requests`` = ``num_prompts`` x measured rounds (every prompt of a round is one request),
    ``requests_per_s`` = requests / summed round seconds (req/s), ``round_latency_p50_s`` /
    ``round_latency_p95_s`` = linear-interpolation percentiles of the rounds' ``elapsed_s`` (seconds).
    """
    elapsed = [r.elapsed_s for r in rounds]
    requests = num_prompts * len(rounds)
    return dict(requests=requests, requests_per_s=requests / sum(elapsed),
                round_latency_p50_s=percentile_linear(elapsed, 50.0),
                round_latency_p95_s=percentile_linear(elapsed, 95.0))


class LoadWindow:
    """RSS (process tree) and device memory before / peak / after the ``with`` block (``LLM(...)``).

    RSS is sampled every ``RSS_INTERVAL_S``, device memory every ``DEVICE_INTERVAL_S`` from the
    case's physical device (``runners.incase.device_memory.device_probe``; none on CPU). A device whose
    memory cannot be read leaves its fields null with ``device_memory_error`` saying why, also
    printed as a ``DEVICE_MEMORY unavailable: ...`` line on stderr (the case log).
    """

    def __init__(self, device: str) -> None:
        self.rss = WindowSampler(tree_rss_bytes, RSS_INTERVAL_S)
        self.device: WindowSampler | None = None
        self._probe: Any = None
        self._fields: dict[str, Any] = {}
        try:
            found = device_probe(device)
        except DeviceMemoryError as exc:
            found, self._fields["device_memory_error"] = None, str(exc)
        if found is not None:
            probe, source, name = found
            self.device = WindowSampler(probe, DEVICE_INTERVAL_S)
            self._fields.update(device_memory_source=source, device_memory_device=name)
            self._probe = probe

    def __enter__(self) -> "LoadWindow":
        self.rss.__enter__()
        if self.device is not None:
            self.device.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device is not None:
            self.device.__exit__(*exc)
        self.rss.__exit__(*exc)

    def fields(self) -> dict[str, Any]:
        """The ``BenchRecord`` ``rss_*_load_bytes`` / ``device_memory_*`` keyword arguments (None values left out)."""
        out = dict(self._fields, rss_before_load_bytes=self.rss.before, rss_peak_load_bytes=self.rss.peak,
                   rss_after_load_bytes=self.rss.after)
        d = self.device
        if d is not None and d.error is not None:
            out["device_memory_error"] = d.error
        elif d is not None:
            out.update(device_memory_before_load_bytes=d.before, device_memory_peak_load_bytes=d.peak,
                       device_memory_after_load_bytes=d.after, device_memory_total_bytes=self._probe.total_bytes)
        if "device_memory_error" in out:
            print(f"DEVICE_MEMORY unavailable: {out['device_memory_error']}", file=sys.stderr, flush=True)
        return {k: v for k, v in out.items() if v is not None}


def _vocab(llm: object) -> list[int]:
    tok = llm.get_tokenizer()  # type: ignore[attr-defined]
    special = set(getattr(tok, "all_special_ids", ()) or ())
    size = len(tok)
    hf_config = llm.llm_engine.model_config.hf_config  # type: ignore[attr-defined]
    size = min(size, int(getattr(hf_config, "vocab_size", size)))
    vocab = [i for i in range(size) if i not in special]
    if not vocab:
        raise ValueError("the tokenizer has no non-special token")
    return vocab


def _check_implementation_env(implementation: str) -> None:
    impl_env = os.environ.get("OFFLOAD_IMPL")
    if impl_env is not None and impl_env != implementation:
        raise ValueError(f"OFFLOAD_IMPL={impl_env!r} disagrees with the case's implementation {implementation!r}")
    os.environ["OFFLOAD_IMPL"] = implementation  # inherited by vLLM's engine-core process


def _round_fn(llm: object, w: WorkloadSpec):
    """``g -> (elapsed_s, generated ids per request, prompt tokens)``: one ``generate`` over round ``g``'s prompts."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(temperature=w.temperature, max_tokens=w.max_tokens, ignore_eos=w.ignore_eos, seed=w.seed)
    if w.prompt_mode == "seed_text":
        text = seed_text_prompts(llm.get_tokenizer(), w.prompt_seed_text or DEFAULT_SEED_TEXT,  # type: ignore[attr-defined]
                                 w.num_prompts, w.input_len)
    else:
        vocab = _vocab(llm)

    def one_round(g: int) -> tuple[float, list[list[int]], int]:
        prompt_round = g if w.prompts_vary_per_round else 0
        if w.prompt_mode == "seed_text":
            prompts: list[object] = list(text)
        else:
            ids = make_prompt_ids(w.seed, prompt_round, w.num_prompts, w.input_len, vocab)
            prompts = [TokensPrompt(prompt_token_ids=p) for p in ids]
        t = time.perf_counter()
        outs = llm.generate(prompts, sp, use_tqdm=False)  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - t
        gen = [list(o.outputs[0].token_ids) for o in outs]
        prompt_tokens = sum(len(o.prompt_token_ids or ()) for o in outs)
        if prompt_tokens != w.num_prompts * w.input_len:
            raise RuntimeError(f"submitted {prompt_tokens} prompt tokens, expected {w.num_prompts} x {w.input_len}")
        return elapsed, gen, prompt_tokens

    return one_round


def measure(llm: Any, case: CaseSpec, w: WorkloadSpec,
            window_start: Callable[[], None]) -> tuple[list[RoundResult], InProcessRounds | None]:
    """The measured rounds: ``run_rounds``, or for an in-process case (``case.in_process``) ``run_inprocess_rounds``
    with the installed offloader switched through ``LLM.collective_rpc`` (``offload.inprocess.worker_set_mode``)."""
    min_s = w.min_measured_s or 0.0
    if case.in_process is None:
        return run_rounds(_round_fn(llm, w), warmup_rounds=w.warmup_rounds, min_rounds=w.measured_rounds,
                          min_measured_s=min_s, window_start=window_start), None

    def set_mode(mode: str) -> dict[str, Any]:
        return llm.collective_rpc(worker_set_mode, args=(mode,))[0]

    return run_inprocess_rounds(_round_fn(llm, w), set_mode, design=case.in_process, warmup_rounds=w.warmup_rounds,
                                min_rounds=w.measured_rounds, min_measured_s=min_s, window_start=window_start)


def run(case: CaseSpec) -> BenchRecord:
    """Build the engine, run warmup + measured rounds, return the record."""
    offload, w = _specs(case)
    _check_implementation_env(case.implementation)
    # A fatal signal in this process or in vLLM's engine-core child (e.g. SIGILL from a CPU
    # kernel) leaves "Fatal Python error: Illegal instruction" in the log, so the runner can
    # name it (runners.outcome.case_log.worker_signal) instead of a bare engine error.
    faulthandler.enable()
    os.environ["PYTHONFAULTHANDLER"] = "1"

    with frozen_import("vllm", freeze=engine_in_process()):  # runners.incase.import_heap: when and why
        import torch
        import vllm
        from vllm import LLM

    min_s = w.min_measured_s or 0.0
    with PeakRSS() as rss:
        with LoadWindow(case.device) as load:
            t0 = time.perf_counter()
            if case.engine_validates:
                from runners.incase.engine_path import build

                llm = build(LLM, engine_kwargs(case.model, offload, w), case)  # raises unless valid and accepted
            else:
                llm = LLM(**engine_kwargs(case.model, offload, w))
            load_seconds = time.perf_counter() - t0
        rss.include(load.rss.peak)
        device_mem = process_tree_cuda_bytes(case.device)
        start: list[HostReading | None] = []
        state = ProcessStateReader()

        def window_start() -> None:
            state.start()
            start.append(read_host())

        rounds, in_process = measure(llm, case, w, window_start)
        host = window_load(start[0] if start else None, read_host())
        process_state = state.finish()
    output_tokens = sum(r.output_tokens for r in rounds)
    elapsed_s = sum(r.elapsed_s for r in rounds)
    return BenchRecord(
        phase=case.phase, label=case.label, implementation=case.implementation, repeat=case.repeat,
        runtime=case.runtime, model=case.model, offload=OffloadSetting.model_validate(offload.model_dump()),
        workload=w, load_seconds=load_seconds,
        rounds=tuple(rounds), output_tokens=output_tokens, elapsed_s=elapsed_s,
        throughput_tok_s=output_tokens / elapsed_s, token_digest=overall_digest(rounds, w.measured_rounds),
        peak_rss_bytes=rss.peak, device_memory_bytes=device_mem,
        window=MeasurementWindow(measured_s=elapsed_s, rounds=len(rounds), min_measured_s=min_s,
                                 min_rounds=w.measured_rounds,
                                 reached=window_reached(len(rounds), elapsed_s, w.measured_rounds, min_s)),
        **request_metrics(rounds, w.num_prompts), **load.fields(),
        host_load=None if host is None else host.record(),
        vllm_version=str(vllm.__version__), torch_version=str(torch.__version__), pid=os.getpid(),
        step_delay_ms=step_delay_requested(), process_state=process_state, in_process=in_process,
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        case = load_case(a.case)
        _specs(case)
    except ValueError as exc:
        print(f"ValueError: {exc}", file=sys.stderr, flush=True)
        return 2
    record = run(case)
    write_json(Path(case.record), record)
    sys.stdout.write(BENCH_RESULT + dumps_model(record) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
