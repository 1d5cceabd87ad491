"""Protocol ``boxed-chat-v1`` answer extraction: GSM8K final number, GPQA leading letter.

What is modelled (regexes come from ``results_schema.records.protocols``, so the spec hash covers them):

* GSM8K: the *final* number of a reply, normalized to a canonical string. First the
  reply is cut where the model starts writing something else after its answer (a new
  ``Question:`` / ``Q:`` / ``Problem 2:`` / ``Example:`` / ``User:`` line after the first
  line, ``Another question``, or a chat special token such as ``<|im_end|>``). Then,
  in preference order: the last ``\\boxed{...}`` (nested braces allowed), an explicit
  ``#### N`` / "answer is N" marker (the last one), the last number in the text.
  Signs (``-``, ``+``, Unicode minus), thousands separators (``1,234`` and LaTeX
  ``{,}``), currency (``$ \\$ € £``), decimals (``29.00`` == ``29``) and a trailing
  percent are handled. A fraction is one value, never one of its parts: ``1/2``,
  ``\\frac{1}{2}``, ``\\frac12`` are 0.5, mixed numbers ``3 1/2`` and
  ``3\\frac{1}{2}`` are 3.5; a fraction without a finite decimal is written ``p/q`` in
  lowest terms (``1/3``), which never equals an integer gold. Gold answers (``#### -3``)
  use the same normalizer.
* GPQA: an *explicit leading* choice only: ``C``, ``(C)``, ``C.``, ``C)``,
  ``C: ...``, ``Answer: C``, ``The answer is (C)``, optionally wrapped in
  markdown emphasis. A letter that first appears later in prose is never taken
  (``"I think it is C"`` is unparsable), and a bare ``A`` followed by a word
  (``"A bird ..."``) is an English article, not a choice.

Unparsable replies return ``None``; the caller counts them wrong and counts
them separately.

What is deliberately not modelled: symbolic math equivalence (expressions are
not evaluated), multiple answers, dates (``1/2/2020`` is not a number).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from results_schema.records.protocols import BOXED_CONTINUATION, BOXED_FRAC, BOXED_LETTER, BOXED_MARKERS, BOXED_NUMBER

GSM8K_PARSER = "boxed-chat-v1/gsm8k"
GPQA_PARSER = "boxed-chat-v1/gpqa"
PARSER_NAMES = {"gsm8k": GSM8K_PARSER, "gpqa": GPQA_PARSER}

_NUMBER = re.compile(BOXED_NUMBER)
_FRAC = re.compile(BOXED_FRAC)
_CONTINUATION = re.compile(BOXED_CONTINUATION)
_MARKERS = tuple(re.compile(m) for m in BOXED_MARKERS)


def canonical_number(value: Decimal | Fraction) -> str:
    """Canonical text of a number: no exponent, no trailing zeros, ``-0`` -> ``0``; ``p/q`` when not a finite decimal.

    Args:
        value: finite decimal or exact fraction.

    Returns:
        e.g. ``Decimal("29.00")`` -> ``"29"``, ``Decimal("-1234.50")`` -> ``"-1234.5"``,
        ``Fraction(1, 2)`` -> ``"0.5"``, ``Fraction(-1, 3)`` -> ``"-1/3"``.

    Raises:
        ValueError: non-finite decimal.
    """
    if isinstance(value, Fraction):
        den = value.denominator
        for p in (2, 5):
            while den % p == 0:
                den //= p
        if den != 1:
            return f"{value.numerator}/{value.denominator}"
        value = Decimal(value.numerator) / Decimal(value.denominator)
    if not value.is_finite():
        raise ValueError(f"non-finite number {value}")
    if value == 0:
        return "0"
    text = format(value.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _frac_to_text(m: re.Match[str]) -> str:
    num = m.group("n1") or m.group("n2")
    den = m.group("d1") or m.group("d2")
    whole = m.group("whole")
    return f"{whole} {num}/{den}" if whole else f"{num}/{den}"


def _clean_latex(text: str) -> str:
    text = text.replace("{,}", ",").replace("\\,", "").replace("\\!", "").replace("\\ ", " ")
    text = text.replace("\\$", "$").replace("\\%", "%")
    text = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(?:left|right)", "", text)
    return _FRAC.sub(_frac_to_text, text)


def _numbers(text: str) -> list[Fraction]:
    """Every number token of ``text`` (fractions and mixed numbers as one exact value), in order."""
    out: list[Fraction] = []
    for m in _NUMBER.finditer(_clean_latex(text)):
        try:
            value = Fraction(Decimal(m.group("num").replace(",", "")))
            if m.group("den") is not None:
                den = Fraction(Decimal(m.group("den")))
                if den == 0:
                    continue  # "x/0" is not a number
                value /= den
            if m.group("whole") is not None:
                value += int(m.group("whole"))
        except InvalidOperation:  # pragma: no cover - the regex only admits decimals
            continue
        sign = (m.group("sign") or "").strip()
        if sign and sign != "+":
            value = -value
        out.append(value)
    return out


def cut_continuation(text: str) -> str:
    """``text`` up to where the model starts something after its answer (see module docstring).

    A turn/example marker on the first non-empty line is a restatement, not a continuation;
    a chat special token cuts wherever it appears.
    """
    stripped = text.lstrip()
    first_line_end = len(text) - len(stripped) + (stripped.find("\n") if "\n" in stripped else len(stripped))
    for m in _CONTINUATION.finditer(text):
        if m.group(0).startswith("<|") or m.start() > first_line_end:
            return text[: m.start()]
    return text


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


def _number_in(fragment: str, *, last: bool) -> Fraction | None:
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
    text = cut_continuation(text)
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


_GPQA = re.compile(BOXED_LETTER)


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
