"""One rate's outcome: vLLM's serving benchmark result dict turned into the case's records, its counts checked.

What is modelled: ``rate_result`` builds the ``RateResult`` of one rate (throughputs, ``LatencyStats`` of every
metric, goodput under the SLO, token count ranges, distinct prompts) and writes the rate's ``ServingRequests``
file: one ``RequestOutcome`` per request, with the digest of the output token ids read from its stream
(``runners.incase.serving.token_ids``). Request counts and server-side token counts are checked against the load:
every completed request has exactly ``output_len`` output tokens and as many prompt tokens as the benchmark's
dataset counted for its prompt, within ``PROMPT_LEN_TOLERANCE`` of ``input_len`` (else ``token_count_mismatch``).

What is deliberately not modelled: running the rate (``runners.incase.serving.driver``), statistics across cases
(``analysis.serving``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results_schema.codec.files import file_sha256
from results_schema.codec.io import write_json
from results_schema.records.serving import (
    PROMPT_LEN_TOLERANCE,
    LatencyStats,
    RateResult,
    RequestOutcome,
    ServingRequests,
)
from results_schema.records.serving_spec import ServingCaseSpec
from runners.incase.serving.bench_args import REQUEST_ID_PREFIX
from runners.incase.serving.faults import Fault
from runners.incase.serving.token_ids import token_ids_sha256


def _stats(res: dict[str, Any], metric: str) -> LatencyStats:
    return LatencyStats(mean_ms=float(res[f"mean_{metric}_ms"]), p50_ms=float(res[f"p50_{metric}_ms"]),
                        p90_ms=float(res[f"p90_{metric}_ms"]), p99_ms=float(res[f"p99_{metric}_ms"]))


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
        requests_path=run_relative(path, run_dir),
        requests_sha256=file_sha256(path))


def run_relative(path: Path, run_dir: Path) -> str:
    """``path`` as a record names it: relative to ``run_dir`` (POSIX) when inside it, else as given."""
    return path.relative_to(run_dir).as_posix() if path.is_relative_to(run_dir) else str(path)
