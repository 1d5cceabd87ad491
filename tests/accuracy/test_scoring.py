"""Protocol boxed-chat-v1 answer extraction (the project's own protocol): the GSM8K table of
shared/cases/README.md, fractions and text after the final answer, plus the whole kind (property-based)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runners.incase.accuracy.scoring import (
    canonical_number,
    parse_gpqa_letter,
    parse_gsm8k_gold,
    parse_gsm8k_number,
    score,
)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("\\boxed{8,000}", "8000"),
        ("\\boxed{$9{,}500}", "9500"),
        ("so -1,234.5 in total", "-1234.5"),
        ("$29.00", "29"),
        ("The answer is 42.", "42"),
        ("\\boxed{\\$1,000}", "1000"),
        ("\\boxed{\\text{12 apples}}", "12"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("It costs €3.50 each", "3.5"),
        ("The temperature is \u22127 degrees", "-7"),
        ("Between 3-2 = 1", "1"),
        ("We get 50% of them", "50"),
        ("First 10, then \\boxed{7} and later 99", "7"),
        ("#### 72", "72"),
        ("The final answer is: $1,234,567.80 total. Check: 5 + 5", "1234567.8"),
    ],
)
def test_gsm8k_final_number_table(text: str, parsed: str) -> None:
    assert parse_gsm8k_number(text) == parsed


def test_gsm8k_gold_with_negative_and_separator() -> None:
    assert parse_gsm8k_gold("step\nstep\n#### -3") == "-3"
    assert parse_gsm8k_gold("x\n#### 1,200") == "1200"


def test_gsm8k_currency_decimal_matches_integer_gold() -> None:
    assert score("gsm8k", "$29.00", parse_gsm8k_gold("#### 29")) == ("29", True)


def test_gsm8k_gold_without_marker_is_rejected() -> None:
    with pytest.raises(ValueError, match="no '#### N' marker"):
        parse_gsm8k_gold("The answer is 5")


@pytest.mark.parametrize("text", ["", "no digits here", "\\boxed{x}", "\\boxed{8"])
def test_gsm8k_without_number_is_unparsable_and_wrong(text: str) -> None:
    if text == "\\boxed{8":  # cut off inside the box: falls back to the last number in the text
        assert parse_gsm8k_number(text) == "8"
        return
    assert score("gsm8k", text, "8") == (None, False)


def test_canonical_number_strips_trailing_zeros_and_negative_zero() -> None:
    assert canonical_number(Decimal("29.00")) == "29"
    assert canonical_number(Decimal("-0.0")) == "0"
    assert canonical_number(Decimal("1E+3")) == "1000"


def _with_commas(d: Decimal) -> str:
    sign = "-" if d < 0 else ""
    d = abs(d)
    whole, _, frac = format(d, "f").partition(".")
    return sign + f"{int(whole):,}" + (f".{frac}" if frac else "")


numbers = st.decimals(min_value=Decimal("-1e9"), max_value=Decimal("1e9"), places=2, allow_nan=False,
                      allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(value=numbers, style=st.sampled_from(["plain", "commas", "dollar", "boxed", "boxed_latex", "sentence",
                                             "marker"]))
def test_gsm8k_any_number_in_any_style_parses_to_its_canonical_value(value: Decimal, style: str) -> None:
    plain = format(value, "f")
    commas = _with_commas(value)
    text = {
        "plain": plain,
        "commas": commas,
        "dollar": ("-$" + _with_commas(-value)) if value < 0 else "$" + commas,
        "boxed": f"Work: 1 + 2 = 3.\n\\boxed{{{commas}}}",
        "boxed_latex": "\\boxed{" + commas.replace(",", "{,}") + "}",
        "sentence": f"First 12 then 7, so {commas} in total.",
        "marker": f"steps 3 and 4\n#### {plain}",
    }[style]
    assert parse_gsm8k_number(text) == canonical_number(value)


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("C", "C"),
        ("(C)", "C"),
        ("C. because the others are wrong", "C"),
        ("Answer: C", "C"),
        ("The answer is (B)", "B"),
        ("**D**", "D"),
        ("D)", "D"),
        ("[A]", "A"),
        ("(b)", "B"),
        ("B\nBecause A and D fail", "B"),
        ("  Option A.", "A"),
        ("The correct answer is D.", "D"),
        ("Answer: C because B is wrong", "C"),
    ],
)
def test_gpqa_explicit_leading_choice(text: str, letter: str) -> None:
    assert parse_gpqa_letter(text) == letter


@pytest.mark.parametrize(
    "text",
    [
        "I think the answer is C",
        "A bird in the hand",
        "C because it is",
        "Both (A) and (C)",  # 'Both' first: not a leading choice
        "E",
        "c",
        "",
        "The options are C and D",
        "answer depends on D",
    ],
)
def test_gpqa_never_takes_a_later_letter(text: str) -> None:
    assert parse_gpqa_letter(text) is None
    assert score("gpqa", text, "C") == (None, False)


prose = st.text(alphabet="efghijklmnopqrstuvwxyz ,ABCD()", min_size=0, max_size=60)


@settings(max_examples=200, deadline=None)
@given(letter=st.sampled_from("ABCD"), form=st.sampled_from(["{L}", "({L})", "{L}.", "{L})", "Answer: {L}",
                                                            "The answer is ({L})", "**{L}**", "answer is {L}:"]),
       tail=prose, sep=st.sampled_from([" ", "\n", ""]))
def test_gpqa_leading_choice_wins_over_any_later_prose(letter: str, form: str, tail: str, sep: str) -> None:
    text = form.format(L=letter)
    if form == "{L}" and sep != "\n":
        sep, tail = "", ""  # a bare letter without a prefix must end the line
    elif form.endswith("{L}") and sep == "":
        sep = " "  # "Answer: AA" is not a choice; "Answer: A A..." is
    assert parse_gpqa_letter(text + sep + tail) == letter


@settings(max_examples=200, deadline=None)
@given(head=st.text(alphabet="efghijklmnopqrstuvwxyz", min_size=1, max_size=12),
       tail=prose, letter=st.sampled_from("ABCD"))
def test_gpqa_letter_after_leading_prose_is_unparsable(head: str, tail: str, letter: str) -> None:
    assert parse_gpqa_letter(f"{head} {tail} the answer is ({letter})") is None


def test_score_rejects_unknown_task() -> None:
    with pytest.raises(ValueError, match="unknown task 'mmlu'"):
        score("mmlu", "A", "A")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_parsers_never_raise_and_return_canonical_values(text: str) -> None:
    number = parse_gsm8k_number(text)
    if number is not None:
        value = Fraction(number) if "/" in number else Decimal(number)
        assert canonical_number(value) == number
    assert parse_gpqa_letter(text) in (None, "A", "B", "C", "D")


# ----------------------------------------------------------------------------- fractions


@pytest.mark.parametrize(("text", "parsed"), [
    ("so the answer is 1/2", "0.5"),
    ("3\\frac{1}{2}", "3.5"),
    ("The answer is 3\\frac{1}{2} cups", "3.5"),
    ("\\boxed{3\\frac{1}{2}}", "3.5"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75"),
    ("\\boxed{\\frac12}", "0.5"),
    ("she ate 3 1/2 pies", "3.5"),
    ("-1/4 of it", "-0.25"),
    ("so 1/3 remains", "1/3"),
    ("The answer is 2/6", "1/3"),
    ("The answer is 60/3 = 20", "20"),
    ("He earns $20/hour", "20"),
    ("On 1/2/2020 she had 5", "5"),
    ("5/0 is undefined, so 7", "7"),
])
def test_a_fraction_is_one_value_never_one_of_its_parts(text: str, parsed: str) -> None:
    assert parse_gsm8k_number(text) == parsed


def test_half_against_gold_one_is_wrong() -> None:
    assert score("gsm8k", "so the answer is 1/2", "1") == ("0.5", False)
    assert score("gsm8k", "3\\frac{1}{2}", "3") == ("3.5", False)
    assert score("gsm8k", "3\\frac{1}{2}", "0.5") == ("3.5", False)


@settings(max_examples=200, deadline=None)
@given(whole=st.integers(0, 20), num=st.integers(1, 30), den=st.integers(2, 30),
       style=st.sampled_from(["plain", "latex", "dlatex", "boxed", "marker"]))
def test_any_fraction_parses_to_its_exact_value(whole: int, num: int, den: int, style: str) -> None:
    value = Fraction(num, den) + whole
    frac = {"plain": f"{num}/{den}", "latex": f"\\frac{{{num}}}{{{den}}}", "dlatex": f"\\dfrac{{{num}}}{{{den}}}",
            "boxed": f"\\frac{{{num}}}{{{den}}}", "marker": f"{num}/{den}"}[style]
    lead = (f"{whole} " if style in ("plain", "marker") else f"{whole}") if whole else ""
    text = {"boxed": f"so \\boxed{{{lead}{frac}}}.", "marker": f"The answer is {lead}{frac} in total"}.get(
        style, f"it comes to {lead}{frac}")
    assert parse_gsm8k_number(text) == canonical_number(value)


# ----------------------------------------------------------------------------- text after the final answer


@pytest.mark.parametrize(("text", "parsed"), [
    ("The answer is 18.\n\nQuestion: Tom has 5 apples and eats 2. The answer is 3.", "18"),
    ("So \\boxed{18}.\n\nExample 2: 4 + 3 = \\boxed{7}", "18"),
    ("Total 18\nQ: How many legs do 3 cats have?\nA: 12", "18"),
    ("#### 18\nProblem 2: what is 5 + 6? #### 11", "18"),
    ("It is 18.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>4", "18"),
    ("The answer is 18.\nUser: thanks! what about 9?", "18"),
    ("The answer is 18.\n\nAnother question: 9 + 9 = 18, so 30 people", "18"),
    ("Question: Tom has 5 apples, eats 2.\nSo he has 3 left.\nThe answer is 3.", "3"),  # restated question kept
])
def test_text_after_the_final_answer_does_not_decide_it(text: str, parsed: str) -> None:
    assert parse_gsm8k_number(text) == parsed


@settings(max_examples=200, deadline=None)
@given(answer=st.integers(-500, 5000),
       form=st.sampled_from(["The answer is {a}.", "\\boxed{{{a}}}", "#### {a}", "so {a} in total."]),
       marker=st.sampled_from(["Question:", "Q:", "Problem 2:", "Example:", "Human:", "User:", "<|im_end|>",
                               "<|endoftext|>", "Another example:"]),
       other=st.integers(-500, 5000),
       tail=st.sampled_from(["The answer is {o}.", "\\boxed{{{o}}}", "#### {o}", "{o}"]))
def test_no_continuation_after_the_answer_can_change_it(answer: int, form: str, marker: str, other: int,
                                                         tail: str) -> None:
    text = f"Work: 2 + 2 = 4.\n{form.format(a=answer)}\n\n{marker} Some new problem with 12 things. " \
           f"{tail.format(o=other)}"
    assert parse_gsm8k_number(text) == str(answer)
