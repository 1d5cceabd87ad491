"""Protocol ``boxed-chat-v2``: the project's own protocol, reading a GPQA reply's final answer.

What is modelled: prompts and the GPQA option order exactly as ``boxed-chat-v1`` renders them (from this
spec's texts; :func:`runners.incase.accuracy.boxed_chat.render`), GSM8K parsed by ``boxed-chat-v1``'s rule, and
GPQA parsed by :func:`parse_gpqa_final` from the spec's patterns (``results_schema.records.protocols``, so the
spec hash covers them): the reply is cut at the first continuation (a new turn or example); then the last
``\\boxed{}`` decides (a box holding anything but one letter is unparsable); else the last stated choice
(``Final answer: C``, ``the answer is (C)``, ``I choose C``, ``Correction: D``); else a reply that is only a
letter. A chosen letter with another option offered right beside it (``A or B``, ``A/B``) is a hedge:
unparsable, counted and never guessed.

What is deliberately not modelled: negation inside a statement (``the answer is not A`` states no choice and
is unparsable unless a later statement gives one), letters in free prose (``I think C``), which are never taken.
"""

from __future__ import annotations

import re

from results_schema.records.accuracy import ProtocolSpec
from results_schema.records.protocols import (
    BOXED_CONTINUATION,
    BOXED_V2_BOXED_LETTER,
    BOXED_V2_HEDGE,
    BOXED_V2_MARKER,
    BOXED_V2_ONLY_LETTER,
)
from runners.incase.accuracy.boxed_chat import render  # the same rendering, of this spec's texts
from runners.incase.accuracy.scoring import parse_gsm8k_number

__all__ = ["parse", "parse_gpqa_final", "render"]

_CONTINUATION = re.compile(BOXED_CONTINUATION)
_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_LETTER = re.compile(BOXED_V2_BOXED_LETTER)
_MARKER = re.compile(BOXED_V2_MARKER)
_ONLY_LETTER = re.compile(BOXED_V2_ONLY_LETTER)
_HEDGE = re.compile(BOXED_V2_HEDGE)


def _cut(text: str) -> str:
    """``text`` up to the first continuation that starts after its first line (a new turn or example)."""
    first_line_end = text.find("\n")
    for m in _CONTINUATION.finditer(text):
        if first_line_end >= 0 and m.start() > first_line_end or m.group(0).startswith("<|"):
            return text[:m.start()]
    return text


def _letter(m: re.Match[str], text: str) -> str | None:
    """The upper-cased letter of a match, or None when another option is offered right after it (a hedge)."""
    letter = m.group("letter") if "letter" in m.re.groupindex else (m.group("paren") or m.group("bracket")
                                                                     or m.group("bare"))
    if _HEDGE.match(text[m.end():]):
        return None
    return letter.upper()


def parse_gpqa_final(text: str) -> str | None:
    """The final choice of a GPQA reply (``"A"``..``"D"``), or None (unparsable).

    Args:
        text: the model's reply.

    Returns:
        The letter of the last ``\\boxed{}`` (None when the last box holds anything but one letter); else the
        letter of the last stated choice; else the letter of a reply that is only a letter; None for a hedge
        between options or when nothing states a choice.
    """
    reply = _cut(text)
    boxes = list(_BOX_START.finditer(reply))
    if boxes:
        m = _BOXED_LETTER.match(reply, boxes[-1].start())
        return None if m is None else _letter(m, reply)
    markers = list(_MARKER.finditer(reply))
    if markers:
        return _letter(markers[-1], reply)
    m = _ONLY_LETTER.match(reply)
    return None if m is None else _letter(m, reply)


def parse(spec: ProtocolSpec, text: str) -> str | None:
    """Parse a reply for ``spec.task``: GSM8K by ``boxed-chat-v1``'s rule, GPQA by :func:`parse_gpqa_final`."""
    return parse_gsm8k_number(text) if spec.task == "gsm8k" else parse_gpqa_final(text)

