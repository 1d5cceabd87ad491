"""Accuracy protocols: select a registered protocol, render rows, parse replies, render chat prompts.

What is modelled: the registry of frozen specs lives in ``results_schema.records.protocols``
(pure data, readable by the verifier); this module maps every registered name to its
implementation (``runners.incase.accuracy.qwen_chat`` for ``qwen-chat-v1``, the published
protocol and the default; ``runners.incase.accuracy.boxed_chat`` for ``boxed-chat-v1``, the
project's own (frozen), ``runners.incase.accuracy.boxed_chat_v2`` for ``boxed-chat-v2``, its next version; ``runners.incase.accuracy.chat_addition`` for ``chat-addition-v1``, the project's protocol of the
generated ``addition`` task). Prompts are chat conversations (system + user) rendered with the
*model's own* chat template (``add_generation_prompt=True``); a tokenizer without a chat
template is an error, never a silent fallback to raw text.

What is deliberately not modelled: protocols defined at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from results_schema.records.accuracy import ProtocolSpec
from results_schema.records.protocols import REGISTRY
from runners.incase.accuracy import boxed_chat, boxed_chat_v2, chat_addition, qwen_chat
from runners.incase.accuracy.datasets import Row
from runners.incase.accuracy.rendered import Rendered

__all__ = ["ChatTemplateMissing", "parse_reply", "render_prompt", "render_row", "score"]

IMPLEMENTATIONS: Mapping[str, Any] = MappingProxyType({
    "qwen-chat-v1": qwen_chat,
    "boxed-chat-v1": boxed_chat,
    "boxed-chat-v2": boxed_chat_v2,
    "chat-addition-v1": chat_addition,
})
"""name -> module with ``render(spec, row) -> Rendered`` and ``parse(spec, text) -> str | None``."""

if set(IMPLEMENTATIONS) != set(REGISTRY):  # pragma: no cover - a registry edit without its implementation
    raise ImportError(f"protocol registry {sorted(REGISTRY)} and implementations {sorted(IMPLEMENTATIONS)} differ")


class ChatTemplateMissing(RuntimeError):
    """The model's tokenizer has no chat template; every protocol requires one."""


def _impl(spec: ProtocolSpec) -> Any:
    return IMPLEMENTATIONS[spec.name]


def render_row(spec: ProtocolSpec, row: Row) -> Rendered:
    """Render one data row under ``spec`` (system, user, gold, GPQA order).

    Raises:
        runners.incase.accuracy.datasets.DatasetError: the row cannot be rendered (wrong task, no gold number).
    """
    return _impl(spec).render(spec, row)


def parse_reply(spec: ProtocolSpec, text: str) -> str | None:
    """The answer ``spec`` extracts from ``text`` (number text or letter); None = unparsable."""
    parse: Callable[[ProtocolSpec, str], str | None] = _impl(spec).parse
    return parse(spec, text)


def score(spec: ProtocolSpec, reply: str, gold: str) -> tuple[str | None, bool]:
    """(parsed answer or None, correct). Unparsable is wrong."""
    parsed = parse_reply(spec, reply)
    return parsed, parsed is not None and parsed == gold


def render_prompt(tokenizer: Any, messages: Sequence[dict[str, str]]) -> tuple[str, list[int]]:
    """Render ``messages`` with the tokenizer's chat template and tokenize the result.

    Args:
        tokenizer: a Hugging Face tokenizer (``apply_chat_template``, ``__call__``).
        messages: system + user turns.

    Returns:
        (prompt text, prompt token ids); the template already holds the special
        tokens, so no extra BOS is added (``add_special_tokens=False``, as vLLM's
        ``LLM.chat`` does).

    Raises:
        ChatTemplateMissing: the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "?")
        raise ChatTemplateMissing(
            f"tokenizer of {name} has no chat_template (tokenizer_config.json); "
            "accuracy protocols render prompts with the model's chat template and have no fallback"
        )
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)
