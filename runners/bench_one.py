"""One case, one process: build ``LLM(...)`` with the case's offload parameters and measure.

What is modelled: offline throughput of one vLLM engine for one offload setting.
Prompts (``runners.prompts``) are exact token-id prompts (``TokensPrompt``) drawn
deterministically from ``(seed, round)``, so input lengths are exact and every case of a
run sees the same prompts; measured rounds repeat until both ``--measured-rounds`` and
``--min-measured-s`` are reached (the window is recorded in ``BenchRecord.window``); each round (warmup included) gets fresh prompts unless
``--same-prompts-every-round``. ``--prompt-mode seed_text`` builds the published prompts
instead (a seed text cut to exactly ``input_len`` tokens, the same in every round).
Prefix caching is whatever ``--[no-]enable-prefix-caching`` says (neither: vLLM's default);
engine arguments are built in ``engine_kwargs`` (all recorded in the workload). Decoding is
greedy, with ``ignore_eos`` unless ``--no-ignore-eos`` (published), so the token counts are real;
generated tokens are counted from ``len(token_ids)`` of every output, and a SHA-256
digest of the generated ids is kept per round (greedy identity across cases).
Peak RSS is sampled over this process and its children (vLLM V1 runs the engine
core in a child process).

What is deliberately not modelled: statistics across processes (analysis), the
offloader evidence (the evidence hook publishes it), server mode / latency SLOs.

Output: the ``BenchRecord`` JSON at ``--record`` (atomic) and exactly one
``BENCH_RESULT <json>`` line on stdout. Exit 0 on success, 2 on invalid
arguments (``ValueError: ...`` on stderr, before vLLM is imported), otherwise the
exception propagates (traceback in the log, non-zero exit).
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from offload.selection import validate_offload_params
from runners.prompts import DEFAULT_SEED_TEXT, make_prompt_ids, seed_text_prompts
from results_schema.io import dumps_model, write_json
from results_schema.models import BenchRecord, MeasurementWindow, OffloadSetting, RoundResult, WorkloadSpec

RESULT_PREFIX = "BENCH_RESULT "


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m runners.bench_one", description=__doc__.split("\n")[0])
    ap.add_argument("--phase", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--implementation", required=True, choices=["baseline", "current", "official", "sync"])
    ap.add_argument("--repeat", type=int, required=True)
    ap.add_argument("--runtime", required=True, help="runtime name recorded in the record (cpu, cuda, ...)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "npu"], help="device kind (memory probe)")
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--offload-group-size", type=int, default=0)
    ap.add_argument("--offload-num-in-group", type=int, default=0)
    ap.add_argument("--offload-prefetch-step", type=int, default=1)
    ap.add_argument("--offload-params", default="", help="comma-separated dotted-name segments")
    ap.add_argument("--offload-backend", default="auto")
    ap.add_argument("--num-prompts", type=int, required=True)
    ap.add_argument("--input-len", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--max-model-len", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--measured-rounds", type=int, default=3, help="minimum measured rounds")
    ap.add_argument("--min-measured-s", type=float, default=0.0,
                    help="minimum measured seconds: measured rounds repeat until both --measured-rounds and this "
                         "are reached (MLPerf LoadGen min_duration idea; the runner passes workload.min_measured_s)")
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                    help="pass enable_prefix_caching; neither flag = vLLM's default")
    ap.add_argument("--same-prompts-every-round", action="store_true",
                    help="reuse round 0's prompts in every round (default: fresh prompts per round)")
    ap.add_argument("--temperature", type=float, default=0.0)
    # published-workload options (issue 15; runners.prompts, engine_kwargs)
    ap.add_argument("--prompt-mode", default="random_ids", choices=["random_ids", "seed_text"])
    ap.add_argument("--prompt-seed-text", default=None, help="seed text of --prompt-mode seed_text")
    ap.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--max-num-batched-tokens-factor", type=int, default=None,
                    help="max_num_batched_tokens = max_model_len x this (null = vLLM's default)")
    ap.add_argument("--record", required=True, help="path of the BenchRecord JSON to write")
    return ap


def _specs(a: argparse.Namespace) -> tuple[OffloadSetting, WorkloadSpec]:
    """Validate arguments into the record's models (before vLLM is imported)."""
    params = tuple(p for p in a.offload_params.split(",") if p)
    validate_offload_params(a.offload_group_size, a.offload_num_in_group, a.offload_prefetch_step, a.offload_backend)
    if a.implementation == "baseline" and a.offload_group_size != 0:
        raise ValueError(f"implementation baseline needs offload_group_size 0 (got {a.offload_group_size})")
    if a.implementation != "baseline" and (a.offload_group_size == 0 or a.offload_num_in_group == 0):
        raise ValueError(
            f"implementation {a.implementation} needs offload_group_size > 0 and offload_num_in_group > 0 "
            f"(got {a.offload_group_size}, {a.offload_num_in_group})"
        )
    if not (math.isfinite(a.min_measured_s) and a.min_measured_s >= 0):
        raise ValueError(f"--min-measured-s {a.min_measured_s}: must be a finite number of seconds >= 0")
    from offload.cpu_kernels import requested_path

    requested_path()  # ValueError naming OFFLOAD_CPU_KERNEL_PATH and the allowed values
    if a.input_len + a.max_tokens > a.max_model_len:
        raise ValueError(f"input_len ({a.input_len}) + max_tokens ({a.max_tokens}) exceeds max_model_len "
                         f"({a.max_model_len})")
    offload = OffloadSetting(offload_group_size=a.offload_group_size, offload_num_in_group=a.offload_num_in_group,
                             offload_prefetch_step=a.offload_prefetch_step, offload_params=params,
                             offload_backend=a.offload_backend)
    workload = WorkloadSpec(num_prompts=a.num_prompts, input_len=a.input_len, max_tokens=a.max_tokens,
                            max_model_len=a.max_model_len, seed=a.seed, dtype=a.dtype,
                            enforce_eager=a.enforce_eager, gpu_memory_utilization=a.gpu_memory_utilization,
                            warmup_rounds=a.warmup_rounds, measured_rounds=a.measured_rounds,
                            min_measured_s=a.min_measured_s,
                            enable_prefix_caching=a.enable_prefix_caching,
                            prompts_vary_per_round=not a.same_prompts_every_round, temperature=a.temperature,
                            prompt_mode=a.prompt_mode, prompt_seed_text=a.prompt_seed_text,
                            ignore_eos=a.ignore_eos, trust_remote_code=a.trust_remote_code,
                            max_num_seqs=a.max_num_seqs,
                            max_num_batched_tokens_factor=a.max_num_batched_tokens_factor)
    if a.prompt_mode == "seed_text" and not a.same_prompts_every_round:
        raise ValueError("--prompt-mode seed_text uses the same prompts in every round: pass "
                         "--same-prompts-every-round (workload.prompts_vary_per_round=false)")
    return offload, workload


def engine_kwargs(model: str, offload: OffloadSetting, workload: WorkloadSpec) -> dict[str, object]:
    """Keyword arguments of ``vllm.LLM`` for one case (vLLM's parameter names).

    Optional engine settings (``enable_prefix_caching``, ``max_num_seqs``,
    ``max_num_batched_tokens`` = ``max_model_len`` x ``max_num_batched_tokens_factor``) are
    passed only when set, so null keeps vLLM's own default; the offload parameters only
    when the case offloads.
    """
    kwargs: dict[str, object] = dict(
        model=model, dtype=workload.dtype, max_model_len=workload.max_model_len, seed=workload.seed,
        enforce_eager=workload.enforce_eager, gpu_memory_utilization=workload.gpu_memory_utilization,
    )
    if workload.trust_remote_code:
        kwargs["trust_remote_code"] = True
    if workload.enable_prefix_caching is not None:
        kwargs["enable_prefix_caching"] = workload.enable_prefix_caching
    if workload.max_num_seqs is not None:
        kwargs["max_num_seqs"] = workload.max_num_seqs
    if workload.max_num_batched_tokens_factor is not None:
        kwargs["max_num_batched_tokens"] = workload.max_model_len * workload.max_num_batched_tokens_factor
    if offload.offload_group_size > 0:
        kwargs.update(offload_group_size=offload.offload_group_size,
                      offload_num_in_group=offload.offload_num_in_group,
                      offload_prefetch_step=offload.offload_prefetch_step,
                      offload_params=set(offload.offload_params),
                      offload_backend=offload.offload_backend)
    return kwargs


def digest_ids(outputs: Sequence[Sequence[int]]) -> str:
    """SHA-256 of generated token ids, request by request (order-sensitive)."""
    h = hashlib.sha256()
    for ids in outputs:
        h.update(",".join(str(int(t)) for t in ids).encode())
        h.update(b";")
    return h.hexdigest()


def window_reached(rounds: int, measured_s: float, min_rounds: int, min_measured_s: float) -> bool:
    """True when the measured window has at least ``min_rounds`` rounds and ``min_measured_s`` seconds.

    The measurement loop runs rounds until this holds (both minima, like MLPerf LoadGen's
    ``min_query_count`` and ``min_duration``), so a fast case is measured for a stated time
    instead of a handful of sub-second rounds.
    """
    return rounds >= min_rounds and measured_s >= min_measured_s


def run_rounds(one_round, *, warmup_rounds: int, min_rounds: int, min_measured_s: float) -> list[RoundResult]:
    """Run warmup rounds, then measured rounds until ``window_reached``.

    Args:
        one_round: ``g -> (elapsed_s, generated ids per request, prompt tokens)`` for global round ``g``
            (warmup rounds first; ``g`` also picks the round's prompts).
        warmup_rounds: rounds run and discarded.
        min_rounds: minimum measured rounds (``--measured-rounds``).
        min_measured_s: minimum measured seconds (``--min-measured-s``), summed over measured rounds.

    Returns:
        The measured rounds (index 0..n-1), ``n >= min_rounds``; the last one is the first that
        brought the window to ``min_measured_s`` when more than ``min_rounds`` were needed.
    """
    rounds: list[RoundResult] = []
    measured_s = 0.0
    g = 0
    while g < warmup_rounds or not window_reached(len(rounds), measured_s, min_rounds, min_measured_s):
        elapsed, gen, prompt_tokens = one_round(g)
        g += 1
        if g <= warmup_rounds:
            continue
        n_out = sum(len(x) for x in gen)
        rounds.append(RoundResult(index=len(rounds), elapsed_s=elapsed, prompt_tokens=prompt_tokens,
                                  output_tokens=n_out, throughput_tok_s=n_out / elapsed,
                                  token_digest=digest_ids(gen)))
        measured_s += elapsed
    return rounds


def overall_digest(rounds: Sequence[RoundResult], min_rounds: int) -> str:
    """SHA-256 over the per-round digests of the first ``min_rounds`` measured rounds.

    Every case of a run measures at least those rounds with the same prompts, while the number of
    extra rounds a minimum window adds depends on each case's speed: the greedy identity check
    (``analysis.validate``) compares this prefix, so it compares like with like.
    """
    return hashlib.sha256("".join(r.token_digest for r in rounds[:min_rounds]).encode()).hexdigest()


class PeakRSS:
    """Samples the RSS of this process plus all its descendants; keeps the peak (bytes)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def sample(self) -> int:
        import psutil

        me = psutil.Process()
        total = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self.peak = max(self.peak, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "PeakRSS":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        self.peak = max(self.peak, own)


def _device_memory_bytes(device: str) -> int | None:
    """Device memory used by this process tree after load (bytes); None on CPU or when unknown.

    CUDA: sum of ``nvidia-smi --query-compute-apps`` entries of this process tree.
    NPU: not probed here (``npu-smi`` per-process query is stack-specific); None.
    """
    if device != "cuda" or shutil.which("nvidia-smi") is None:
        return None
    import psutil

    me = psutil.Process()
    pids = {me.pid, *(c.pid for c in me.children(recursive=True))}
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0:
        return None
    total = 0
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids:
            total += int(parts[1]) * 1024 * 1024  # MiB
    return total


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


def run(a: argparse.Namespace) -> BenchRecord:
    """Build the engine, run warmup + measured rounds, return the record."""
    offload, workload = _specs(a)
    impl_env = os.environ.get("OFFLOAD_IMPL")
    if impl_env is not None and impl_env != a.implementation:
        raise ValueError(f"OFFLOAD_IMPL={impl_env!r} disagrees with --implementation {a.implementation!r}")
    os.environ["OFFLOAD_IMPL"] = a.implementation  # inherited by vLLM's engine-core process
    # A fatal signal in this process or in vLLM's engine-core child (e.g. SIGILL from a CPU
    # kernel) leaves "Fatal Python error: Illegal instruction" in the log, so the runner can
    # name it (runners.finalize.worker_signal) instead of a bare engine error.
    faulthandler.enable()
    os.environ["PYTHONFAULTHANDLER"] = "1"

    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs = engine_kwargs(a.model, offload, workload)

    with PeakRSS() as rss:
        t0 = time.perf_counter()
        llm = LLM(**kwargs)
        load_seconds = time.perf_counter() - t0
        device_mem = _device_memory_bytes(a.device)
        sp = SamplingParams(temperature=a.temperature, max_tokens=a.max_tokens, ignore_eos=a.ignore_eos, seed=a.seed)
        if a.prompt_mode == "seed_text":
            text = seed_text_prompts(llm.get_tokenizer(), a.prompt_seed_text or DEFAULT_SEED_TEXT,
                                     a.num_prompts, a.input_len)
        else:
            vocab = _vocab(llm)

        def one_round(g: int) -> tuple[float, list[list[int]], int]:
            prompt_round = 0 if a.same_prompts_every_round else g
            if a.prompt_mode == "seed_text":
                prompts: list[object] = list(text)
            else:
                ids = make_prompt_ids(a.seed, prompt_round, a.num_prompts, a.input_len, vocab)
                prompts = [TokensPrompt(prompt_token_ids=p) for p in ids]
            t = time.perf_counter()
            outs = llm.generate(prompts, sp, use_tqdm=False)
            elapsed = time.perf_counter() - t
            gen = [list(o.outputs[0].token_ids) for o in outs]
            prompt_tokens = sum(len(o.prompt_token_ids or ()) for o in outs)
            if prompt_tokens != a.num_prompts * a.input_len:
                raise RuntimeError(f"submitted {prompt_tokens} prompt tokens, expected "
                                   f"{a.num_prompts} x {a.input_len}")
            return elapsed, gen, prompt_tokens

        rounds = run_rounds(one_round, warmup_rounds=a.warmup_rounds, min_rounds=a.measured_rounds,
                            min_measured_s=a.min_measured_s)
    output_tokens = sum(r.output_tokens for r in rounds)
    elapsed_s = sum(r.elapsed_s for r in rounds)
    overall = overall_digest(rounds, a.measured_rounds)
    return BenchRecord(
        phase=a.phase, label=a.label, implementation=a.implementation, repeat=a.repeat, runtime=a.runtime,
        model=a.model, offload=offload, workload=workload, load_seconds=load_seconds, rounds=tuple(rounds),
        output_tokens=output_tokens, elapsed_s=elapsed_s, throughput_tok_s=output_tokens / elapsed_s,
        token_digest=overall, peak_rss_bytes=rss.peak, device_memory_bytes=device_mem,
        window=MeasurementWindow(measured_s=elapsed_s, rounds=len(rounds), min_measured_s=a.min_measured_s,
                                 min_rounds=a.measured_rounds,
                                 reached=window_reached(len(rounds), elapsed_s, a.measured_rounds, a.min_measured_s)),
        vllm_version=str(vllm.__version__), torch_version=str(torch.__version__), pid=os.getpid(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        _specs(a)
    except ValueError as exc:
        print(f"ValueError: {exc}", file=sys.stderr, flush=True)
        return 2
    record = run(a)
    write_json(Path(a.record), record)
    sys.stdout.write(RESULT_PREFIX + dumps_model(record) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
