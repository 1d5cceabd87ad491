"""Per-request checks of serving records (``analysis.serving.summary``) and vLLM's latency definitions.

What is modelled: ``request_tpot_s`` / ``pooled_itl_s`` (vLLM's TPOT and ITL definitions);
``check_requests`` recomputes one ``ServingRun`` rate from its per-request file (every number of
``analysis.serving.recompute.recompute_rate``: counts, token totals, mean / P50 / P90 / P99 of TTFT,
TPOT, ITL and E2E, good requests, goodput, SLO attainment; SHA-256 of the file; server-side token
counts vs the requested lengths) and warns when requests received their whole output in one network read;
``ServingValidation`` holds the errors and warnings of ``analysis.serving.summary.validate_serving``.

What is deliberately not modelled: counts against the plan (``analysis.serving.summary.validate_serving``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.serving.recompute import compare_rate, recompute_rate, recorded_rate
from results_schema.codec.files import file_sha256
from results_schema.codec.io import RecordError, StrictJSONError, read_json
from results_schema.records.serving import PROMPT_LEN_TOLERANCE, ServingRequests, ServingRun

REL_TOL = 1e-6
ONE_READ_S = 1e-4
"""E2E - TTFT below this (s): every chunk of the request arrived with the first one (one network read)."""

def request_tpot_s(ttft_s: float, latency_s: float, output_tokens: int) -> float | None:
    """TPOT of one request: ``(E2E - TTFT) / (output_tokens - 1)``; None for <= 1 token.

    Source: ``vllm/benchmarks/serve.py`` ``calculate_metrics``. TTFT 0.2 s, E2E 1.2 s,
    11 tokens -> 0.1 s.
    """
    if output_tokens <= 1:
        return None
    return (latency_s - ttft_s) / (output_tokens - 1)


def pooled_itl_s(itls: Sequence[Sequence[float]]) -> list[float]:
    """Every inter-chunk gap of every request, pooled (vLLM's ITL sample)."""
    return [float(x) for gaps in itls for x in gaps]


def check_requests(run_dir: Path, r: ServingRun, errors: list[str], warnings: list[str] | None = None) -> None:
    q = r.rate
    where = f"{r.phase}/{r.label}-r{r.repeat} rate {q.index}"
    path = run_dir / q.requests_path
    if not path.is_file():
        errors.append(f"{where}: per-request file {q.requests_path} is missing")
        return
    if file_sha256(path) != q.requests_sha256:
        errors.append(f"{where}: per-request file {q.requests_path} does not match its recorded SHA-256")
        return
    try:
        reqs = read_json(path, ServingRequests)
    except (RecordError, StrictJSONError) as exc:
        errors.append(f"{where}: {exc}")
        return
    ok = [x for x in reqs.requests if x.success]
    one_chunk = sum(1 for x in ok if x.output_tokens > 1 and x.latency_s - x.ttft_s < ONE_READ_S)
    if one_chunk and warnings is not None:
        warnings.append(f"{where}: {one_chunk} of {len(ok)} requests received their whole output in the first "
                        f"network read (E2E - TTFT < {ONE_READ_S * 1000:g} ms: TPOT and ITL ~0 by vLLM's "
                        "definitions, the decode time is inside TTFT)")
    rate = "inf" if q.request_rate_rps is None else f"{q.request_rate_rps:g}"
    for name, got, rec in compare_rate(recompute_rate(reqs.requests, r.slo, q.duration_s), recorded_rate(q)):
        errors.append(f"{where} ({rate} req/s): {name} recomputed from {q.requests_path} is {got}, "
                      f"the record says {rec}")
    tol = r.load.input_len * PROMPT_LEN_TOLERANCE
    bad_out = sorted({x.output_tokens for x in ok} - {r.load.output_len})
    bad_in = sorted({x.prompt_tokens for x in ok
                     if x.prompt_tokens != x.dataset_prompt_tokens or abs(x.prompt_tokens - r.load.input_len) > tol})
    if bad_out or bad_in:
        errors.append(f"{where}: server token counts differ from the request: output {bad_out} (requested "
                      f"{r.load.output_len}), prompt {bad_in} (requested {r.load.input_len}, dataset's own count "
                      f"must match, tolerance {PROMPT_LEN_TOLERANCE:.0%})")


@dataclass
class ServingValidation:
    """Errors make the serving results invalid; warnings do not."""

    errors: list[str]
    warnings: list[str]

    @property
    def valid(self) -> bool:
        return not self.errors
