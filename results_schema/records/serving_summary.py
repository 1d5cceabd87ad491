"""``summary/serving-summary.json``: the serving phase's per-rate table, SLO rates and verdicts.

Rows are medians over repeats (``analysis.serving.summary`` computes them); metric definitions are
those of :mod:`results_schema.records.serving`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from results_schema.records.base import Implementation, NonNegFloat, NonNegInt, StrictModel
from results_schema.records.serving_spec import Fraction, PosFloat, PosInt, ServingSLO


OptFloat = Annotated[float, Field(allow_inf_nan=False)] | None


class ServingRateRow(StrictModel):
    """One (phase, label, rate) of ``summary/serving-summary.json``: medians over repeats."""

    phase: str = Field(description="Matrix phase.")
    label: str = Field(description="Case label.")
    implementation: Implementation = Field(description="Implementation.")
    group_size: NonNegInt = Field(description="offload_group_size.")
    num_in_group: NonNegInt = Field(description="offload_num_in_group.")
    prefetch_step: NonNegInt = Field(description="offload_prefetch_step.")
    offload_params: str = Field(description="offload_params, comma-joined.")
    rate_index: NonNegInt = Field(description="Position in the sweep.")
    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    repeats: PosInt = Field(description="Repeats measured.")
    achieved_req_s: NonNegFloat = Field(description="Median achieved rate (req/s).")
    output_tok_s: NonNegFloat = Field(description="Median output throughput (tok/s).")
    goodput_req_s: NonNegFloat = Field(description="Median goodput (req/s).")
    slo_attainment: Fraction = Field(description="Median fraction of good requests.")
    duration_s: NonNegFloat = Field(description="Median measured window (s).")
    ttft_p50_ms: NonNegFloat = Field(description="Median P50 TTFT (ms).")
    ttft_p90_ms: NonNegFloat = Field(description="Median P90 TTFT (ms).")
    ttft_p99_ms: NonNegFloat = Field(description="Median P99 TTFT (ms).")
    tpot_p50_ms: NonNegFloat = Field(description="Median P50 TPOT (ms).")
    tpot_p90_ms: NonNegFloat = Field(description="Median P90 TPOT (ms).")
    tpot_p99_ms: NonNegFloat = Field(description="Median P99 TPOT (ms).")
    itl_p50_ms: NonNegFloat = Field(description="Median P50 ITL (ms).")
    itl_p90_ms: NonNegFloat = Field(description="Median P90 ITL (ms).")
    itl_p99_ms: NonNegFloat = Field(description="Median P99 ITL (ms).")
    e2el_p50_ms: NonNegFloat = Field(description="Median P50 E2E latency (ms).")
    e2el_p90_ms: NonNegFloat = Field(description="Median P90 E2E latency (ms).")
    e2el_p99_ms: NonNegFloat = Field(description="Median P99 E2E latency (ms).")
    failed: NonNegInt = Field(description="Failed requests summed over repeats.")
    meets_slo: bool = Field(description="Every repeat met the SLO at this rate.")
    released_bytes: float = Field(description="Median released bytes (evidence).")
    offloaded_bytes: NonNegFloat = Field(description="Median offloaded bytes (evidence).")
    offloader_class: str = Field(description="Offloader class (evidence).")
    wrapped_layers: str = Field(description="Wrapped layer indices (evidence), comma-joined.")
    prefix_caching: bool = Field(description="Prefix caching of the server.")
    distinct_prompts: NonNegInt = Field(description="Fewest distinct prompts over repeats.")
    num_prompts: PosInt = Field(description="Measured requests per rate.")


class SLORateRow(StrictModel):
    """Per label: the highest configured rate meeting the SLO (it and every lower rate, every repeat)."""

    phase: str = Field(description="Matrix phase.")
    label: str = Field(description="Case label.")
    implementation: Implementation = Field(description="Implementation.")
    group_size: NonNegInt = Field(description="offload_group_size.")
    num_in_group: NonNegInt = Field(description="offload_num_in_group.")
    prefetch_step: NonNegInt = Field(description="offload_prefetch_step.")
    offload_params: str = Field(description="offload_params, comma-joined.")
    released_bytes: float = Field(description="Released bytes from the evidence (median over repeats).")
    slo_rate_rps: PosFloat | None = Field(description="That rate (req/s); null when none or inf (see slo_rate_is_inf).")
    slo_rate_is_inf: bool = Field(description="The rate meeting the SLO is inf (every request sent at t = 0).")
    slo_achieved_req_s: NonNegFloat | None = Field(description="Median achieved rate there (req/s); null = none.")
    on_front: bool = Field(description="On the Pareto front of (released bytes, SLO rate) within the phase.")


class VerdictRow(StrictModel):
    """current vs official on P99 TPOT at one (G, N, prefetch, params, rate); lower is better."""

    phase: str = Field(description="Matrix phase.")
    group_size: NonNegInt = Field(description="offload_group_size.")
    num_in_group: NonNegInt = Field(description="offload_num_in_group.")
    prefetch_step: NonNegInt = Field(description="offload_prefetch_step.")
    offload_params: str = Field(description="offload_params, comma-joined.")
    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    a: Implementation = Field(description="Side A (current).")
    b: Implementation = Field(description="Side B (official).")
    a_repeats: PosInt = Field(description="Processes of A.")
    b_repeats: PosInt = Field(description="Processes of B.")
    a_p99_tpot_ms: NonNegFloat = Field(description="Median over A's processes of P99 TPOT (ms).")
    b_p99_tpot_ms: NonNegFloat = Field(description="Median over B's processes of P99 TPOT (ms).")
    verdict: Literal["faster", "slower", "equivalent", "inconclusive"] = Field(
        description="analysis.comparison.compare's rule; faster = A has the lower P99 TPOT.")
    delta_pct: OptFloat = Field(description="(median A - median B) / median B (%).")
    ci_low_pct: OptFloat = Field(description="Bootstrap CI low bound of that difference (%); null = no interval.")
    ci_high_pct: OptFloat = Field(description="Bootstrap CI high bound (%); null = no interval.")
    verdict_text: str = Field(description="Verdict with its interval and rule.")


class ServingSummary(StrictModel):
    """``summary/serving-summary.json``: validity, per-rate table, SLO rates with their front, verdicts."""

    schema_version: Literal[1] = Field(default=1, description="Schema version (always 1).")
    valid: bool = Field(description="No serving validation error.")
    errors: tuple[str, ...] = Field(description="Serving validation errors.")
    warnings: tuple[str, ...] = Field(description="Serving validation warnings.")
    slo: ServingSLO | None = Field(description="SLO of the serving lines (null when there is none).")
    rates: tuple[ServingRateRow, ...] = Field(description="Per (phase, label, rate).")
    slo_rates: tuple[SLORateRow, ...] = Field(description="Per label.")
    verdicts: tuple[VerdictRow, ...] = Field(description="current vs official on P99 TPOT.")

    @model_validator(mode="after")
    def _check(self) -> "ServingSummary":
        if self.valid == bool(self.errors):
            raise ValueError(f"valid ({self.valid}) contradicts errors ({len(self.errors)})")
        return self
