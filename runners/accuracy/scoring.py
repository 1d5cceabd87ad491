"""Answer extraction and scoring for GSM8K (final number) and GPQA (leading letter).

What is modelled:

* GSM8K: the *final* number of a reply, normalized to a canonical decimal
  string. Preference order: the last ``\\boxed{...}`` (nested braces allowed),
  then an explicit ``#### N`` / "answer is N" marker, then the last number in the
  text. Signs (``-``, ``+``, Unicode minus), thousands separators (``1,234`` and
  LaTeX ``{,}``), currency (``$ \\$ € £``), decimals (``29.00`` == ``29``) and a
  trailing percent are handled. Gold answers (``#### -3``) use the same
  normalizer.
* GPQA: an *explicit leading* choice only: ``C``, ``(C)``, ``C.``, ``C)``,
  ``C: ...``, ``Answer: C``, ``The answer is (C)``, optionally wrapped in
  markdown emphasis. A letter that first appears later in prose is never taken
  (``"I think it is C"`` is unparsable), and a bare ``A`` followed by a word
  (``"A bird ..."``) is an English article, not a choice.

Unparsable replies return ``None``; the caller counts them wrong and counts
them separately.

What is deliberately not modelled: symbolic math equivalence (fractions such as
``\\frac{1}{2}`` are evaluated, but expressions are not), multiple answers.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

GSM8K_PARSER = "gsm8k-final-number-v1"
GPQA_PARSER = "gpqa-leading-letter-v1"
PARSER_NAMES = {"gsm8k": GSM8K_PARSER, "gpqa": GPQA_PARSER}

_MINUS = "\u2212\u2013"  # Unicode minus sign, en dash used as minus
_NUMBER = re.compile(
    r"(?<![\w.])"  # not glued to a word, digit or decimal point on the left
    r"(?P<sign>[-+" + _MINUS + r"])?"
    r"(?:[$€£]\s?)?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?![\d])"
)
_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(-?\d+)\s*\}")
_MARKERS = (
    re.compile(r"####\s*(?P<tail>.*)"),
    re.compile(r"(?:final answer|the answer)\s*(?:is|:|=)\s*(?P<tail>.*)", re.IGNORECASE),
)


def canonical_number(value: Decimal) -> str:
    """Canonical text of a number: no exponent, no trailing zeros, ``-0`` -> ``0``.

    Args:
        value: finite decimal.

    Returns:
        e.g. ``Decimal("29.00")`` -> ``"29"``, ``Decimal("-1234.50")`` -> ``"-1234.5"``.
    """
    if not value.is_finite():
        raise ValueError(f"non-finite number {value}")
    if value == 0:
        return "0"
    text = format(value.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _clean_latex(text: str) -> str:
    text = text.replace("{,}", ",").replace("\\,", "").replace("\\!", "").replace("\\ ", " ")
    text = text.replace("\\$", "$").replace("\\%", "%")
    text = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(?:left|right)", "", text)
    return text


def _numbers(text: str) -> list[Decimal]:
    out: list[Decimal] = []
    text = _clean_latex(text)
    for m in _NUMBER.finditer(text):
        raw = m.group("num").replace(",", "")
        try:
            value = Decimal(raw)
        except InvalidOperation:  # pragma: no cover - the regex only admits decimals
            continue
        sign = (m.group("sign") or "").strip()
        if sign and sign != "+":
            value = -value
        out.append(value)
    return out


def _last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` / ``\\fbox{...}``, nested braces matched; None if absent."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    start = starts[-1]
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None  # unbalanced: the reply was cut off inside the box


def _number_in(fragment: str, *, last: bool) -> Decimal | None:
    frac = _FRAC.search(fragment)
    if frac and int(frac.group(2)) != 0:
        return Decimal(int(frac.group(1))) / Decimal(int(frac.group(2)))
    nums = _numbers(fragment)
    if not nums:
        return None
    return nums[-1] if last else nums[0]


def parse_gsm8k_number(text: str) -> str | None:
    """Final numeric answer of a GSM8K reply (or gold ``answer`` field), canonicalized.

    Args:
        text: model output or gold answer text.

    Returns:
        Canonical number string (see :func:`canonical_number`), or None when no
        number can be found (unparsable).
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        value = _number_in(boxed, last=False)
        if value is not None:
            return canonical_number(value)
    for marker in _MARKERS:
        found = list(marker.finditer(text))
        if found:
            line = found[-1].group("tail").split("\n", 1)[0]
            value = _number_in(line, last=False)
            if value is not None:
                return canonical_number(value)
    value = _number_in(text, last=True)
    return canonical_number(value) if value is not None else None


def parse_gsm8k_gold(answer: str) -> str:
    """Gold number of a GSM8K ``answer`` field (the text after the last ``####``).

    Raises:
        ValueError: no ``####`` marker or no number after it (a malformed row).
    """
    if "####" not in answer:
        raise ValueError(f"GSM8K answer has no '#### N' marker: {answer[-80:]!r}")
    tail = answer.rsplit("####", 1)[1]
    value = _number_in(tail, last=False)
    if value is None:
        raise ValueError(f"GSM8K answer has no number after '####': {tail!r}")
    return canonical_number(value)


_GPQA = re.compile(
    r"^\s*(?:[*_`#>]+\s*)*"  # markdown emphasis / heading / quote
    r"(?P<prefix>(?i:(?:the\s+)?(?:correct\s+|final\s+|best\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*))?"
    r"(?:[*_`]+\s*)*"
    r"(?:\((?P<paren>[A-Da-d])\)|\[(?P<bracket>[A-Da-d])\]"  # (C) [C], any case
    r"|(?P<bare>[A-D])(?=[.):,;*_`\]]|\s|$))"  # C, C., C), C: ... -- uppercase only
)


def parse_gpqa_letter(text: str) -> str | None:
    """Explicit leading choice letter of a GPQA reply.

    Args:
        text: model output.

    Returns:
        ``"A"``..``"D"``, or None (unparsable) when the reply does not *start*
        with a choice (after optional markdown and an ``Answer:``-style prefix).
        A bare letter must be upper case; without an ``Answer:``-style prefix it
        must be followed by punctuation or the end of the line, so ``"A bird ..."``
        is an English article, not a choice (``"Answer: A because"`` is a choice).
    """
    m = _GPQA.match(text)
    if m is None:
        return None
    if m.group("bare") and not m.group("prefix"):
        rest = text[m.end():]
        if re.match(r"[ \t]+\S", rest):
            return None
    letter = m.group("paren") or m.group("bracket") or m.group("bare")
    return letter.upper()


def score(task: str, reply: str, gold: str) -> tuple[str | None, bool]:
    """Parse ``reply`` for ``task`` and compare with the canonical ``gold``.

    Returns:
        (parsed answer or None, correct). Unparsable -> (None, False).

    Raises:
        ValueError: unknown task.
    """
    if task == "gsm8k":
        parsed = parse_gsm8k_number(reply)
    elif task == "gpqa":
        parsed = parse_gpqa_letter(reply)
    else:
        raise ValueError(f"unknown task {task!r}; expected gsm8k or gpqa")
    return parsed, parsed is not None and parsed == gold
