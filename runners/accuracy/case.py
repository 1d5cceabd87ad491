"""One accuracy case in this process: dataset(s) x implementation x offload setting.

What is modelled: verified dataset load -> prompts of the selected protocol
(default ``qwen-chat-v1``) rendered with the model's chat template -> one engine
(the protocol's pinned engine arguments + run options) -> one greedy ``generate``
over all prompts of each dataset ->
scoring -> ``<label>.<task>.examples.jsonl`` (case-independent rows) and
``<label>.<task>.result.json`` (:class:`results_schema.accuracy.AccuracyResult`),
plus one ``ACCURACY_RESULT <json>`` stdout line. The process is expected to be
fresh (started by ``runners.accuracy matrix`` or the project's matrix runner
with the same environment contract as bench cases: ``OFFLOAD_IMPL``,
``OFFLOAD_EVIDENCE_PATH``, ``PYTHONPATH`` with the evidence hook).

When ``OFFLOAD_EVIDENCE_PATH`` is set, the evidence sidecar is read after
generation and embedded in the result; an offload case whose evidence shows
nothing wrapped fails (the "offload requested, nothing offloaded" class).

What is deliberately not modelled: launching processes (``runners.accuracy.matrix``),
comparing cases (``analysis.accuracy``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from results_schema.accuracy import (
    AccuracyExample,
    AccuracyResult,
    EngineSettings,
    SamplingSettings,
    canonical_json,
)
from results_schema.io import dumps_model, read_json, write_json
from results_schema.models import OffloadSetting, RuntimeEvidence
from results_schema.protocols import DEFAULT_PROTOCOL, check_protocol, protocol_spec
from runners.accuracy.datasets import load_dataset
from runners.accuracy.protocol import render_prompt, render_row, score

IMPL_ENV = "OFFLOAD_IMPL"
EVIDENCE_ENV = "OFFLOAD_EVIDENCE_PATH"
RESULT_PREFIX = "ACCURACY_RESULT "


class CaseError(RuntimeError):
    """The case cannot run or produced an inconsistent result; the message names the case."""


@dataclass(frozen=True)
class Generation:
    """One request's output."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str


class Engine(Protocol):
    """What a case needs from an inference engine."""

    name: str

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[Generation]:
        """Greedy-generate for every prompt (token ids), outputs in prompt order."""
        ...


class VllmEngine:
    """vLLM ``LLM`` with the case's engine and offload settings (built in this process)."""

    name = "vllm"

    def __init__(self, model: str, engine: EngineSettings, offload: OffloadSetting) -> None:
        from vllm import LLM  # heavy import, only in case processes

        kwargs: dict[str, Any] = dict(model=model, tokenizer=model, **engine.vllm_kwargs())
        if offload.enabled:
            kwargs.update(
                offload_group_size=offload.offload_group_size,
                offload_num_in_group=offload.offload_num_in_group,
                offload_prefetch_step=offload.offload_prefetch_step,
                offload_backend=offload.offload_backend,
            )
            if offload.offload_params:
                kwargs["offload_params"] = set(offload.offload_params)
        self.llm = LLM(**kwargs)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(**sampling.vllm_kwargs())  # only what the protocol sets
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        result = []
        for out in outs:
            o = out.outputs[0]
            result.append(Generation(text=o.text, token_ids=tuple(o.token_ids), finish_reason=str(o.finish_reason)))
        return result


def default_label(implementation: str, offload: OffloadSetting) -> str:
    """``baseline`` or ``<impl>-<G>-<N>`` (``-p<P>`` when prefetch_step != 1)."""
    if not offload.enabled:
        return implementation
    label = f"{implementation}-{offload.offload_group_size}-{offload.offload_num_in_group}"
    if offload.offload_prefetch_step != 1:
        label += f"-p{offload.offload_prefetch_step}"
    return label


def case_paths(out_dir: Path, label: str, task: str) -> tuple[Path, Path]:
    """(result JSON, examples JSONL) of one case."""
    return out_dir / f"{label}.{task}.result.json", out_dir / f"{label}.{task}.examples.jsonl"


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _model_identity(model: str) -> str | None:
    sums = Path(model) / "SHA256SUMS"
    return _sha256_file(sums) if sums.is_file() else None


def _check_implementation_env(implementation: str, offload: OffloadSetting) -> None:
    if implementation == "baseline" and offload.enabled:
        raise CaseError("implementation 'baseline' must run with offload_group_size=0")
    if implementation != "baseline" and not offload.enabled:
        raise CaseError(f"implementation {implementation!r} needs --group-size > 0 and --num-in-group > 0")
    env = os.environ.get(IMPL_ENV)
    if env is None:
        # direct CLI use: set it before vLLM starts, so the engine-core child inherits it
        os.environ[IMPL_ENV] = implementation
    elif env != implementation:
        raise CaseError(f"{IMPL_ENV}={env!r} in the environment disagrees with --implementation {implementation!r}")


def _read_evidence(path: Path, timeout_s: float = 30.0) -> RuntimeEvidence:
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        if time.monotonic() > deadline:
            raise CaseError(
                f"{EVIDENCE_ENV}={path} is set but no evidence was published within {timeout_s:.0f}s "
                f"(is runners/evidence_hook on PYTHONPATH?)"
            )
        time.sleep(0.2)
    return read_json(path, RuntimeEvidence)


def resolve_engine(pins: EngineSettings, options: EngineSettings | None, protocol: str) -> EngineSettings:
    """The engine arguments of a case: the protocol's pins plus run options for what it leaves open.

    Raises:
        CaseError: a run option contradicts a pin (names both values), or no max_model_len is known.
    """
    merged = pins.model_dump()
    for name, value in (options.model_dump() if options is not None else {}).items():
        if value is None:
            continue
        if merged[name] is not None and merged[name] != value:
            raise CaseError(f"protocol {protocol} fixes {name}={merged[name]!r}; the run asks for {name}={value!r} "
                            "(a different value needs a new protocol name or version)")
        merged[name] = value
    if merged["max_model_len"] is None:
        raise CaseError(f"protocol {protocol} does not fix max_model_len; pass --max-model-len")
    return EngineSettings(**merged)


def run_case(*, dataset: str, **kwargs: Any) -> AccuracyResult:
    """One dataset; see :func:`run_cases`."""
    return run_cases(datasets=[dataset], **kwargs)[0]


@dataclass
class _Prepared:
    entry: Any
    rows: list[Any]
    spec: Any
    rendered: list[tuple[Any, str, tuple[int, ...] | None, str, list[int]]]
    result_path: Path
    examples_path: Path


def run_cases(
    *,
    model: str,
    manifest: Path | str,
    datasets: Sequence[str],
    implementation: str,
    offload: OffloadSetting,
    out_dir: Path | str,
    engine_settings: EngineSettings | None = None,
    limit: int | None = None,
    label: str | None = None,
    engine_factory: Any = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> list[AccuracyResult]:
    """Run one accuracy case (one engine, one process) over one or more datasets; write its files.

    Every dataset is verified and every prompt rendered before the engine is
    built, so a bad input fails in seconds, not after model load.

    Args:
        model: model directory (local; its tokenizer must have a chat template).
        manifest: dataset ``manifest.json``.
        datasets: manifest entry names, or tasks (gsm8k / gpqa) with a single entry each.
        implementation: baseline, current, official or sync.
        offload: offload parameters (disabled for baseline).
        out_dir: directory for the result and examples files (created; existing
            files for the same label and task are never overwritten).
        engine_settings: run options for engine arguments (null fields = not given); they
            fill what the protocol leaves open and must agree with what it fixes.
        limit: evaluate the first N rows only (smoke; the result is 'limited').
        label: case label (default :func:`default_label`).
        engine_factory: ``callable(model, engine_settings, offload) -> Engine``;
            default builds :class:`VllmEngine`. Tests pass a fake.
        protocol: registered protocol name (``results_schema.protocols``); default ``qwen-chat-v1``.

    Returns:
        The validated results, one per dataset (also written to disk and printed).

    Raises:
        CaseError, DatasetError, ChatTemplateMissing, UnknownProtocolError: with messages naming the case.
    """
    from transformers import AutoTokenizer

    check_protocol(protocol)
    label = label or default_label(implementation, offload)
    out_dir = Path(out_dir).resolve()
    _check_implementation_env(implementation, offload)
    if not datasets:
        raise CaseError(f"case {label}: no dataset given")
    loaded = [load_dataset(manifest, dataset) for dataset in datasets]  # verify every file first
    specs = {entry.task: protocol_spec(protocol, entry.task) for entry, _, _ in loaded}
    pins = {spec.engine for spec in specs.values()}
    if len(pins) != 1:  # pragma: no cover - registry invariant, checked by a test
        raise CaseError(f"protocol {protocol}: tasks {sorted(specs)} fix different engine arguments; one engine "
                        "cannot serve them")
    engine_settings = resolve_engine(pins.pop(), engine_settings, protocol)
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    prepared: list[_Prepared] = []
    for entry, _, rows in loaded:
        task = entry.task
        if any(p.entry.task == task for p in prepared):
            raise CaseError(f"case {label}: task {task} given twice ({list(datasets)})")
        result_path, examples_path = case_paths(out_dir, label, task)
        for path in (result_path, examples_path):
            if path.exists():
                raise CaseError(f"case {label}/{task}: {path} already exists; results are never overwritten")
        if limit is not None:
            rows = rows[:limit]
        spec = specs[task]
        rendered = []
        for row in rows:
            r = render_row(spec, row)
            gold, order = r.gold, r.order
            text, ids = render_prompt(tokenizer, r.messages())
            if len(ids) + spec.sampling.max_tokens > engine_settings.max_model_len:
                raise CaseError(
                    f"case {label}/{task}: row {row.index} prompt ({len(ids)} tokens) + max_tokens "
                    f"({spec.sampling.max_tokens}) exceeds max_model_len ({engine_settings.max_model_len})"
                )
            rendered.append((row, gold, order, text, ids))
        prepared.append(_Prepared(entry, rows, spec, rendered, result_path, examples_path))

    factory = engine_factory or VllmEngine
    t0 = time.perf_counter()
    engine = factory(model, engine_settings, offload)
    load_seconds = time.perf_counter() - t0
    generated = []
    for prep in prepared:
        t0 = time.perf_counter()
        gens = engine.generate([r[4] for r in prep.rendered], prep.spec.sampling)
        generated.append((gens, time.perf_counter() - t0))
        if len(gens) != len(prep.rendered):
            raise CaseError(f"case {label}/{prep.entry.task}: engine returned {len(gens)} outputs "
                            f"for {len(prep.rendered)} prompts")

    evidence = None
    evidence_env = os.environ.get(EVIDENCE_ENV)
    if evidence_env:
        evidence = _read_evidence(Path(evidence_env))
        if offload.enabled and (evidence.wrapped_count == 0 or evidence.offloaded_bytes == 0):
            raise CaseError(
                f"case {label}: offload ({offload.offload_group_size},{offload.offload_num_in_group}) "
                f"requested but evidence shows nothing offloaded (wrapped_count={evidence.wrapped_count}, "
                f"offloaded_bytes={evidence.offloaded_bytes})"
            )

    vllm_version = torch_version = None
    if getattr(engine, "name", "") == "vllm":
        import torch
        import vllm

        vllm_version, torch_version = vllm.__version__, torch.__version__
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for prep, (gens, generate_seconds) in zip(prepared, generated):
        task = prep.entry.task
        examples = []
        for (row, gold, order, text, ids), gen in zip(prep.rendered, gens):
            parsed, correct = score(prep.spec, gen.text, gold)
            if gen.finish_reason not in ("stop", "length", "abort"):
                raise CaseError(f"case {label}/{task}: row {row.index} has unknown finish reason "
                                f"{gen.finish_reason!r}")
            examples.append(
                AccuracyExample(
                    index=row.index,
                    example_id=row.example_id,
                    row=row.raw,
                    prompt_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                    prompt_tokens=len(ids),
                    gold=gold,
                    option_order=order,
                    parsed=parsed,
                    correct=correct,
                    unparsable=parsed is None,
                    output_tokens=len(gen.token_ids),
                    output_token_sha256=hashlib.sha256(canonical_json(list(gen.token_ids)).encode()).hexdigest(),
                    finish_reason=gen.finish_reason,  # type: ignore[arg-type]
                    output_text=gen.text,
                )
            )
        data = "".join(dumps_model(e) + "\n" for e in examples).encode("utf-8")
        _write_bytes(prep.examples_path, data)
        correct_n = sum(e.correct for e in examples)
        result = AccuracyResult(
            label=label,
            implementation=implementation,  # type: ignore[arg-type]
            offload=offload,
            task=task,
            dataset=prep.entry,
            dataset_manifest_path=str(Path(manifest).resolve()),
            limit=limit,
            mode="formal" if (limit is None and prep.entry.kind == "full") else "limited",
            protocol_name=prep.spec.name,
            protocol=prep.spec,
            protocol_sha256=prep.spec.sha256(),
            engine=engine_settings,
            model=str(model),
            model_sha256sums_sha256=_model_identity(model),
            num_examples=len(examples),
            correct=correct_n,
            unparsable=sum(e.unparsable for e in examples),
            accuracy=correct_n / len(examples),
            parsed=sum(not e.unparsable for e in examples),
            length_limited=sum(e.finish_reason == "length" for e in examples),
            finish_reasons=dict(sorted(Counter(e.finish_reason for e in examples).items())),
            output_tokens=sum(e.output_tokens for e in examples),
            examples_path=prep.examples_path.name,
            examples_sha256=hashlib.sha256(data).hexdigest(),
            load_seconds=load_seconds,
            generate_seconds=generate_seconds,
            engine_name="vllm" if getattr(engine, "name", "") == "vllm" else "fake",
            vllm_version=vllm_version,
            torch_version=torch_version,
            evidence=evidence,
            pid=os.getpid(),
        )
        write_json(prep.result_path, result)
        print(RESULT_PREFIX + dumps_model(result), flush=True)
        results.append(result)
    return results


def _write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def summary_line(result: AccuracyResult) -> str:
    """Human one-liner for logs."""
    return json.dumps(
        {
            "label": result.label,
            "task": result.task,
            "protocol": result.protocol_name,
            "mode": result.mode,
            "accuracy": result.accuracy,
            "correct": result.correct,
            "unparsable": result.unparsable,
            "n": result.num_examples,
        }
    )
