"""Prompt construction of one case: seeded random token ids, or the published seed text.

What is modelled: the two prompt modes of ``runners.incase.bench_one``:

* ``random_ids`` (project default): ``num_prompts`` lists of exactly ``input_len`` token
  ids drawn from ``(seed, round)`` (special ids excluded), submitted as ``TokensPrompt``.
* ``seed_text`` (the published ``bench_one``): a fixed seed text repeated until it covers
  ``input_len`` tokens of the model's tokenizer, the ids truncated to exactly ``input_len``,
  decoded back to text; every prompt of every round (warm-up included) is that text, so
  vLLM's prefix cache may serve it (as it did in the published runs).

What is deliberately not modelled: chat templates (the published prompts are raw text).

The tokenizer is any object with ``encode(text, add_special_tokens=False) -> list[int]``
and ``decode(ids) -> str`` (Hugging Face tokenizers; vLLM's ``LLM.get_tokenizer()``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

DEFAULT_SEED_TEXT = (
    "The quick brown fox jumps over the lazy dog. Large language models generate text one token "
    "at a time, and their throughput depends on how fast the weights reach the compute units. "
)
"""Seed text of ``prompt_mode=seed_text`` when the workload gives none (``prompt_seed_text``).

This project's own text, not the published scripts' (which this repository does not hold): the prompts have
the published construction and length but not the published content. Without ``ignore_eos`` the output length
depends on the content, so an exact replay of a published run sets ``workload.prompt_seed_text``."""


def make_prompt_ids(seed: int, round_index: int, num_prompts: int, input_len: int,
                    vocab: Sequence[int]) -> list[list[int]]:
    """Deterministic token-id prompts of exactly ``input_len`` tokens (``random_ids`` mode).

    Args:
        seed: workload seed.
        round_index: global round number (warmup rounds first); a different round
            gives different prompts, so no round is served from an earlier round's
            prefix cache.
        num_prompts: prompts per round.
        input_len: tokens per prompt.
        vocab: allowed token ids (special tokens excluded).

    Returns:
        ``num_prompts`` lists of ``input_len`` ids.
    """
    rng = random.Random(f"bench-one:{seed}:{round_index}")
    return [[vocab[rng.randrange(len(vocab))] for _ in range(input_len)] for _ in range(num_prompts)]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def seed_text_prompt(tokenizer: Any, seed_text: str, input_len: int) -> str:
    """The published prompt: ``seed_text`` repeated, truncated to ``input_len`` tokens, decoded.

    Args:
        tokenizer: the model's tokenizer (see module docstring).
        seed_text: non-empty text that encodes to at least one token.
        input_len: prompt length in tokens (>= 1).

    Returns:
        Text whose re-encoding with ``tokenizer`` is exactly ``input_len`` tokens.

    Raises:
        ValueError: empty seed text, ``input_len`` < 1, or a decoded prefix that does not
            re-encode to ``input_len`` tokens (the tokenizer does not round-trip at that
            boundary: choose another seed text); the message names the counts.
    """
    if input_len < 1:
        raise ValueError(f"input_len ({input_len}) must be >= 1")
    per_copy = len(_encode(tokenizer, seed_text)) if seed_text else 0
    if per_copy == 0:
        raise ValueError(f"prompt_seed_text ({seed_text!r}) must encode to at least one token")
    copies = input_len // per_copy + 2
    ids = _encode(tokenizer, seed_text * copies)[:input_len]
    if len(ids) != input_len:  # pragma: no cover - copies always cover input_len
        raise ValueError(f"seed text covers {len(ids)} tokens, need {input_len}")
    text = tokenizer.decode(ids)
    got = len(_encode(tokenizer, text))
    if got != input_len:
        raise ValueError(f"the seed text truncated to {input_len} tokens re-encodes to {got} tokens with this "
                         "tokenizer (not round-trip stable at the cut); choose another prompt_seed_text")
    return text


def seed_text_prompts(tokenizer: Any, seed_text: str, num_prompts: int, input_len: int) -> list[str]:
    """``num_prompts`` copies of ``seed_text_prompt`` (the same prompts in every round)."""
    return [seed_text_prompt(tokenizer, seed_text, input_len)] * num_prompts
