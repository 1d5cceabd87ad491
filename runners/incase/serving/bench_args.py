"""What a serving case gives vLLM: the API server's argv and the arguments of vLLM's serving benchmark.

What is modelled: ``server_argv`` (the runtime's command prefix and the engine arguments of the case, its offload
setting included); ``bench_argv`` (``vllm bench serve``'s arguments for one rate: fixed-seed random dataset,
completions endpoint, warm-up requests, the percentiles of the latency metrics every ``RateResult`` records
(``LATENCY_PERCENTILES`` of ``LATENCY_METRICS``), the SLO as goodput, request ids
``REQUEST_ID_PREFIX`` + index, output token ids streamed back), parsed by vLLM's own parser
(``parse_bench_args``); ``dataset_prompts``, the measured requests' prompts rebuilt exactly as the benchmark builds
them.

What is deliberately not modelled: starting the server (``runners.incase.serving.server``), running the benchmark
(``runners.incase.serving.driver``).
"""

from __future__ import annotations

import json
from typing import Any

from results_schema.records.serving import LATENCY_METRICS, LATENCY_PERCENTILES
from results_schema.records.serving_spec import ServingCaseSpec
from runners.incase.serving import server as srv

REQUEST_ID_PREFIX = "req-"
"""Request ids are this prefix + the request's index in the dataset (vLLM's ``RandomDataset``)."""


def server_argv(spec: ServingCaseSpec, port: int) -> list[str]:
    """argv of the API server: the command prefix + vLLM engine arguments of the case."""
    e, o = spec.engine, spec.offload
    argv = list(spec.server_command) + [
        "--model", spec.model, "--host", srv.HOST, "--port", str(port), "--dtype", e.dtype,
        "--max-model-len", str(e.max_model_len), "--gpu-memory-utilization", str(e.gpu_memory_utilization),
        "--seed", str(e.seed), "--enforce-eager" if e.enforce_eager else "--no-enforce-eager",
        "--disable-uvicorn-access-log",
    ]
    if e.enable_prefix_caching is not None:  # null: vLLM's default (the published workload passes nothing)
        argv.append("--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching")
    if e.trust_remote_code:
        argv.append("--trust-remote-code")
    if e.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(e.max_num_seqs)]
    if e.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if o.offload_group_size > 0:
        argv += ["--offload-group-size", str(o.offload_group_size), "--offload-num-in-group",
                 str(o.offload_num_in_group), "--offload-prefetch-step", str(o.offload_prefetch_step),
                 "--offload-backend", o.offload_backend]
        if o.offload_params:
            argv += ["--offload-params", *o.offload_params]
    return argv


def bench_argv(spec: ServingCaseSpec, port: int, rate: float | None) -> list[str]:
    """Arguments of ``vllm bench serve`` for one rate (parsed by vLLM's own ``add_cli_args``)."""
    ld, slo = spec.load, spec.slo
    argv = [
        "--backend", ld.backend, "--host", srv.HOST, "--port", str(port), "--endpoint", ld.endpoint,
        "--model", spec.model, "--dataset-name", ld.dataset, "--random-input-len", str(ld.input_len),
        "--random-output-len", str(ld.output_len), "--random-range-ratio", "0", "--random-prefix-len", "0",
        "--num-prompts", str(ld.num_prompts), "--request-rate", "inf" if rate is None else repr(float(rate)),
        "--burstiness", repr(float(ld.burstiness)), "--seed", str(ld.seed), "--num-warmups", str(ld.num_warmups),
        "--temperature", repr(float(ld.temperature)), "--ignore-eos",
        "--percentile-metrics", ",".join(LATENCY_METRICS),
        "--metric-percentiles", ",".join(str(p) for p in LATENCY_PERCENTILES),
        "--goodput", f"ttft:{slo.ttft_ms!r}", f"tpot:{slo.tpot_ms!r}", "--disable-tqdm", "--save-detailed",
        "--request-id-prefix", REQUEST_ID_PREFIX, "--extra-body", json.dumps({"return_token_ids": True}),
    ]
    if ld.max_concurrency is not None:
        argv += ["--max-concurrency", str(ld.max_concurrency)]
    return argv


def dataset_prompts(spec: ServingCaseSpec, port: int) -> list[tuple[str, int]]:
    """``(prompt, dataset prompt tokens)`` per measured request, built exactly as the benchmark builds them.

    vLLM's ``RandomDataset`` draws from its own generator seeded with ``--seed``, so calling
    ``get_samples`` with the benchmark's own parsed arguments gives the same requests, in order.
    """
    from vllm.benchmarks.datasets import get_samples
    from vllm.tokenizers import get_tokenizer

    args = parse_bench_args(bench_argv(spec, port, spec.load.request_rates_rps[0]))
    samples = get_samples(args, get_tokenizer(spec.model, tokenizer_mode=args.tokenizer_mode))
    return [(str(x.prompt), int(x.prompt_len)) for x in samples]


def parse_bench_args(argv: list[str]) -> Any:
    """``argv`` (``bench_argv``) parsed by vLLM's own ``vllm bench serve`` parser (``add_cli_args``): the namespace its
    ``main_async`` and ``get_samples`` take."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return parser.parse_args(argv)
