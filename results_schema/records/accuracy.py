"""Strict models of the accuracy-equivalence files: dataset manifest, per-example rows,
per-case results and the matrix verification report.

What is modelled: what one accuracy case (one dataset, one implementation, one
offload setting, one fresh process) wrote to disk, what the local dataset files
are (source, revision, split, row count, SHA-256), and what the verifier
concluded. Example rows deliberately carry nothing case-specific (no label,
pid or timing), so two cases that produced the same outputs write
byte-identical example files: their SHA-256 is the output-identity check.

Protocol specs (:class:`ProtocolSpec`) are defined here; the registered ones live in
``results_schema.records.protocols``. Schema version 2: results record
``protocol_name``, ``parsed``, ``length_limited``, ``finish_reasons``; example rows
the data ``row``; version-1 files (the old protocol layout) are refused.

What is deliberately not modelled: answer extraction and prompt rendering
(``runners.incase.accuracy``), statistics (``analysis.accuracy.verifier``). This module must
not import vLLM or torch.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from results_schema.records.base import Implementation, SchemaVersion, NonNegInt, StrictModel
from results_schema.records.host_load import HostLoad
from results_schema.records.models import RuntimeEvidence
from results_schema.records.identity import OffloadSetting
from results_schema.records.accuracy_report import AccuracyVerification as AccuracyVerification
from results_schema.records.accuracy_report import BaselineAgreement as BaselineAgreement
from results_schema.records.accuracy_report import CaseSummary as CaseSummary
from results_schema.records.accuracy_report import SampleExample as SampleExample
from results_schema.records.accuracy_report import SampleReply as SampleReply
from results_schema.records.accuracy_report import VerifyCheck as VerifyCheck
from results_schema.records.accuracy_types import FinishReason, Fraction, NonNegSeconds, ProtocolName, Sha256Hex, Task, VerifyMode
from results_schema.records.identity import CaseKey

FULL_ROW_COUNTS: dict[str, int] = {"gsm8k": 1319, "gpqa": 198}
"""Rows of the full evaluation splits: GSM8K ``main``/test (1319), GPQA ``gpqa_diamond``/train (198)."""


def canonical_json(obj: object) -> str:
    """Canonical JSON text used for hashing: sorted keys, no spaces, ASCII, finite numbers only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


class DatasetEntry(StrictModel):
    """One local dataset file and where it came from."""

    name: str = Field(description="Entry name, unique in its manifest (e.g. gsm8k, gpqa_diamond, gsm8k-fixture).")
    task: Task = Field(description="Task the rows belong to; selects the loader, prompt and scorer.")
    kind: Literal["full", "fixture"] = Field(
        description="'full': the complete evaluation split materialized from its source; 'fixture': a small "
        "hand-written file in the same format, for tests and smoke runs only."
    )
    source: str = Field(description="Origin: hub dataset id (openai/gsm8k, Idavidrein/gpqa) or 'fixture'.")
    config: str | None = Field(default=None, description="Hub dataset config name (main, gpqa_diamond).")
    revision: str = Field(description="Hub commit of the source, or 'fixture-v<N>' for fixtures.")
    split: str = Field(description="Split name (test for GSM8K, train for GPQA Diamond).")
    path: str = Field(description="JSONL file, relative to the manifest's directory.")
    rows: Annotated[int, Field(ge=1)] = Field(description="Number of JSON lines (examples) in the file.")
    sha256: Sha256Hex = Field(description="SHA-256 of the file's bytes (lowercase hex).")

    @model_validator(mode="after")
    def _check_full_rows(self) -> "DatasetEntry":
        if self.kind == "full" and self.task not in FULL_ROW_COUNTS:
            raise ValueError(f"dataset {self.name!r}: task {self.task} has no published full split; its datasets are "
                             f"kind 'fixture' (full splits: {', '.join(FULL_ROW_COUNTS)})")
        if self.kind == "full" and self.rows != FULL_ROW_COUNTS[self.task]:
            raise ValueError(
                f"dataset {self.name!r}: kind 'full' for task {self.task} must have "
                f"{FULL_ROW_COUNTS[self.task]} rows, manifest says {self.rows}"
            )
        if self.path.startswith("/") or ".." in self.path.split("/"):
            raise ValueError(f"dataset {self.name!r}: path {self.path!r} must be relative and inside the manifest dir")
        return self


DEFAULT_ACCURACY_MANIFEST = "eval_datasets/fixtures/manifest.json"
"""The dataset manifest an accuracy run reads unless told otherwise (relative to the repository root): the
small shipped fixtures. The default of ``conf``'s ``accuracy_manifest`` and of ``python -m
runners.incase.accuracy run --manifest``."""


class DatasetManifest(StrictModel):
    """``manifest.json`` next to the dataset files: the only place a dataset hash is declared."""

    schema_version: SchemaVersion = 1
    datasets: tuple[DatasetEntry, ...] = Field(description="Dataset files, names unique.")

    @model_validator(mode="after")
    def _unique_names(self) -> "DatasetManifest":
        names = [d.name for d in self.datasets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate dataset names in manifest: {dup}")
        return self

    def entry(self, name: str) -> DatasetEntry:
        """The entry called ``name``; KeyError naming the known entries otherwise."""
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(f"no dataset {name!r} in manifest (known: {[d.name for d in self.datasets]})")


class SamplingSettings(StrictModel):
    """vLLM ``SamplingParams`` fields a protocol sets; ``null`` = not passed (vLLM's own default)."""

    temperature: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = Field(description="0 = greedy.")
    max_tokens: Annotated[int, Field(ge=1)] = Field(description="Max generated tokens per request.")
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = Field(
        default=None, description="Nucleus mass (1 = off); null = not passed.")
    top_k: int | None = Field(default=None, description="Top-k (0 or -1 = off); null = not passed.")
    seed: NonNegInt | None = Field(default=None, description="Per-request sampling seed; null = not passed.")

    def vllm_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``vllm.SamplingParams``: only the fields that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class EngineSettings(StrictModel):
    """vLLM ``LLM(...)`` arguments that can change outputs (besides model and offload); ``null`` = not passed.

    Used twice: as a protocol's *pins* (``ProtocolSpec.engine``: what the protocol fixes) and as
    what a case actually passed (``AccuracyResult.engine``: pins + run options, compared across cases).
    """

    max_model_len: Annotated[int, Field(ge=2)] | None = Field(default=None, description="vLLM max_model_len (tokens).")
    dtype: str | None = Field(default=None, description="Model dtype given to vLLM; null = 'auto' (the model's).")
    enforce_eager: bool | None = Field(default=None, description="vLLM enforce_eager.")
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = Field(
        default=None, description="vLLM gpu_memory_utilization (fraction of device memory).")
    enable_prefix_caching: bool | None = Field(default=None, description="vLLM enable_prefix_caching.")
    max_num_seqs: Annotated[int, Field(ge=1)] | None = Field(default=None, description="vLLM max_num_seqs.")
    seed: NonNegInt | None = Field(default=None, description="vLLM engine seed.")

    def vllm_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``vllm.LLM``: only the fields that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ProtocolSpec(StrictModel):
    """A frozen accuracy protocol for one task: everything that decides prompts, sampling and scoring.

    Its SHA-256 (:meth:`sha256`) is recorded in every result; the verifier compares only
    cases with equal hashes and checks the spec against the registered one
    (``results_schema.records.protocols``). Extraction regexes are part of the spec text, and the
    implementation compiles them from here, so the hash covers what actually runs.
    """

    name: ProtocolName = Field(description="Protocol name and version (registry key).")
    task: Task
    system_message: str = Field(description="System turn, exact text.")
    user_template: str = Field(
        description="str.format template of the user turn ({question}; GPQA also {A} {B} {C} {D}).")
    option_shuffle: str | None = Field(
        description="GPQA: rule that orders the options (id of the algorithm); null for GSM8K.")
    shuffle_seed: str | None = Field(description="GPQA: seed string of the option shuffle; null for GSM8K.")
    chat_template: Literal["model"] = Field(
        description="Prompt rendering: the model's own chat template (add_generation_prompt=True); required.")
    answer_extraction: str = Field(description="Id of the answer extraction rule (applies to gold and replies).")
    extraction_patterns: tuple[str, ...] = Field(
        description="Regular expressions of the extraction rule, in the order they are tried.")
    sampling: SamplingSettings
    engine: EngineSettings = Field(description="Engine arguments the protocol fixes (null = not fixed).")

    def sha256(self) -> str:
        """SHA-256 of the canonical JSON of this spec (sorted keys, compact, ASCII)."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()


class AccuracyExample(StrictModel):
    """One line of ``<label>.<task>.examples.jsonl``; case-independent by design."""

    schema_version: Literal[2] = 2
    index: NonNegInt = Field(description="0-based row index in the dataset file.")
    example_id: str = Field(description="Stable id of the row (dataset record id, or 'row-<index>').")
    row: dict[str, Any] = Field(description="The data row as stored in the dataset file (JSON object).")
    prompt_sha256: Sha256Hex = Field(description="SHA-256 of the rendered prompt text (chat template applied).")
    prompt_tokens: NonNegInt = Field(description="Prompt length in tokens.")
    gold: str = Field(description="Gold answer: normalized number (GSM8K, addition) or letter A-D (GPQA).")
    option_order: tuple[NonNegInt, ...] | None = Field(
        default=None,
        description="GPQA: original option index shown at A, B, C, D (0 = correct answer); null otherwise.",
    )
    parsed: str | None = Field(description="Parsed answer in the gold's normal form; null when unparsable.")
    correct: bool = Field(description="parsed == gold (an unparsable answer is wrong).")
    unparsable: bool = Field(description="No answer could be extracted from the output.")
    output_tokens: NonNegInt = Field(description="Generated tokens (len(token_ids)).")
    output_token_sha256: Sha256Hex = Field(description="SHA-256 of the generated token ids (canonical JSON list).")
    finish_reason: FinishReason = Field(description="vLLM finish reason: stop (EOS/stop string) or length.")
    output_text: str = Field(description="Generated text (detokenized).")

    @model_validator(mode="after")
    def _check_consistency(self) -> "AccuracyExample":
        if self.unparsable != (self.parsed is None):
            raise ValueError(f"example {self.index}: unparsable ({self.unparsable}) must equal parsed is None")
        if self.correct and self.parsed != self.gold:
            raise ValueError(f"example {self.index}: correct=True but parsed {self.parsed!r} != gold {self.gold!r}")
        if self.option_order is not None:
            if sorted(self.option_order) != list(range(len(self.option_order))):
                raise ValueError(f"example {self.index}: option_order {self.option_order} is not a permutation")
            letter = "ABCD"[self.option_order.index(0)]
            if letter != self.gold:
                raise ValueError(f"example {self.index}: gold {self.gold!r} but correct option sits at {letter}")
        return self


class AccuracyResult(StrictModel):
    """``<label>.<task>.result.json``: one accuracy case, one fresh process."""

    schema_version: Literal[2] = 2
    label: str = Field(description="Case label (baseline, current-4-1, ...).")
    implementation: Implementation
    offload: OffloadSetting
    task: Task
    dataset: DatasetEntry = Field(description="Manifest entry of the dataset used (verified at load).")
    dataset_manifest_path: str = Field(description="Absolute path of the manifest the dataset was checked against.")
    limit: Annotated[int, Field(ge=1)] | None = Field(description="--limit given (first N rows), null = all rows.")
    mode: VerifyMode = Field(description="'formal' only when all rows of a full dataset ran; else 'limited'.")
    protocol_name: ProtocolName = Field(description="Name and version of the protocol the case was scored under.")
    protocol: ProtocolSpec
    protocol_sha256: Sha256Hex = Field(description="ProtocolSpec.sha256() of ``protocol``.")
    engine: EngineSettings = Field(description="Engine arguments the case passed (protocol pins + run options).")
    model: str = Field(description="Model directory given to vLLM.")
    model_sha256sums_sha256: Sha256Hex | None = Field(
        description="SHA-256 of the model directory's SHA256SUMS file (model identity); null if absent."
    )
    num_examples: Annotated[int, Field(ge=1)] = Field(description="Examples evaluated.")
    correct: NonNegInt = Field(description="Examples answered correctly.")
    unparsable: NonNegInt = Field(description="Examples with no extractable answer (counted wrong).")
    accuracy: Fraction = Field(description="correct / num_examples.")
    parsed: NonNegInt = Field(description="Examples with an extracted answer (num_examples - unparsable).")
    length_limited: NonNegInt = Field(description="Replies that hit the token limit (finish reason 'length').")
    finish_reasons: dict[FinishReason, NonNegInt] = Field(description="Count of each finish reason.")
    output_tokens: NonNegInt = Field(description="Generated tokens over all examples.")
    examples_path: str = Field(description="Examples JSONL, relative to the result file's directory.")
    examples_sha256: Sha256Hex = Field(description="SHA-256 of the examples JSONL bytes.")
    load_seconds: NonNegSeconds = Field(description="Seconds to construct the engine (model load + start).")
    generate_seconds: NonNegSeconds = Field(description="Seconds of the generate call over all examples.")
    engine_name: Literal["vllm", "fake"] = Field(description="'vllm' for real runs; 'fake' only in unit tests.")
    vllm_version: str | None = Field(description="vllm.__version__ in the case process; null for the fake engine.")
    torch_version: str | None = Field(description="torch.__version__ in the case process; null for the fake engine.")
    evidence: RuntimeEvidence | None = Field(
        default=None, description="Offload evidence sidecar read after the run, when OFFLOAD_EVIDENCE_PATH was set."
    )
    pid: NonNegInt = Field(description="PID of the case process.")
    host_load: HostLoad | None = Field(
        default=None, description="The host's load over the generate call (``results_schema.records.host_load``: "
        "foreign work beside the case, the throughput cases' rule); for information, greedy outputs do not depend "
        "on timing. Null where the host cannot be read (not Linux) or in records written before it was recorded.")

    @model_validator(mode="after")
    def _check_totals(self) -> "AccuracyResult":
        if self.protocol.task != self.task or self.dataset.task != self.task:
            raise ValueError(
                f"task mismatch: result {self.task}, protocol {self.protocol.task}, dataset {self.dataset.task}"
            )
        if self.protocol_name != self.protocol.name:
            raise ValueError(f"protocol_name {self.protocol_name!r} != protocol.name {self.protocol.name!r}")
        if self.parsed != self.num_examples - self.unparsable:
            raise ValueError(f"parsed ({self.parsed}) != num_examples - unparsable "
                             f"({self.num_examples} - {self.unparsable})")
        if sum(self.finish_reasons.values()) != self.num_examples:
            raise ValueError(f"finish_reasons {dict(self.finish_reasons)} do not add up to num_examples "
                             f"({self.num_examples})")
        if self.length_limited != self.finish_reasons.get("length", 0):
            raise ValueError(f"length_limited ({self.length_limited}) != finish_reasons['length'] "
                             f"({self.finish_reasons.get('length', 0)})")
        if self.protocol_sha256 != self.protocol.sha256():
            raise ValueError(f"protocol_sha256 {self.protocol_sha256} does not match the protocol ({self.protocol.sha256()})")
        if self.correct + self.unparsable > self.num_examples:
            raise ValueError(
                f"correct ({self.correct}) + unparsable ({self.unparsable}) > num_examples ({self.num_examples})"
            )
        if abs(self.accuracy - self.correct / self.num_examples) > 1e-12:
            raise ValueError(f"accuracy {self.accuracy} != correct/num_examples {self.correct}/{self.num_examples}")
        return self

    @model_validator(mode="after")
    def _check_mode(self) -> "AccuracyResult":  # runs after _check_totals (definition order)
        expected = min(self.limit, self.dataset.rows) if self.limit is not None else self.dataset.rows
        if self.num_examples != expected:
            raise ValueError(
                f"num_examples ({self.num_examples}) != expected {expected} (rows {self.dataset.rows}, limit {self.limit})"
            )
        formal = self.limit is None and self.dataset.kind == "full"
        if (self.mode == "formal") != formal:
            raise ValueError(
                f"mode {self.mode!r} inconsistent with limit={self.limit} and dataset kind {self.dataset.kind!r}"
            )
        if self.implementation == "baseline" and self.offload.enabled:
            raise ValueError("implementation 'baseline' must not request offload")
        if self.implementation != "baseline" and not self.offload.enabled:
            raise ValueError(f"implementation {self.implementation!r} requires an enabled offload setting")
        return self


class AccuracyTaskOutcome(StrictModel):
    """One task of a completed accuracy case, as the project runner recorded it."""

    task: Task
    mode: VerifyMode = Field(description="The result's mode ('formal' or 'limited').")
    protocol_name: ProtocolName = Field(description="Protocol the task was scored under.")
    protocol_sha256: Sha256Hex = Field(description="SHA-256 of that protocol's spec.")
    result_path: str = Field(description="The case's ``<label>.<task>.result.json``, relative to the run directory.")
    result_sha256: Sha256Hex = Field(description="SHA-256 of the result file's bytes when the case was recorded.")
    examples_sha256: Sha256Hex = Field(description="SHA-256 of the examples JSONL (as the result records it).")
    num_examples: Annotated[int, Field(ge=1)] = Field(description="Examples evaluated.")
    correct: NonNegInt = Field(description="Examples answered correctly.")
    unparsable: NonNegInt = Field(description="Examples with no extractable answer.")
    accuracy: Fraction = Field(description="correct / num_examples.")

    @model_validator(mode="after")
    def _check_counts(self) -> "AccuracyTaskOutcome":
        if self.correct + self.unparsable > self.num_examples:
            raise ValueError(f"{self.task}: correct ({self.correct}) + unparsable ({self.unparsable}) > "
                             f"num_examples ({self.num_examples})")
        if abs(self.accuracy - self.correct / self.num_examples) > 1e-12:
            raise ValueError(f"{self.task}: accuracy {self.accuracy} != correct/num_examples "
                             f"{self.correct}/{self.num_examples}")
        return self


class AccuracyCaseRun(CaseKey):
    """One line of ``<phase>-accuracy-cases.jsonl``: an accuracy case (one process, every task) completed.

    Written (fsynced) by ``runners.matrix`` after the case process exited 0 and every
    ``<label>.<task>.result.json`` it had to write validated. ``resume`` skips the case
    ``(phase, label, repeat)`` named here; a failed case is a ``CaseFailure`` line instead.
    """

    schema_version: Literal[2] = 2  # type: ignore[assignment]  # version 2 of this line, in CaseKey's place
    offload: OffloadSetting = Field(description="Offload parameters the case ran with.")
    tasks: tuple[Task, ...] = Field(description="Tasks the case evaluated, in order (one engine).")
    results: tuple[AccuracyTaskOutcome, ...] = Field(description="One outcome per task, same order as ``tasks``.")
    limit: Annotated[int, Field(ge=1)] | None = Field(description="--limit given to the case (null = all rows).")
    dataset_manifest_path: str = Field(description="Absolute path of the dataset manifest given to the case.")
    dataset_manifest_sha256: Sha256Hex = Field(description="SHA-256 of that manifest when the case was recorded.")
    process_wall_s: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = Field(
        description="Wall seconds of the case process, launch to exit.")
    log_path: str = Field(description="Case log, relative to the run directory.")
    evidence_path: str | None = Field(description="Evidence sidecar, relative to the run directory (null if absent).")
    command: tuple[str, ...] = Field(description="argv the case process was started with.")

    @model_validator(mode="after")
    def _check_tasks(self) -> "AccuracyCaseRun":
        if not self.tasks:
            raise ValueError(f"case {self.label}: no task")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"case {self.label}: duplicate task in {self.tasks}")
        got = tuple(r.task for r in self.results)
        if got != self.tasks:
            raise ValueError(f"case {self.label}: results are for tasks {got}, expected {self.tasks}")
        if self.implementation == "baseline" and self.offload.enabled:
            raise ValueError("implementation 'baseline' must not request offload")
        if self.implementation != "baseline" and not self.offload.enabled:
            raise ValueError(f"implementation {self.implementation!r} requires an enabled offload setting")
        return self
