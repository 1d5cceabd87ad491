"""``summary/serving-summary.json``: the serving phase's per-rate table, SLO rates and verdicts.

Rows are medians over repeats (``analysis.serving.summary`` computes them); metric definitions are
those of :mod:`results_schema.records.serving`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from results_schema.records.base import Implementation, NonNegFloat, NonNegInt, StrictModel
from results_schema.records.serving_spec import Fraction, PosFloat, PosInt, ServingSLO
from results_schema.records.identity import PhaseLabel


OptFloat = Annotated[float, Field(allow_inf_nan=False)] | None


class ServingLabelKey(PhaseLabel):
    """One (phase, label) of a serving table and its offload setting (G = N = 0: the baseline)."""

    implementation: Implementation = Field(description="Implementation.")
    group_size: NonNegInt = Field(description="offload_group_size.")
    num_in_group: NonNegInt = Field(description="offload_num_in_group.")
    prefetch_step: NonNegInt = Field(description="offload_prefetch_step.")
    offload_params: str = Field(description="offload_params, comma-joined.")


class ServingRateRow(ServingLabelKey):
    """One (phase, label, rate) of ``summary/serving-summary.json``: medians over repeats (after its
    ``ServingLabelKey``)."""

    rate_index: NonNegInt = Field(
        description="Rank of the configured rate by value within the label (the rates run in a rotated order per "
                    "repeat; positions are in order_effects).")
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
    meets_slo: bool = Field(description="Every repeat met the SLO at this rate, and the requests support it "
                                        "(slo_supported).")
    slo_supported: bool = Field(
        description="The pooled completed requests resolve the SLO's attainment: n * (1 - attainment) >= 1 (at 0.9, "
                    "at least 10 requests); otherwise no SLO verdict stands at this rate.")
    completed_requests: NonNegInt = Field(description="Completed requests summed over repeats (the sample of the rate).")
    released_bytes: float = Field(description="Median released bytes (evidence).")
    offloaded_bytes: NonNegFloat = Field(description="Median offloaded bytes (evidence).")
    offloader_class: str = Field(description="Offloader class (evidence).")
    wrapped_layers: str = Field(description="Wrapped layer indices (evidence), comma-joined.")
    prefix_caching: bool = Field(description="Prefix caching of the server.")
    distinct_prompts: NonNegInt = Field(description="Fewest distinct prompts over repeats.")
    num_prompts: PosInt = Field(description="Measured requests per rate.")


class SLORateRow(ServingLabelKey):
    """Per label: the highest configured rate meeting the SLO (it and every lower rate, every repeat; after its
    ``ServingLabelKey``)."""

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


Metric = Literal["ttft", "tpot", "itl", "e2el"]


class PercentileRow(PhaseLabel):
    """One percentile of one metric at one (phase, label, rate), over the requests of every repeat, with its sample.

    The p-th percentile of ``n`` values is the maximum when fewer than one value lies above it
    (``n * (100 - p) / 100 < 1``: P99 from fewer than 100 requests) and the minimum when fewer than one
    lies below it; such a value is reported as what it is (``kind``), never as the percentile.
    """

    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    metric: Metric = Field(description="ttft, tpot (per request), itl (pooled gaps) or e2el.")
    percentile: Annotated[int, Field(ge=1, le=99)] = Field(description="Requested percentile.")
    n: PosInt = Field(description="Sample size: requests (ITL: gaps) pooled over the label's processes at this rate.")
    processes: PosInt = Field(description="Processes pooled.")
    kind: Literal["percentile", "max", "min"] = Field(
        description="'max' / 'min' when n cannot resolve the percentile (the value is the sample's extreme).")
    value_ms: NonNegFloat = Field(description="The value (ms; numpy linear interpolation over the pooled sample).")
    ci_low_ms: OptFloat = Field(description="Bootstrap 95% interval low bound, resampling requests (ms); null for an extreme.")
    ci_high_ms: OptFloat = Field(description="Bootstrap 95% interval high bound (ms); null for an extreme.")


class BaselineVerdictRow(PhaseLabel):
    """An offload label vs the baseline on one serving metric at one rate, judged against the baselines' floor."""

    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    metric: Metric = Field(description="Metric; the per-process value is its P50 over that process's requests.")
    a_processes: PosInt = Field(description="Processes of the offload label.")
    b_processes: PosInt = Field(description="Baseline processes.")
    a_median_ms: NonNegFloat = Field(description="Median over the label's processes of their P50 (ms), every process "
                                                 "pooled (design blocks pairs them; delta_pct is the paired figure).")
    b_median_ms: NonNegFloat = Field(description="Median over the floor baseline processes of their P50 (ms), every "
                                                 "process of every baseline label pooled.")
    floor_pct: OptFloat = Field(
        description="The baselines' floor at this rate (%): design processes, the spread (max - min) / median of "
                    "every baseline process's P50 (null with fewer than 2); design blocks, the widest such spread "
                    "of the baselines inside one block.")
    margin_pct: NonNegFloat = Field(description="Equivalence margin used (%): the default margin, or a sequential label's target; the floor gates only slower / faster.")
    verdict: Literal["slower", "equivalent", "inconclusive", "faster", "withheld"] = Field(
        description="slower / faster only when the t interval (95%; a sequential label's: its stopping look's level, named in verdict_text; design processes: the wider of Welch's and the "
                    "pooled t over processes; blocks: paired t over blocks, blocks - 1 df; "
                    "analysis.comparison.verdict_rule) lies beyond the floor on one side; equivalent when it lies "
                    "inside the margin (the text names the side when it excludes 0); otherwise inconclusive; "
                    "withheld when a process of either side was contended at this rate (RateResult.host_load).")
    delta_pct: OptFloat = Field(description="(median A - median B) / median B (%; positive = the label is slower); "
                                            "design blocks: the median over blocks of that difference per block.")
    ci_low_pct: OptFloat = Field(description="t interval (95%, or a sequential label's stopping-look level) low bound of the ratio minus 1 (%): processes, of the "
                                             "ratio of the geometric means; blocks, of the geometric-mean per-block "
                                             "ratio (analysis.comparison.verdict_rule).")
    ci_high_pct: OptFloat = Field(description="t interval high bound (%), at the level of ci_low_pct.")
    verdict_text: str = Field(description="Verdict with its interval, floor and margin.")
    design: Literal["processes", "blocks"] = Field(
        default="processes",
        description="processes: the label's processes vs the baseline's (unpaired t interval), floor over the "
                    "whole run; blocks: each label process vs the baselines of its own block (repeat index: adjacent "
                    "in the schedule, same rate order), paired t interval over blocks (analysis.serving.stats).")
    blocks: PosInt | None = Field(default=None, description="Blocks of the blocks design; null for processes.")

    @model_validator(mode="after")
    def _design(self) -> "BaselineVerdictRow":
        if (self.design == "blocks") != (self.blocks is not None):
            raise ValueError(f"design {self.design!r} with blocks {self.blocks!r}: blocks is set exactly for the "
                             "blocks design")
        return self


class OrderEffectRow(PhaseLabel):
    """One (phase, label, rate, metric): does the value depend on the rate's position in the sweep?"""

    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    metric: Metric = Field(description="Metric (per-process P50).")
    positions: tuple[NonNegInt, ...] = Field(description="Positions in the sweep at which this rate ran.")
    position_medians_ms: tuple[NonNegFloat, ...] = Field(description="Median per-process P50 at each position (ms).")
    spread_pct: NonNegFloat = Field(description="(max - min) / median of the position medians (%); where the "
                                               "floor baselines ran in blocks, of the position medians relative to "
                                               "theirs at the same position (analysis.serving.stats).")
    floor_pct: NonNegFloat = Field(
        description="Threshold: max(default margin, the spread of this label's processes that ran this rate at the "
                    "same position, and of the floor baselines' (pooled over their labels) likewise) (%).")
    effect: bool = Field(description="spread_pct > floor_pct: the rate's position changes the value beyond the floor.")
    relative: bool = Field(default=False, description="spread_pct is of the position medians relative to the floor "
                                                      "baselines' at the same position (the blocks design).")


class OutputCheckRow(PhaseLabel):
    """One case process at one rate: its requests' output tokens vs the baseline's (analysis.serving.outputs)."""

    implementation: Implementation = Field(description="Implementation.")
    repeat: NonNegInt = Field(description="Repeat index.")
    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    position: NonNegInt = Field(description="Position of the rate in this process's sweep.")
    compared: NonNegInt = Field(description="Requests compared (completed here and in a baseline process).")
    mismatched: tuple[NonNegInt, ...] = Field(description="Request indices whose tokens match no baseline process's.")
    floor: tuple[NonNegInt, ...] = Field(description="Request indices on which the baseline processes disagree.")
    baselines: NonNegInt = Field(description="Baseline processes at this rate (speed controls included).")
    status: Literal["identical", "differs", "within_baseline_noise", "no_baseline"] = Field(
        description="The output rule's verdict; differs fails the case and the run.")
    controls: NonNegInt = Field(default=0, description="How many of the baseline processes are speed controls "
                                "(a step delay, no byte moved: offload.controls).")


class ServingVarianceRow(PhaseLabel):
    """Between-process variance of one label's per-process P50 of one metric at one rate (no rounds in serving:
    the process is the only level; ``analysis.serving.stats.process_variance``)."""

    rate_rps: PosFloat | None = Field(description="Configured rate (req/s); null = inf.")
    metric: str = Field(description="ttft, tpot, itl or e2el: each process's P50 of it.")
    processes: int = Field(ge=2, description="Processes of the label at the rate (n).")
    df: int = Field(ge=1, description="Degrees of freedom of the variance (n - 1).")
    between_var: float = Field(ge=0, allow_inf_nan=False, description="Sample variance of log P50 over processes.")
    between_var_low: float = Field(ge=0, allow_inf_nan=False, description="Chi-square lower bound (n - 1 df).")
    between_var_high: float = Field(ge=0, allow_inf_nan=False, description="Chi-square upper bound (n - 1 df).")
    between_sd_pct: float = Field(ge=0, allow_inf_nan=False, description="sqrt(between_var) as percent (exp(sd) - 1).")
    confidence: float = Field(gt=0, lt=1, description="Coverage of the interval.")


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
    percentiles: tuple[PercentileRow, ...] = Field(description="Every percentile with its sample and interval.")
    baseline_verdicts: tuple[BaselineVerdictRow, ...] = Field(
        description="Each offload label vs the baseline per metric and rate, against the baselines' floor.")
    order_effects: tuple[OrderEffectRow, ...] = Field(description="Rate position effects (rates rotated per repeat).")
    outputs: tuple[OutputCheckRow, ...] = Field(description="Per-request output comparison under load.")
    process_variance: tuple[ServingVarianceRow, ...] = Field(
        default=(), description="Per label, rate and metric: the between-process variance of log P50 with its "
        "chi-square interval (analysis.serving.stats.process_variance).")

    @model_validator(mode="after")
    def _check(self) -> "ServingSummary":
        if self.valid == bool(self.errors):
            raise ValueError(f"valid ({self.valid}) contradicts errors ({len(self.errors)})")
        return self
