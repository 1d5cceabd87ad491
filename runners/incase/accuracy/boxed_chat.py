"""Protocol ``boxed-chat-v1``: this project's own protocol (``\\boxed{}`` answers; records of the earlier protocol registry name it ``qwen-chat-v1``).

What is modelled: prompts from the frozen spec (question and options stripped), a GPQA
option order sorted by SHA-256 of ``"{seed}\\x1f{question}\\x1f{index}"`` (a pure function of
the question, Python's global ``random`` untouched), gold from ``#### N``, and the
extraction of :mod:`runners.incase.accuracy.scoring` (boxed answers, LaTeX, fractions as one
value, text after the answer ignored).

What is deliberately not modelled: few-shot prompting, chain-of-thought for GPQA.
"""

from __future__ import annotations

import hashlib

from results_schema.records.accuracy import ProtocolSpec
from runners.incase.accuracy.datasets import DatasetError, GPQARow, GSM8KRow, Row
from runners.incase.accuracy.rendered import LETTERS, Rendered
from runners.incase.accuracy.scoring import parse_gpqa_letter, parse_gsm8k_gold, parse_gsm8k_number


def shuffle_order(seed: str, question: str, n: int = 4) -> tuple[int, ...]:
    """``order[k]`` = original index shown at position k, sorted by SHA-256 of ``"{seed}\\x1f{question}\\x1f{index}"``."""
    def key(i: int) -> bytes:
        return hashlib.sha256(f"{seed}\x1f{question}\x1f{i}".encode()).digest()

    return tuple(sorted(range(n), key=key))


def parse(spec: ProtocolSpec, text: str) -> str | None:
    """Parse a reply for ``spec.task`` (see :mod:`runners.incase.accuracy.scoring`)."""
    return parse_gsm8k_number(text) if spec.task == "gsm8k" else parse_gpqa_letter(text)


def render(spec: ProtocolSpec, row: Row) -> Rendered:
    """System turn, user turn, gold answer and (GPQA) option order of one row.

    Raises:
        DatasetError: the row does not fit the task, or a GSM8K answer has no ``#### N``.
    """
    if spec.task == "gsm8k" and isinstance(row, GSM8KRow):
        try:
            gold = parse_gsm8k_gold(row.answer)
        except ValueError as exc:
            raise DatasetError(f"row {row.index}: {exc}") from None
        return Rendered(spec.system_message, spec.user_template.format(question=row.question.strip()), gold, None)
    if spec.task == "gpqa" and isinstance(row, GPQARow):
        assert spec.shuffle_seed is not None, "GPQA spec without a shuffle seed"
        question = row.question.strip()
        order = shuffle_order(spec.shuffle_seed, question)
        shown = {LETTERS[k]: row.options[i].strip() for k, i in enumerate(order)}
        user = spec.user_template.format(question=question, **shown)
        return Rendered(spec.system_message, user, LETTERS[order.index(0)], order)
    raise DatasetError(f"row {row.index}: a {type(row).__name__} cannot be rendered for task {spec.task}")
