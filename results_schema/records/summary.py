"""Schema of ``summary/comparison-summary.json`` (written by ``analysis.report.summary.write_summary``).

What is modelled: the document every report renders from (Markdown, HTML report, console table):
validity, notes, printed precision, the per-label rows (``SummaryRow``), the decision table
(``DecisionRow``), the run's provenance (``Provenance``), token-digest status, transfer-bound model
fits and the auxiliary comparison tables. Undefined statistics (no baseline, one process, no KV log
line) are ``null``; NaN/inf are never written (``allow_inf_nan=False``).

The auxiliary tables (``comparison``, ``long_window``, ``spaced_vs_adjacent``, ``cross_stack``,
``confirmation``, ``model_table``) are lists of flat rows of JSON scalars whose columns are defined by
the analysis functions that make them (``analysis.comparison.compare``, ``analysis.model.fit``); they are checked
for shape (flat, finite) here, not column by column.

What is deliberately not modelled: how the numbers are computed (``analysis``). This module must not
import ``analysis`` (data flows results_schema -> analysis).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from results_schema.records.base import StrictModel
from results_schema.records.identity import LabelKey, PhaseLabel

Float = Annotated[float, Field(allow_inf_nan=False)]
Scalar = bool | int | Float | str | None
"""One cell of an auxiliary table: a JSON scalar, finite when a number."""


class SummaryRow(LabelKey):
    """One (phase, label): ``analysis.aggregate.SUMMARY_COLUMNS`` plus ``tokens`` (after its ``LabelKey``). Units in
    the names."""

    offload_params: str = Field(description="offload_params segments joined by ',' ('' = all parameters).")
    runtime: str
    processes: int = Field(description="Case processes that produced a record.")
    throughput_median_tok_s: Float | None = Field(description="Median process throughput (tok/s), the primary metric.")
    throughput_mean_tok_s: Float | None
    throughput_stdev_tok_s: Float | None = Field(description="Sample stdev (ddof=1); null with one process.")
    throughput_min_tok_s: Float | None
    throughput_max_tok_s: Float | None
    pooled_round_throughput_median_tok_s: Float | None
    pooled_round_throughput_stdev_tok_s: Float | None
    rounds: int | None = Field(description="Measured rounds over all processes.")
    round_latency_p50_s: Float | None
    round_latency_p95_s: Float | None
    load_seconds_median: Float | None
    kv_cache_tokens_median: Float | None
    kv_cache_gib_median: Float | None
    peak_rss_bytes_median: Float | None
    device_memory_bytes_median: Float | None
    selected_layers: str = Field(description="Layer indices selected (evidence), joined by ','.")
    num_selected_layers: int
    wrapped_layers: str
    wrapped_count: int
    offloaded_bytes: int
    static_buffer_bytes: int
    released_bytes: int = Field(description="offloaded_bytes - static_buffer_bytes (evidence; accounted).")
    offloader_class: str
    baseline_throughput_median_tok_s: Float | None
    retention: Float | None = Field(description="Median / phase baseline median; null without a baseline.")
    throughput_change_pct: Float | None
    kv_gain_tokens: Float | None
    kv_gain_gib: Float | None
    window_measured_s_min: Float | None = Field(description="Shortest measured window (s) over the label's processes.")
    window_rounds_min: int = Field(description="Fewest measured rounds over the label's processes (0: not recorded).")
    contended_processes: int = Field(
        default=0, ge=0, description="Processes of the label whose measured window a busy host contended (foreign "
        "CPU work or steal above the limit, BenchRecord.host_load.contended); 0 in summaries written before this field.")
    unstable_processes: int = Field(
        default=0, ge=0, description="Processes of the label that ran no warmup round or whose measured window "
        "drifted more than the phase's noise floor (analysis.comparison.soundness).")
    front_excluded: str = Field(description="Why the point may not enter a front, knee or recommendation ('' = eligible).")
    pareto: bool
    knee: bool
    vs_baseline_verdict: str | None = Field(default=None, description="Verdict vs the phase baseline (analysis.comparison.verdict_rule.verdict).")
    vs_baseline_ci_low_pct: Float | None = Field(default=None, description="95% CI low of the change vs baseline (%).")
    vs_baseline_ci_high_pct: Float | None = Field(default=None, description="95% CI high of the change vs baseline (%).")
    vs_baseline_margin_pct: Float | None = Field(default=None, description="Equivalence margin (%) used.")
    vs_baseline_note: str | None = Field(default=None, description="Why the verdict is what it is (n=1, retention > 1, ...).")
    vs_baseline_ci_name: str | None = Field(
        default=None, description="The interval's name and level: '95% CI' (the fixed rule over all processes), or, in "
        "a sequential phase, the stopping look's, e.g. 'CI96.9% at look 1 (3 vs 3 processes)'; null in summaries "
        "written before this field.")
    tokens: str = Field(description="Greedy token identity vs baseline: identical, differs, no_baseline.")


class DecisionRow(LabelKey):
    """One row of the decision table (``analysis.comparison.decision.DECISION_COLUMNS``; after its ``LabelKey``)."""

    selected_layers: str
    num_selected_layers: int
    processes: int
    released_bytes: int = Field(description="Evidence-accounted released bytes.")
    released_gib: Float = Field(description="released_bytes / 2**30.")
    kv_gain_tokens: Float | None
    kv_gain_gib: Float | None
    throughput_median_tok_s: Float | None
    baseline_throughput_median_tok_s: Float | None
    retention: Float | None
    retention_ci_low: Float | None = Field(description="Lower bound of retention from the verdict's interval (the verdict rule's 95% t interval over processes, or a sequential phase's stopping look's: retention_ci_name); null: no interval.")
    retention_ci_high: Float | None
    retention_ci_name: str = Field(
        default="95% CI", description="The retention interval's name and level (SummaryRow.vs_baseline_ci_name): a "
        "sequential phase's label carries its stopping look's, e.g. 'CI96.9% at look 1 (3 vs 3 processes)'.")
    verdict: Literal["baseline", "faster", "slower", "equivalent", "inconclusive", "withheld", "INVALID"] = Field(
        description="Label vs phase baseline; withheld when a process it rests on (the label's or its baseline's) "
                    "was contended (withheld says how many); INVALID when a validation error concerns the label.")
    tokens: str
    pareto: bool
    knee: bool
    valid: bool = Field(description="False when a validation error concerns the label.")
    issues: str = Field(description="Codes of the validation errors concerning the label, joined by ','.")
    withheld: str = Field(default="", description="Why the verdict is withheld, e.g. 'contended (2 of 8 processes)' "
                                                  "('' = not withheld).")
    unstable: str = Field(default="", description="Why the label is unstable, e.g. 'unstable (4 of 4 processes: "
                                                  "warmup_rounds=0 ...)' ('' = stable); an unstable point is off "
                                                  "the front and out of recommendations.")


class Provenance(StrictModel):
    """Where and with what the run was made (from ``environment-manifest.json`` and the records)."""

    run_id: str = Field(description="Run directory name (manifest run_id, else the directory name).")
    experiment: str | None = None
    created_utc: str | None = None
    model_name: str | None = None
    model_path: str | None = None
    model_num_layers: int | None = None
    model_sha256sums_sha256: str | None = None
    hostname: str | None = None
    platform: str | None = None
    machine: str | None = Field(default=None, description="Architecture / ISA family (platform machine, e.g. x86_64).")
    isa: str | None = Field(default=None, description="CPU ISA extensions when recorded; null when the run did not.")
    devices: tuple[str, ...] = Field(default=(), description="'kind: name x count' per distinct device entry "
                                                                 "(runtimes on the same device: once).")
    python_version: str | None = None
    vllm_versions: tuple[str, ...] = Field(default=(), description="vllm_version of the case records (distinct).")
    torch_versions: tuple[str, ...] = Field(default=(), description="torch_version of the case records (distinct).")
    packages: dict[str, str | None] = Field(default_factory=dict, description="Manifest package versions.")
    git_revision: str | None = None
    git_dirty: bool | None = None
    config_sha256: str | None = None
    manifest: bool = Field(description="Whether environment-manifest.json was found.")


class TokenDigest(PhaseLabel):
    repeat: int
    status: str = Field(description="identical, differs or no_baseline.")


class ModelFit(StrictModel):
    """Fitted transfer-bound model of one ``phase/implementation`` (``analysis.model.fit``)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    phase: str
    implementation: str
    mode: str
    baseline_tok_s: Float
    num_prompts: int
    num_layers: int
    bytes_per_layer: Float
    bandwidth_bytes_s: Float
    bandwidth: str


class NoiseFloor(StrictModel):
    """Baseline vs baseline of one phase: the run's noise floor (``analysis.comparison.noise_floor``)."""

    phase: str
    processes: int = Field(ge=0, description="Baseline processes of the phase.")
    throughputs_tok_s: tuple[Float, ...] = Field(description="Each baseline process's throughput (tok/s), run order.")
    spread_pct: Float | None = Field(
        description="(max - min) / median of those throughputs, percent; null with fewer than 2 processes.")
    tokens_identical: bool | None = Field(
        description="All baseline processes generated the same token digest; null with fewer than 2 processes.")


class VarianceComponentsRow(StrictModel):
    """Where one arm's noise lives (``analysis.comparison.variance``): variances of log tok/s of measured rounds,
    between processes and within a process, with their intervals."""

    phase: str
    arm: str = Field(description="A label, or 'reference': the phase's undelayed baselines pooled (what verdicts use).")
    processes: int = Field(ge=2, description="Case processes of the arm (a).")
    rounds: int = Field(ge=2, description="Measured rounds of those processes (N).")
    n0: Float = Field(gt=0, description="Searle's average rounds per process (N - sum n_i^2 / N) / (a - 1).")
    df_between: int = Field(ge=1, description="Degrees of freedom of the between-process mean square (a - 1).")
    df_within: int = Field(ge=0, description="Degrees of freedom of the within-process mean square (N - a).")
    confidence: Float = Field(gt=0, lt=1, description="Coverage of the intervals (the verdicts' confidence).")
    between_var: Float = Field(ge=0, description="Between-process variance of log tok/s (ANOVA, truncated at 0).")
    between_var_low: Float = Field(ge=0, description="Lower bound (chi-square on the between mean square less MSW/n0).")
    between_var_high: Float = Field(ge=0, description="Upper bound, same construction.")
    within_var: Float = Field(ge=0, description="Within-process (round-to-round) variance of log tok/s (MSW).")
    within_var_low: Float | None = Field(description="Chi-square lower bound (N - a df); null with one round per process.")
    within_var_high: Float | None = Field(description="Chi-square upper bound; null with one round per process.")
    process_var: Float = Field(ge=0, description="Variance of one process's value: between + within / n0.")
    process_var_low: Float = Field(ge=0, description="Chi-square lower bound with a - 1 df.")
    process_var_high: Float = Field(ge=0, description="Chi-square upper bound with a - 1 df.")
    between_sd_pct: Float = Field(ge=0, description="sqrt(between_var) as percent of the throughput (exp(sd) - 1).")
    within_sd_pct: Float = Field(ge=0, description="sqrt(within_var) as percent of the throughput.")
    process_sd_pct: Float = Field(ge=0, description="sqrt(process_var) as percent of the throughput.")


class PairedLogRatio(StrictModel):
    """What pairing by block buys one label against its phase's reference (``analysis.comparison.shared_time``)."""

    label: str
    reference: str = Field(description="The reference labels (undelayed baselines) joined by ','; per block their "
                                       "mean log throughput.")
    blocks: int = Field(ge=2, description="Blocks in which both the label and the reference ran.")
    paired_sd_pct: Float = Field(ge=0, description="SD over blocks of log(label / reference) within a block, as "
                                 "percent (exp(sd) - 1).")
    unpaired_sd_pct: Float = Field(ge=0, description="sqrt(var(log label) + var(log reference)) over the same blocks: "
                                   "the log ratio's SD without pairing, as percent.")
    ratio: Annotated[Float, Field(ge=0)] | None = Field(description="paired / unpaired SD (of the logs); below 1: the pairing cancels a "
                                "shared block shift; null when the unpaired SD is 0.")


class SharedInTimeRow(StrictModel):
    """Whether a phase's process-level noise is a level shift shared by the arms of one block of time
    (``analysis.comparison.shared_time``): the two-way additive ANOVA of log process throughput, labels x complete
    blocks (the repeat index), with the block variance (method of moments, truncated at 0) and its F test."""

    phase: str
    labels: int = Field(ge=2, description="Labels of the phase (a).")
    blocks: int = Field(ge=2, description="Complete blocks used (b): repeat indices in which every label ran.")
    dropped_blocks: tuple[int, ...] = Field(description="Repeat indices left out as incomplete (a label missing).")
    method: str = Field(description="The model and estimator in words.")
    ss_label_share: Float = Field(ge=0, le=1, description="SS_label / SS_total.")
    ss_block_share: Float = Field(ge=0, le=1, description="SS_block / SS_total.")
    ss_error_share: Float = Field(ge=0, le=1, description="SS_error / SS_total.")
    df_block: int = Field(ge=1, description="b - 1.")
    df_error: int = Field(ge=1, description="(a - 1)(b - 1).")
    ms_block: Float = Field(ge=0, description="Block mean square (log units squared).")
    ms_error: Float = Field(ge=0, description="Residual mean square: a process's own variance within a label, block "
                            "removed.")
    block_var: Float = Field(ge=0, description="Block variance component max(0, (MS_block - MS_error) / a).")
    block_share: Annotated[Float, Field(ge=0, le=1)] | None = Field(description="block_var / (block_var + ms_error): the share of the "
                                      "process-level variance within a label that a block of time carries; null "
                                      "when both are 0.")
    f_block: Annotated[Float, Field(ge=0)] | None = Field(description="MS_block / MS_error on (df_block, df_error); null when MS_error "
                                  "is 0.")
    p_block: Annotated[Float, Field(ge=0, le=1)] | None = Field(description="Upper-tail p of f_block (F distribution).")
    block_sd_pct: Float = Field(ge=0, description="sqrt(block_var) as percent of the throughput (exp(sd) - 1).")
    error_sd_pct: Float = Field(ge=0, description="sqrt(ms_error) as percent: a process's own SD, block removed.")
    within_label_sd_pct: Float = Field(ge=0, description="SD within a label before the block is removed, "
                                       "sqrt((SS_block + SS_error) / (a (b - 1))), as percent.")
    pairs: tuple[PairedLogRatio, ...] = Field(description="Each non-reference label vs the reference, paired by "
                                              "block (empty without a reference).")


class DetectableEffectRow(PhaseLabel):
    """A label's minimum detectable cost vs its phase's reference arm (``analysis.comparison.power``): the cost the
    production verdict rule calls ``slower`` with ``power``, simulated at the run's variance components."""

    processes: int = Field(ge=2, description="Processes of the label in the design judged.")
    reference_processes: int = Field(ge=2, description="Processes of the reference arm in the design judged.")
    mde_pct: Float | None = Field(description="Minimum detectable cost, percent of the reference's throughput; "
                                  "null when no cost below 100% reaches the power.")
    mde_low_pct: Float | None = Field(description="MDE at the lower end of the noise's interval (percent).")
    mde_high_pct: Float | None = Field(description="MDE at the upper end of the noise's interval (percent).")
    df: Float | None = Field(description="Welch-Satterthwaite df of the difference's variance; null when it is 0.")
    power: Float = Field(gt=0, lt=1, description="Power at which the MDE is stated.")
    confidence: Float = Field(gt=0, lt=1, description="Confidence of the verdicts (and of the range).")
    margin_pct: Float = Field(gt=0, description="Equivalence margin of the verdicts (percent).")
    method: str = Field(default="", description="Empty: the unpaired rule (decide, processes vs reference "
                        "processes); a phase paired by block: 'paired t, N blocks vs <baseline>' (decide_paired; "
                        "processes = blocks; df = blocks - 1).")


class ComparisonSummary(StrictModel):
    """``summary/comparison-summary.json``."""

    schema_version: Literal[1] = 1
    run_dir: str = Field(description="Run directory, resolved (absolute).")
    valid: bool = Field(description="Validation verdict (summary/validation.json).")
    notes: tuple[str, ...] = Field(description="Caveats printed with every table (e.g. the CPU note).")
    precision: dict[str, int] = Field(description="Decimals each statistic is printed with.")
    margin_pct: Float = Field(description="Equivalence margin of every verdict, percent of the reference median (analysis.comparison.verdict_rule.verdict).")
    verdict_rule: str = Field(description="The verdict rule in words, with the margin.")
    knee_rule: str = Field(description="The knee rule in words (analysis.comparison.pareto.knee_rule_text).")
    provenance: Provenance
    rows: tuple[SummaryRow, ...]
    decision: tuple[DecisionRow, ...]
    comparison: tuple[dict[str, Scalar], ...]
    long_window: tuple[dict[str, Scalar], ...]
    spaced_vs_adjacent: tuple[dict[str, Scalar], ...]
    cross_stack: tuple[dict[str, Scalar], ...]
    confirmation: tuple[dict[str, Scalar], ...]
    token_digests: tuple[TokenDigest, ...]
    models: dict[str, ModelFit | None]
    model_table: tuple[dict[str, Scalar], ...]
    noise_floor: tuple[NoiseFloor, ...] = Field(
        default=(), description="Per phase: baseline-vs-baseline throughput spread and token identity (empty in "
        "summaries written before this field).")
    host_memory: tuple[dict[str, Scalar], ...] = Field(
        default=(), description="Per label: host memory (measured RSS vs the phase baseline's, with its source) per "
        "offloaded and per released byte (runtime evidence), the bytes the offloader's own storage explains, flagged "
        "above 0.2 host B per offloaded B beyond them (analysis.report.host_memory).")
    variance_components: tuple[VarianceComponentsRow, ...] = Field(
        default=(), description="Per phase and arm: between-process and within-process variance of log tok/s with "
        "intervals (analysis.comparison.variance; empty where no arm ran 2 processes).")
    detectable_effects: tuple[DetectableEffectRow, ...] = Field(
        default=(), description="Per label: minimum detectable cost at the run's confidence and 80% power, with its "
        "range (analysis.comparison.power; empty where no label and reference ran 2 processes each).")
    shared_in_time: tuple[SharedInTimeRow, ...] = Field(
        default=(), description="Per phase with >= 2 labels and >= 2 complete blocks: how much of the process-level "
        "variance is a level shift shared by the arms of one block of time, its F test, and what pairing by block "
        "buys per label (analysis.comparison.shared_time; empty in summaries written before this field).")
    aa_comparisons: tuple[dict[str, Scalar], ...] = Field(
        default=(), description="A/A rows (a label's twin vs the label) and the speed control's rows (vs each "
        "undelayed baseline label) under the verdict rule (analysis.comparison.dimensioning).")
    dimensioning: tuple[dict[str, Scalar], ...] = Field(
        default=(), description="Phases with a twin or a speed control: the MDE of the default's design and the "
        "processes x rounds per arm that resolve 5% and 10% (analysis.comparison.dimensioning).")
