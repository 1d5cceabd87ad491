"""Every serving number of one rate, re-derived from its per-request file exactly as vLLM derives it.

What is modelled: ``recompute_rate`` rebuilds, from the measured requests of one rate
(``results_schema.records.serving.RequestOutcome``) and the SLO, the numbers a ``RateResult`` records and
the serving table / verdicts read: completed count, token totals, mean / P50 / P90 / P99 of TTFT,
TPOT, ITL and E2E latency (ms), good requests, goodput (req/s) and SLO attainment.
``compare_rate`` names every number that differs from the record.

Source of every rule: vLLM 0.32 ``vllm/benchmarks/serve.py``, function ``calculate_metrics``:

* only successful requests count; TTFT, E2E and the pooled ITL gaps are their raw values (s);
* TPOT of a request = (E2E - TTFT) / (output tokens - 1) when it has more than one output token;
  the TPOT *statistics* are over those requests only (``tpots``), while the goodput rule gives a
  one-token request TPOT 0 (``all_tpots``); a failed request enters no statistic. E2E is the time of the last
  streamed chunk that carried text, so a request whose whole output arrived in one chunk has E2E = TTFT and TPOT
  0: vLLM's API server merges a request's pending deltas when its stream falls behind the engine
  (``vllm/v1/engine/output_processor.py``, ``RequestOutputCollector.put``), which a loaded host at rate inf
  shows; such a TPOT is not a time per token;
* a request is good when ``limit_ms / 1000 >= value_s`` for TTFT and TPOT (both inclusive, the
  limit converted to seconds by ``MILLISECONDS_TO_SECONDS_CONVERSION = 1000`` before comparing);
  goodput = good requests / benchmark duration;
* mean and percentiles are ``np.mean(xs or 0) * 1000`` and ``np.percentile(xs or 0, p) * 1000``
  (numpy's default linear interpolation; an empty sample gives 0).

SLO attainment = good / completed (0 when nothing completed) is this project's ratio
(``results_schema.records.serving.RateResult``).

What is deliberately not modelled: vLLM's ``max_concurrent_requests`` (needs request start
times, which the per-request file does not hold) and the standard deviations (not recorded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from results_schema.records.serving import LATENCY_METRICS, LATENCY_PERCENTILES, RateResult, RequestOutcome
from results_schema.records.serving_spec import ServingSLO

MS_PER_S = 1000
"""vLLM's ``MILLISECONDS_TO_SECONDS_CONVERSION`` (``vllm/benchmarks/serve.py``)."""


LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


def _stat(xs: Sequence[float], p: int | None) -> float:
    """``np.mean(xs or 0) * 1000`` (p None) or ``np.percentile(xs or 0, p) * 1000``: vLLM's expressions (ms)."""
    sample = list(xs) or 0
    value = np.mean(sample) if p is None else np.percentile(sample, p)
    return float(value) * MS_PER_S


def samples_s(requests: Sequence[RequestOutcome]) -> dict[str, list[float]]:
    """Per-metric samples (s) of the successful requests: ``ttft``, ``tpot`` (> 1 token), ``itl`` (pooled), ``e2el``."""
    ok = [x for x in requests if x.success]
    return {
        "ttft": [x.ttft_s for x in ok],
        "tpot": [(x.latency_s - x.ttft_s) / (x.output_tokens - 1) for x in ok if x.output_tokens > 1],
        "itl": [float(g) for x in ok for g in x.itl_s],
        "e2el": [x.latency_s for x in ok],
    }


def good_requests(requests: Sequence[RequestOutcome], slo: ServingSLO) -> int:
    """Successful requests with TTFT <= ``slo.ttft_ms`` and TPOT <= ``slo.tpot_ms`` (limits inclusive).

    A request with at most one output token has TPOT 0 (vLLM's ``all_tpots``). The comparison is
    vLLM's own: ``slo_ms / 1000 >= value_s``.
    """
    ttft_lim, tpot_lim = slo.ttft_ms / MS_PER_S, slo.tpot_ms / MS_PER_S
    good = 0
    for x in requests:
        if not x.success:
            continue
        tpot = (x.latency_s - x.ttft_s) / (x.output_tokens - 1) if x.output_tokens > 1 else 0.0
        if ttft_lim >= x.ttft_s and tpot_lim >= tpot:
            good += 1
    return good


def recompute_rate(requests: Sequence[RequestOutcome], slo: ServingSLO, duration_s: float) -> dict[str, float]:
    """Every recorded number of one rate, recomputed (keys are the names ``compare_rate`` prints).

    Args:
        requests: the measured requests of the rate (``ServingRequests.requests``).
        slo: the goodput SLO of the case.
        duration_s: the rate's benchmark duration (s, > 0): goodput's denominator.

    Returns:
        ``{"completed": n, "total input tokens": ..., "total output tokens": ..., "good requests": ...,
        "goodput req/s": ..., "SLO attainment": ..., "<mean|P50|P90|P99> <TTFT|TPOT|ITL|E2E> ms": ...}``.

    Raises:
        ValueError: ``duration_s`` is not a positive finite number.
    """
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s ({duration_s}) must be a positive finite number of seconds")
    ok = [x for x in requests if x.success]
    good = good_requests(requests, slo)
    out: dict[str, float] = {
        "completed": len(ok),
        "total input tokens": sum(x.prompt_tokens for x in ok),
        "total output tokens": sum(x.output_tokens for x in ok),
        "good requests": good,
        "goodput req/s": good / duration_s,
        "SLO attainment": good / len(ok) if ok else 0.0,
    }
    for metric, xs in samples_s(requests).items():
        name = LABELS[metric]
        out[f"mean {name} ms"] = _stat(xs, None)
        for p in LATENCY_PERCENTILES:
            out[f"P{p} {name} ms"] = _stat(xs, p)
    return out


def recorded_rate(q: RateResult) -> dict[str, float]:
    """The same numbers as ``recompute_rate``, read from the record."""
    out: dict[str, float] = {
        "completed": q.completed, "total input tokens": q.total_input_tokens,
        "total output tokens": q.total_output_tokens, "good requests": q.good_requests,
        "goodput req/s": q.goodput_req_s, "SLO attainment": q.slo_attainment,
    }
    for metric in LATENCY_METRICS:
        stats = getattr(q, metric)
        name = LABELS[metric]
        out[f"mean {name} ms"] = stats.mean_ms
        for p in LATENCY_PERCENTILES:
            out[f"P{p} {name} ms"] = getattr(stats, f"p{p}_ms")
    return out


def compare_rate(got: dict[str, float], rec: dict[str, float], *, rel_tol: float = 1e-6,
                 abs_tol: float = 1e-6) -> list[tuple[str, float, float]]:
    """``(metric, recomputed, recorded)`` for every metric whose two values differ beyond the tolerances.

    Counts (completed, token totals, good requests) must be equal; the rest within ``rel_tol``
    relative or ``abs_tol`` absolute (ms, req/s or a fraction: numpy on the same inputs gives the
    same float; the tolerance only absorbs the JSON round trip).
    """
    exact = {"completed", "total input tokens", "total output tokens", "good requests"}
    bad = []
    for name, value in got.items():
        want = rec[name]
        same = value == want if name in exact else math.isclose(value, want, rel_tol=rel_tol, abs_tol=abs_tol)
        if not same:
            bad.append((name, value, want))
    return bad
