"""Protocol ``qwen-chat-v1``: the published accuracy protocol, exactly (``shared/cases/qwen-chat-v1.md``).

What is modelled (texts and regexes are read from the frozen spec in
``results_schema.records.protocols``, so its SHA-256 covers them):

* Prompts: system turn and user turn ``spec.user_template.format(...)`` with the row's
  question and options *as stored* (no stripping; the prompt ends at ``Answer:`` for GPQA).
* GPQA option order: ``[correct, incorrect 1, incorrect 2, incorrect 3]`` shuffled once by
  a fresh ``random.Random`` seeded with the big-endian integer of
  ``sha256(f"{seed}{question}".encode("utf-8"))`` (seed ``"0"``); the gold letter is where
  the correct answer landed. Python's global ``random`` state is never touched.
* GSM8K extraction (gold and reply alike): text after the last ``####`` (whole text when
  none); last match of ``[+-]?\\d[\\d,]*(?:\\.\\d+)?``; commas dropped; decimal normal form
  (no exponent, no trailing zeros, no trailing dot; ``-0`` is ``0``). No match: unparsable.
* GPQA extraction: the stripped reply; three start-anchored, case-insensitive patterns
  tried in order; the first match gives the letter, upper-cased. No match: unparsable.

What is deliberately not modelled: anything the published protocol does not do (no
``\\boxed{}``, no fractions, no continuation cut: a reply is scored as written).
"""

from __future__ import annotations

import hashlib
import random
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from results_schema.records.accuracy import ProtocolSpec
from runners.incase.accuracy.datasets import DatasetError, GPQARow, GSM8KRow, Row
from runners.incase.accuracy.rendered import LETTERS, Rendered


@lru_cache(maxsize=None)
def _compiled(patterns: tuple[str, ...], flags: int) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, flags) for p in patterns)


def shuffle_order(seed: str, question: str) -> tuple[int, ...]:
    """Original option indices in shown order (0 = correct, 1..3 = incorrect 1..3).

    Args:
        seed: the protocol's seed string (``"0"``).
        question: the row's question text as stored.

    Returns:
        ``order`` with ``order[k]`` = original index shown at letter ``"ABCD"[k]``.
    """
    digest = hashlib.sha256(f"{seed}{question}".encode("utf-8")).digest()
    order = [0, 1, 2, 3]
    random.Random(int.from_bytes(digest, "big")).shuffle(order)
    return tuple(order)


def _decimal_text(raw: str) -> str | None:
    try:
        value = Decimal(raw.replace(",", ""))
    except InvalidOperation:
        return None
    if value == 0:
        return "0"
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def parse_gsm8k(spec: ProtocolSpec, text: str) -> str | None:
    """Normalised last number after the last ``####`` (see module docstring); None = unparsable."""
    tail = text.rsplit("####", 1)[-1]
    (number,) = _compiled(spec.extraction_patterns, 0)
    matches = number.findall(tail)
    return _decimal_text(matches[-1]) if matches else None


def parse_gpqa(spec: ProtocolSpec, text: str) -> str | None:
    """Letter A-D of the first start-anchored pattern that matches the stripped reply; None = unparsable."""
    reply = text.strip()
    for pattern in _compiled(spec.extraction_patterns, re.IGNORECASE):
        m = pattern.match(reply)
        if m is not None:
            return next(g for g in m.groups() if g is not None).upper()
    return None


def parse(spec: ProtocolSpec, text: str) -> str | None:
    """Parse a reply for ``spec.task``."""
    return parse_gsm8k(spec, text) if spec.task == "gsm8k" else parse_gpqa(spec, text)


def render_number(spec: ProtocolSpec, row: GSM8KRow) -> Rendered:
    """The GSM8K rendering of one question/answer row: ``spec.system_message``, ``spec.user_template`` with the
    question as stored, gold = :func:`parse_gsm8k` of the answer (``chat-addition-v1`` reuses it unchanged).

    Raises:
        DatasetError: the answer has no number.
    """
    gold = parse_gsm8k(spec, row.answer)
    if gold is None:
        task = "GSM8K" if spec.task == "gsm8k" else spec.task
        raise DatasetError(f"row {row.index}: {task} answer has no number ({spec.name}): {row.answer[-80:]!r}")
    user = spec.user_template.format(question=row.question)
    return Rendered(system=spec.system_message, user=user, gold=gold, order=None)


def render(spec: ProtocolSpec, row: Row) -> Rendered:
    """System turn, user turn, gold answer and (GPQA) option order of one row.

    Raises:
        DatasetError: the row does not fit the task, or a GSM8K gold answer has no number.
    """
    if spec.task == "gsm8k" and isinstance(row, GSM8KRow):
        return render_number(spec, row)
    if spec.task == "gpqa" and isinstance(row, GPQARow):
        assert spec.shuffle_seed is not None, "GPQA spec without a shuffle seed"
        order = shuffle_order(spec.shuffle_seed, row.question)
        shown = {LETTERS[k]: row.options[i] for k, i in enumerate(order)}
        user = spec.user_template.format(question=row.question, **shown)
        return Rendered(system=spec.system_message, user=user, gold=LETTERS[order.index(0)], order=order)
    raise DatasetError(f"row {row.index}: a {type(row).__name__} cannot be rendered for task {spec.task}")
