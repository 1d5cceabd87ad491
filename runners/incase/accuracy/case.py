"""One accuracy case in this process: dataset(s) x implementation x offload setting.

What is modelled: verified dataset load -> prompts of the selected protocol
(default ``qwen-chat-v1``) rendered with the model's chat template -> one engine
(the protocol's pinned engine arguments + run options) -> one greedy ``generate``
over all prompts of each dataset ->
scoring -> ``<label>.<task>.examples.jsonl`` (case-independent rows) and
``<label>.<task>.result.json`` (:class:`results_schema.records.accuracy.AccuracyResult`),
plus one ``ACCURACY_RESULT <json>`` stdout line. The process is expected to be
fresh (started by the project's matrix runner, ``python -m runners.incase.accuracy run
--case PATH``, with the same environment contract as bench cases: ``OFFLOAD_IMPL``,
``OFFLOAD_EVIDENCE_PATH``, ``PYTHONPATH`` with the evidence hook).

When ``OFFLOAD_EVIDENCE_PATH`` is set, the evidence sidecar is read after
generation and embedded in the result; an offload case whose evidence shows
nothing wrapped fails (the "offload requested, nothing offloaded" class).

What is deliberately not modelled: launching processes (``runners.matrix``),
comparing cases (``analysis.accuracy.verifier``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_schema.records.accuracy import (
    AccuracyExample,
    AccuracyResult,
    EngineSettings,
    canonical_json,
)
from offload.selection import case_label, check_offload_setting
from results_schema.codec.files import file_sha256, write_bytes_atomic
from results_schema.codec.io import dumps_model, read_json, write_json
from results_schema.records.host_load import HostLoad
from results_schema.records.models import RuntimeEvidence
from results_schema.records.identity import OffloadSetting
from results_schema.records.protocols import DEFAULT_PROTOCOL, check_protocol, protocol_spec
from runners.incase.accuracy.datasets import load_dataset
from runners.incase.accuracy.engine import Generation, VllmEngine, import_llm
from runners.incase.host_load import read_host, window_load

__all__ = ["CaseError", "auto_tokenizer", "run_case", "run_cases", "summary_line"]
from runners.incase.accuracy.protocol import render_prompt, render_row, score

IMPL_ENV = "OFFLOAD_IMPL"
EVIDENCE_ENV = "OFFLOAD_EVIDENCE_PATH"
RESULT_PREFIX = "ACCURACY_RESULT "


class CaseError(RuntimeError):
    """The case cannot run or produced an inconsistent result; the message names the case."""


def default_label(implementation: str, offload: OffloadSetting) -> str:
    """The record label of the case (``offload.selection.case_label``): ``baseline`` or ``<impl>_g<G>_n<N>[_p<P>]``."""
    o = offload
    return case_label(implementation, o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step,
                      o.offload_params, o.offload_backend)


def case_paths(out_dir: Path, label: str, task: str) -> tuple[Path, Path]:
    """(result JSON, examples JSONL) of one case."""
    return out_dir / f"{label}.{task}.result.json", out_dir / f"{label}.{task}.examples.jsonl"


def _model_identity(model: str) -> str | None:
    sums = Path(model) / "SHA256SUMS"
    return file_sha256(sums) if sums.is_file() else None


def _check_implementation_env(implementation: str, offload: OffloadSetting) -> None:
    o = offload
    try:
        check_offload_setting(implementation, o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step,
                              o.offload_backend)
    except ValueError as exc:
        raise CaseError(str(exc)) from None
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
                f"(is runners/incase/evidence_hook on PYTHONPATH?)"
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


@dataclass(frozen=True)
class _Case:
    """What every dataset of one case shares (identity, paths, engine)."""

    model: str
    manifest: Path | str
    implementation: str
    offload: OffloadSetting
    label: str
    limit: int | None
    engine_settings: EngineSettings


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
    tokenizer_loader: Callable[[str], Any] | None = None,
) -> list[AccuracyResult]:
    """Run one accuracy case (one engine, one process) over one or more datasets; write its files.

    Every dataset is verified and every prompt rendered before the engine is built (a bad input fails in seconds).

    Args:
        model: model directory (local; its tokenizer must have a chat template).
        manifest: dataset ``manifest.json``.
        datasets: manifest entry names, or tasks (gsm8k / gpqa) with a single entry each.
        implementation: baseline, current, official or sync.
        offload: offload parameters (disabled for baseline).
        out_dir: directory for the result and examples files (created; an existing file is never overwritten).
        engine_settings: run options for engine arguments (null fields = not given); they
            fill what the protocol leaves open and must agree with what it fixes.
        limit: evaluate the first N rows only (smoke; the result is 'limited').
        label: case label (default :func:`default_label`).
        engine_factory: ``callable(model, engine_settings, offload) -> Engine``; default :class:`VllmEngine`.
        protocol: registered protocol name (``results_schema.records.protocols``); default ``qwen-chat-v1``.
        tokenizer_loader: ``callable(model) -> tokenizer`` for the prompts; default :func:`auto_tokenizer`.

    Returns:
        The validated results, one per dataset (also written to disk and printed).

    Raises:
        CaseError, DatasetError, ChatTemplateMissing, UnknownProtocolError: with messages naming the case.
    """
    check_protocol(protocol)
    label = label or default_label(implementation, offload)
    _check_implementation_env(implementation, offload)
    if not datasets:
        raise CaseError(f"case {label}: no dataset given")
    loaded = [load_dataset(manifest, dataset) for dataset in datasets]  # verify every file first
    specs = {entry.task: protocol_spec(protocol, entry.task) for entry, _, _ in loaded}
    case = _Case(model=model, manifest=manifest, implementation=implementation, offload=offload, label=label,
                 limit=limit, engine_settings=_one_engine(specs, engine_settings, protocol))
    tokenizer = (tokenizer_loader or auto_tokenizer)(case.model)
    prepared = _prepare(case, loaded, specs, Path(out_dir).resolve(), list(datasets), tokenizer)
    engine, load_seconds = _build_engine(engine_factory, model, case.engine_settings, offload)
    generated = _generate(engine, prepared, label)
    evidence = _case_evidence(label, offload)
    versions = _engine_versions(engine)
    return [_write_result(case, prep, gens, engine_name="vllm" if versions[0] else "fake", versions=versions,
                          load_seconds=load_seconds, generate_seconds=seconds, evidence=evidence, host_load=load)
            for prep, (gens, seconds, load) in zip(prepared, generated, strict=True)]


def _build_engine(engine_factory: Any, model: str, settings: EngineSettings,
                  offload: OffloadSetting) -> tuple[Any, float]:
    """The case's engine (``engine_factory``, default :class:`VllmEngine`) and the seconds its construction took
    (``load_seconds``: model load and engine start; vLLM's import runs before the clock starts)."""
    if engine_factory in (None, VllmEngine):
        import_llm()
    t0 = time.perf_counter()
    engine = (engine_factory or VllmEngine)(model, settings, offload)
    return engine, time.perf_counter() - t0


def _engine_versions(engine: Any) -> tuple[str | None, str | None]:
    """(vLLM, torch) versions of a vLLM engine; (None, None) for a test engine."""
    if getattr(engine, "name", "") != "vllm":
        return None, None
    import torch
    import vllm

    return str(vllm.__version__), str(torch.__version__)


def _one_engine(specs: Mapping[Any, Any], options: EngineSettings | None, protocol: str) -> EngineSettings:
    """The engine settings every task of the case shares (:func:`resolve_engine`)."""
    pins = {spec.engine for spec in specs.values()}
    if len(pins) != 1:  # pragma: no cover - registry invariant, checked by a test
        raise CaseError(f"protocol {protocol}: tasks {sorted(specs)} fix different engine arguments; one engine "
                        "cannot serve them")
    return resolve_engine(pins.pop(), options, protocol)


def _generate(engine: Any, prepared: Sequence[_Prepared],
              label: str) -> list[tuple[list[Generation], float, HostLoad | None]]:
    """One ``generate`` per dataset: (outputs in prompt order, seconds, the host's load over the call).

    The host is read before and after each call with the throughput cases' rule (``runners.incase.host_load``),
    for information: greedy outputs do not depend on timing, so a contended window changes no accuracy verdict.
    """
    generated = []
    for prep in prepared:
        t0 = time.perf_counter()
        before = read_host()
        gens = engine.generate([r[4] for r in prep.rendered], prep.spec.sampling)
        load = window_load(before, read_host())
        generated.append((gens, time.perf_counter() - t0, None if load is None else load.record()))
        if len(gens) != len(prep.rendered):
            raise CaseError(f"case {label}/{prep.entry.task}: engine returned {len(gens)} outputs "
                            f"for {len(prep.rendered)} prompts")
    return generated


def auto_tokenizer(model: str) -> Any:
    """The model directory's tokenizer as vLLM loads it: ``transformers.AutoTokenizer``, local files only."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model, local_files_only=True)


def _prepare(case: _Case, loaded: Sequence[Any], specs: Mapping[Any, Any], out_dir: Path,
             datasets: list[str], tokenizer: Any) -> list[_Prepared]:
    """Render every prompt of every dataset with ``tokenizer`` (before the engine is built); refuse existing
    outputs."""
    label, max_model_len = case.label, case.engine_settings.max_model_len
    assert max_model_len is not None  # resolve_engine guarantees it
    prepared: list[_Prepared] = []
    for entry, _, rows in loaded:
        task = entry.task
        if any(p.entry.task == task for p in prepared):
            raise CaseError(f"case {label}: task {task} given twice ({datasets})")
        result_path, examples_path = case_paths(out_dir, label, task)
        for path in (result_path, examples_path):
            if path.exists():
                raise CaseError(f"case {label}/{task}: {path} already exists; results are never overwritten")
        if case.limit is not None:
            rows = rows[:case.limit]
        spec = specs[task]
        rendered = []
        for row in rows:
            r = render_row(spec, row)
            text, ids = render_prompt(tokenizer, r.messages())
            if len(ids) + spec.sampling.max_tokens > max_model_len:
                raise CaseError(
                    f"case {label}/{task}: row {row.index} prompt ({len(ids)} tokens) + max_tokens "
                    f"({spec.sampling.max_tokens}) exceeds max_model_len ({max_model_len})"
                )
            rendered.append((row, r.gold, r.order, text, ids))
        prepared.append(_Prepared(entry, rows, spec, rendered, result_path, examples_path))
    return prepared


def _case_evidence(label: str, offload: OffloadSetting) -> RuntimeEvidence | None:
    """The evidence sidecar named by ``OFFLOAD_EVIDENCE_PATH`` (None when unset); an empty one fails an offload case."""
    evidence_env = os.environ.get(EVIDENCE_ENV)
    if not evidence_env:
        return None
    evidence = _read_evidence(Path(evidence_env))
    if offload.enabled and (evidence.wrapped_count == 0 or evidence.offloaded_bytes == 0):
        raise CaseError(
            f"case {label}: offload ({offload.offload_group_size},{offload.offload_num_in_group}) "
            f"requested but evidence shows nothing offloaded (wrapped_count={evidence.wrapped_count}, "
            f"offloaded_bytes={evidence.offloaded_bytes})"
        )
    return evidence


def _examples(label: str, prep: _Prepared, gens: Sequence[Generation]) -> list[AccuracyExample]:
    examples = []
    for (row, gold, order, text, ids), gen in zip(prep.rendered, gens, strict=True):
        parsed, correct = score(prep.spec, gen.text, gold)
        if gen.finish_reason not in ("stop", "length", "abort"):
            raise CaseError(f"case {label}/{prep.entry.task}: row {row.index} has unknown finish reason "
                            f"{gen.finish_reason!r}")
        examples.append(AccuracyExample(
            index=row.index, example_id=row.example_id, row=row.raw,
            prompt_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), prompt_tokens=len(ids), gold=gold,
            option_order=order, parsed=parsed, correct=correct, unparsable=parsed is None,
            output_tokens=len(gen.token_ids),
            output_token_sha256=hashlib.sha256(canonical_json(list(gen.token_ids)).encode()).hexdigest(),
            finish_reason=gen.finish_reason,  # type: ignore[arg-type]
            output_text=gen.text,
        ))
    return examples


def _write_result(case: _Case, prep: _Prepared, gens: Sequence[Generation], *, engine_name: str,
                  versions: tuple[str | None, str | None], load_seconds: float, generate_seconds: float,
                  evidence: RuntimeEvidence | None, host_load: HostLoad | None = None) -> AccuracyResult:
    """Score one dataset's outputs, write its examples JSONL and result JSON, print its stdout line."""
    examples = _examples(case.label, prep, gens)
    data = "".join(dumps_model(e) + "\n" for e in examples).encode("utf-8")
    write_bytes_atomic(prep.examples_path, data)
    correct_n = sum(e.correct for e in examples)
    result = AccuracyResult(
        label=case.label,
        implementation=case.implementation,  # type: ignore[arg-type]
        offload=case.offload,
        task=prep.entry.task,
        dataset=prep.entry,
        dataset_manifest_path=str(Path(case.manifest).resolve()),
        limit=case.limit,
        mode="formal" if (case.limit is None and prep.entry.kind == "full") else "limited",
        protocol_name=prep.spec.name,
        protocol=prep.spec,
        protocol_sha256=prep.spec.sha256(),
        engine=case.engine_settings,
        model=str(case.model),
        model_sha256sums_sha256=_model_identity(case.model),
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
        engine_name=engine_name,  # type: ignore[arg-type]
        vllm_version=versions[0],
        torch_version=versions[1],
        evidence=evidence,
        pid=os.getpid(),
        host_load=host_load,
    )
    write_json(prep.result_path, result)
    print(RESULT_PREFIX + dumps_model(result), flush=True)
    return result


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
