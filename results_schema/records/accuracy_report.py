"""The accuracy verifier's report models: ``accuracy-verification.json`` and its rows.

What is modelled: one verifier check (:class:`VerifyCheck`), one comparable case x task as the verifier
saw it (:class:`CaseSummary`: offload setting and backend, counts, accuracy, drop vs the baseline,
verdict), a few examples as real text (:class:`SampleExample`, :class:`SampleReply`: question, gold, the
baseline's and each offload case's reply) and the report (:class:`AccuracyVerification`: mode, the ``max_accuracy_drop`` tolerance and
where the planned backends came from; :class:`BaselineAgreement`: the baseline runs of a task compared
with each other). Re-exported by :mod:`results_schema.records.accuracy`; the CSV
``accuracy-verification.csv`` (``analysis.accuracy.table``) is one row per :class:`CaseSummary`.

What is deliberately not modelled: the checks themselves (``analysis.accuracy.verifier``). Fields added after
the first reports have defaults, so those reports still validate.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from results_schema.records.accuracy_types import BaselineJudgement
from results_schema.records.accuracy_types import Fraction, ProtocolName, Sha256Hex, Task, VerifyMode
from results_schema.records.base import Implementation, NonNegInt, StrictModel


class VerifyCheck(StrictModel):
    """One verifier check and its outcome."""

    name: str = Field(description="Check id (counts, dataset_hash, protocol, backend, examples, identity, drop, ...).")
    task: Task | None = Field(description="Task the check is about; null for run-wide checks.")
    label: str | None = Field(description="Case the check is about; null for task-wide checks.")
    status: Literal["pass", "fail", "skipped"]
    message: str = Field(description="What was checked and, on failure, what differed.")


class CaseSummary(StrictModel):
    """One case x task as the verifier saw it (one row of the Markdown table and of the CSV)."""

    label: str
    implementation: Implementation
    task: Task
    protocol_name: ProtocolName = Field(description="Protocol the case was scored under.")
    protocol_sha256: Sha256Hex = Field(description="SHA-256 of that protocol's spec.")
    num_examples: NonNegInt = Field(description="Examples evaluated.")
    correct: NonNegInt = Field(description="Correct examples.")
    unparsable: NonNegInt = Field(description="Unparsable outputs (counted wrong).")
    accuracy: Fraction = Field(description="correct / num_examples.")
    drop_vs_baseline: Annotated[float, Field(allow_inf_nan=False)] = Field(
        description="baseline accuracy - this accuracy (fraction; > 0 is a drop)."
    )
    examples_sha256: Sha256Hex
    identical_to_baseline: bool = Field(description="examples_sha256 equals the baseline's.")
    offload_group_size: NonNegInt = Field(default=0, description="G the case recorded (0: no offload).")
    offload_num_in_group: NonNegInt = Field(default=0, description="N the case recorded.")
    offload_prefetch_step: Annotated[int, Field(ge=1)] = Field(default=1, description="vLLM offload_prefetch_step.")
    offload_backend: str = Field(default="auto", description="vLLM offload_backend the case recorded it ran with.")
    verdict: Literal["pass", "fail"] = Field(
        default="pass", description="'fail' when any check of this case and task failed (baseline: its own checks).")
    paired_lost: NonNegInt | None = Field(
        default=None, description="Judged against the noise floor: items every baseline run got right and this case "
        "got wrong (null when judged by identity, and for the baseline).")
    paired_gained: NonNegInt | None = Field(
        default=None, description="Judged against the noise floor: items every baseline run got wrong and this case "
        "got right.")
    paired_floor: NonNegInt | None = Field(
        default=None, description="Judged against the noise floor: items the baseline runs themselves score "
        "differently (left out of the paired test).")
    mcnemar_p: Fraction | None = Field(
        default=None, description="One-sided exact McNemar p of a drop, P(X >= paired_lost) for X ~ Binomial("
        "paired_lost + paired_gained, 1/2) (analysis.accuracy.baselines.paired_drop).")


class BaselineAgreement(StrictModel):
    """The baseline runs of one task compared with each other (the verifier's baseline self-check).

    When every run has the same examples the baseline is deterministic on this runtime and offload
    cases are judged by identity. When they differ, the baseline is not deterministic here: offload
    cases are judged against the baseline-vs-baseline floor with a paired per-example comparison
    (``judged_by = 'noise_floor'``), never blamed for the runtime's own noise.
    """

    task: Task
    label: str = Field(description="Baseline case label.")
    runs: NonNegInt = Field(description="Baseline runs (repeats) compared.")
    agree: bool = Field(description="Every baseline run has the same examples (SHA-256).")
    examples_sha256: tuple[Sha256Hex, ...] = Field(description="Examples SHA-256 of each baseline run, in repeat order.")
    accuracies: tuple[Fraction, ...] = Field(description="Accuracy of each baseline run, in repeat order.")
    differing_examples: tuple[NonNegInt, ...] = Field(
        description="Example indices whose generated tokens differ between baseline runs (the floor).")
    judged_by: BaselineJudgement = Field(
        description="How offload cases of this task were judged: identity with the baseline (runs agree), against "
                    "the baseline-vs-baseline floor (runs disagree), or identity with the only baseline run.")


class SampleReply(StrictModel):
    """One case's reply to one sampled example (a row of the reports' example tables)."""

    label: str = Field(description="Case label (the baseline first, then the offload cases in report order).")
    implementation: Implementation
    output_text: str = Field(description="Generated text, cut to at most ``analysis.accuracy.samples.REPLY_CHARS`` "
                                         "(400) characters (``truncated`` says whether it was cut).")
    truncated: bool = Field(description="The generated text was longer and was cut.")
    parsed: str | None = Field(description="Answer the protocol extracted (gold's normal form); null = unparsable.")
    correct: bool = Field(description="parsed == gold.")
    identical_to_baseline: bool = Field(
        description="Same generated token ids (output_token_sha256) as the baseline's reply to this example.")


class SampleExample(StrictModel):
    """One example of a task with its prompt text, gold answer and every compared case's reply."""

    task: Task
    index: NonNegInt = Field(description="0-based row index in the dataset file.")
    example_id: str = Field(description="Stable id of the row.")
    question: str = Field(description="The row's question text as stored, cut like the replies (``question_truncated``).")
    question_truncated: bool = Field(description="The question text was longer and was cut.")
    gold: str = Field(description="Gold answer in the protocol's normal form.")
    replies: tuple[SampleReply, ...] = Field(description="The baseline's reply first, then each offload case's.")


class AccuracyVerification(StrictModel):
    """``accuracy-verification.json``: the verifier's report over one run directory."""

    schema_version: Literal[2] = 2
    mode: VerifyMode = Field(description="'formal' (full counts required) or 'limited' (smoke only, not evidence).")
    mode_note: str = Field(description="Human label of the mode, repeated in every rendered output.")
    limit: Annotated[int, Field(ge=1)] | None = Field(description="--limit the verifier was given; null in formal mode.")
    run_dir: str = Field(description="Directory verified.")
    passed: bool = Field(description="All checks passed (no 'fail').")
    cases: tuple[CaseSummary, ...]
    checks: tuple[VerifyCheck, ...]
    max_accuracy_drop: Fraction = Field(
        default=0.0, description="Tolerance of the 'drop' rule: a case passes it iff baseline accuracy - case "
        "accuracy <= this, per task (a fraction of accuracy: 0.01 = 1 percentage point; 0 = no drop allowed).")
    plan_path: str | None = Field(
        default=None, description="plan.json the planned offload_backend of each case was read from; null = "
        "none found, the backends were not checked against a plan.")
    baselines: tuple[BaselineAgreement, ...] = Field(
        default=(), description="Per task: the baseline runs compared with each other and how offload cases were "
        "judged (identity or the baseline-vs-baseline noise floor).")
    samples: tuple[SampleExample, ...] = Field(
        default=(), description="Per task, the first few examples (prompt question, gold, the first baseline run's "
        "reply beside each offload case's first run's), shown as real text in the Markdown and HTML reports.")
