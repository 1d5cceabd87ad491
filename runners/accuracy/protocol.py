"""Protocol ``qwen-chat-v1``: how GSM8K / GPQA prompts are built and sampled.

What is modelled:

* Prompts are chat conversations (system + user) rendered with the *model's own*
  chat template (``add_generation_prompt=True``); a tokenizer without a chat
  template is an error, never a silent fallback to raw text.
* Sampling is greedy: temperature 0, top_p 1, top_k 0 (off), seed 0;
  max tokens 512 for GSM8K (room for step-by-step reasoning), 8 for GPQA
  (a letter, possibly with punctuation).
* GPQA options are shuffled per question by SHA-256 of (seed, question, option
  index): a pure function of the question text, independent of row order and of
  Python's global ``random`` state (which is never touched). Index 0 is the
  correct answer; ``option_order[k]`` is the original index shown at letter k.

The spec itself is a :class:`results_schema.accuracy.ProtocolSpec`, whose
SHA-256 every result records so the verifier can prove that all compared cases
used the same protocol.

What is deliberately not modelled: few-shot prompting, chain-of-thought for
GPQA, sampling with temperature > 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from results_schema.accuracy import ProtocolSpec, SamplingSettings
from runners.accuracy.datasets import GPQARow, GSM8KRow, Row
from runners.accuracy.scoring import PARSER_NAMES

PROTOCOL_NAME = "qwen-chat-v1"
SEED = 0
MAX_TOKENS = {"gsm8k": 512, "gpqa": 8}
SYSTEM_MESSAGES = {
    # Qwen2.5(-Math) instruct convention for boxed final answers.
    "gsm8k": "Please reason step by step, and put your final answer within \\boxed{}.",
    "gpqa": (
        "You are answering a multiple-choice science question. "
        "Reply with only the letter (A, B, C or D) of the correct option."
    ),
}
USER_TEMPLATES = {
    "gsm8k": "{question}",
    "gpqa": "{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}\n\nAnswer with the letter only.",
}
LETTERS = "ABCD"


class ChatTemplateMissing(RuntimeError):
    """The model's tokenizer has no chat template; ``qwen-chat-v1`` requires one."""


def protocol_spec(task: str) -> ProtocolSpec:
    """The canonical ``qwen-chat-v1`` spec for ``task`` (gsm8k or gpqa).

    Raises:
        ValueError: unknown task.
    """
    if task not in MAX_TOKENS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(MAX_TOKENS)}")
    return ProtocolSpec(
        name=PROTOCOL_NAME,
        task=task,  # type: ignore[arg-type]
        system_message=SYSTEM_MESSAGES[task],
        user_template=USER_TEMPLATES[task],
        sampling=SamplingSettings(temperature=0.0, top_p=1.0, top_k=0, seed=SEED, max_tokens=MAX_TOKENS[task]),
        shuffle_seed=SEED if task == "gpqa" else None,
        chat_template="model",
        answer_extraction=PARSER_NAMES[task],
    )


def shuffle_order(seed: int, question: str, n: int = 4) -> tuple[int, ...]:
    """Deterministic permutation of ``n`` options for one question.

    Args:
        seed: shuffle seed (protocol ``shuffle_seed``).
        question: question text (stripped), the only per-row input.
        n: number of options.

    Returns:
        ``order`` with ``order[k]`` = original index shown at position k;
        sorted by SHA-256 of ``"{seed}\\x1f{question}\\x1f{index}"``.
    """
    def key(i: int) -> bytes:
        return hashlib.sha256(f"{seed}\x1f{question}\x1f{i}".encode()).digest()

    return tuple(sorted(range(n), key=key))


def build_messages(spec: ProtocolSpec, row: Row) -> tuple[list[dict[str, str]], str, tuple[int, ...] | None]:
    """Chat messages, gold answer and (GPQA) option order for one row.

    Returns:
        (messages, gold, option_order): gold is a canonical number (GSM8K) or a
        letter (GPQA); option_order is None for GSM8K.
    """
    if isinstance(row, GSM8KRow):
        user = spec.user_template.format(question=row.question)
        return [{"role": "system", "content": spec.system_message}, {"role": "user", "content": user}], row.gold, None
    if isinstance(row, GPQARow):
        assert spec.shuffle_seed is not None, "GPQA protocol needs a shuffle seed"
        order = shuffle_order(spec.shuffle_seed, row.question, len(row.options))
        shown = {LETTERS[k]: row.options[i] for k, i in enumerate(order)}
        user = spec.user_template.format(question=row.question, **shown)
        gold = LETTERS[order.index(0)]
        return [{"role": "system", "content": spec.system_message}, {"role": "user", "content": user}], gold, order
    raise TypeError(f"unsupported row type {type(row).__name__}")


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
            f"protocol {PROTOCOL_NAME} renders prompts with the model's chat template and has no fallback"
        )
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)
