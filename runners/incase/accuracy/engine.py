"""The inference engine of an accuracy case: what a case needs (``Engine``) and vLLM's (``VllmEngine``).

What is modelled: one greedy ``generate`` over token-id prompts with the protocol's
sampling settings, outputs in prompt order; ``VllmEngine`` builds ``vllm.LLM`` with the
case's engine settings and offload parameters (vLLM's names) in this process.

What is deliberately not modelled: batching or streaming choices (vLLM's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from results_schema.records.accuracy import EngineSettings, SamplingSettings
from results_schema.records.identity import OffloadSetting
from runners.incase.import_heap import engine_in_process, frozen_import


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


def import_llm() -> Any:
    """vLLM's ``LLM`` class, imported once per process (heavy: only in case processes), the heap frozen after it
    where vLLM freezes it too (:func:`runners.incase.import_heap.frozen_import`)."""
    with frozen_import("vllm", freeze=engine_in_process()):
        from vllm import LLM
    return LLM


class VllmEngine:
    """vLLM ``LLM`` with the case's engine and offload settings (built in this process)."""

    name = "vllm"

    def __init__(self, model: str, engine: EngineSettings, offload: OffloadSetting) -> None:
        LLM = import_llm()
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

        params = SamplingParams(**cast(dict[str, Any], sampling.vllm_kwargs()))  # only what the protocol sets
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        result = []
        for out in outs:
            o = out.outputs[0]
            result.append(Generation(text=o.text, token_ids=tuple(o.token_ids), finish_reason=str(o.finish_reason)))
        return result
