"""Protocol ``qwen-chat-v1`` = the published protocol (every table of shared/cases/qwen-chat-v1.md), the
registry of frozen specs, and the ``render`` / ``parse`` commands."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from results_schema.records.accuracy import ProtocolSpec
from results_schema.records.protocols import (
    DEFAULT_PROTOCOL,
    REGISTRY,
    UnknownProtocolError,
    protocol_spec,
    registered_names,
)
from runners.incase.accuracy.cli import main
from runners.incase.accuracy.datasets import DatasetError, normalize_row
from runners.incase.accuracy.protocol import IMPLEMENTATIONS, ChatTemplateMissing, parse_reply, render_prompt, render_row
from runners.incase.accuracy.qwen_chat import shuffle_order

REPO = Path(__file__).resolve().parents[2]
QWEN = "qwen-chat-v1"

PINNED_SHA256 = {
    ("qwen-chat-v1", "gsm8k"): "bfd7f20f371edbd50823d5980084b3a96b0a8eeb8c418e429b4ff237051024ef",
    ("qwen-chat-v1", "gpqa"): "d918c5a392499d6b6396843c7b392738b7e5f329b74ae95021b0d3ee4b129602",
    ("boxed-chat-v1", "gsm8k"): "0b10cb9e0c1a099bfd21482b45fd9a89e451d72049e94b443f8f8feeeef918c4",
    ("boxed-chat-v1", "gpqa"): "0f2c3b23718ae0e4fd53d326f14b6f3c8367d7ff329e5621594533bab4ff5ec5",
    ("boxed-chat-v2", "gsm8k"): "a5389b46f17538563395aa04912f5076bc97c077c58cc32f4769611cf43863bc",
    ("boxed-chat-v2", "gpqa"): "065c83b96ad3b698ed274db2ca1000c45daf2669add7cb4b0012f9e8e6d3d431",
    ("chat-addition-v1", "addition"): "b73708a6d7a485bdc014aa06fdf3acaa3b91e1d2848b6517d028dab53079bf84",
}
"""Frozen: a spec never changes under its name. A failure here means a registered spec was edited;
give the edited protocol a new name or version instead of updating these values."""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def _gpqa_row(question: str, *, snake: bool = False) -> dict[str, str]:
    keys = (["question", "correct_answer", "incorrect_answer_1", "incorrect_answer_2", "incorrect_answer_3"] if snake
            else ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"])
    return dict(zip(keys, [question, "c", "w1", "w2", "w3"]))


# ----------------------------------------------------------------------------- prompts

GSM8K_INSTRUCTION = ("Solve the following math word problem step by step. End your response with a separate final "
                     "line exactly in this format: The answer is <number>. Do not write anything after the final "
                     "answer line.")
GPQA_INSTRUCTION = ("Select the single best answer to the following multiple-choice question. Return only one "
                    "capital letter: A, B, C, or D. Do not include an explanation.")


def test_gsm8k_prompt_is_byte_for_byte_the_published_one(capsys: pytest.CaptureFixture[str]) -> None:
    row = {"question": "Janet has 3 apples. How many?", "answer": "3 apples\n#### 3"}
    code, out, _ = _cli(capsys, "render", "--protocol", QWEN, "--task", "gsm8k", "--row", json.dumps(row))
    assert code == 0
    assert out == {
        "system": "You are a precise math problem solver. Follow the requested answer format.",
        "user": GSM8K_INSTRUCTION + "\n\nQuestion:\nJanet has 3 apples. How many?",
        "gold": "3",
    }


def test_gpqa_prompt_is_byte_for_byte_the_published_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "render", "--task", "gpqa", "--row",
                        json.dumps(_gpqa_row("What is the charge of an electron?")))
    assert code == 0
    assert out == {
        "system": "You are a precise expert multiple-choice question solver.",
        "user": (GPQA_INSTRUCTION + "\n\nQuestion:\nWhat is the charge of an electron?\n\nChoices:\n"
                 "A. c\nB. w1\nC. w3\nD. w2\n\nAnswer:"),
        "gold": "A",
        "order": [0, 1, 3, 2],
    }
    assert not out["user"].endswith("\n")


def test_texts_are_used_as_stored() -> None:
    spec = protocol_spec(QWEN, "gpqa")
    row = normalize_row("gpqa", 0, {**_gpqa_row(" Q with spaces \n"), "Correct Answer": " The photon\n"})
    r = render_row(spec, row)
    assert "Question:\n Q with spaces \n\n\nChoices:" in r.user
    assert r.order == shuffle_order("0", " Q with spaces \n")  # seeded with the text as stored, not stripped
    assert f"\n{r.gold}.  The photon\n\n" in r.user  # option text verbatim: leading space and newline kept


# ----------------------------------------------------------------------------- option order (table)

SHUFFLE_TABLE = [
    ("What is the charge of an electron?", ["c", "w1", "w3", "w2"], "A"),
    ("Which gas is most abundant in air?", ["w1", "w2", "c", "w3"], "C"),
    ("Q", ["w1", "c", "w2", "w3"], "B"),
]
NAME_OF = {0: "c", 1: "w1", 2: "w2", 3: "w3"}


@pytest.mark.parametrize(("question", "shown", "gold"), SHUFFLE_TABLE)
@pytest.mark.parametrize("snake", [False, True], ids=["title-case", "snake-case"])
def test_gpqa_option_order_table(capsys: pytest.CaptureFixture[str], question: str, shown: list[str], gold: str,
                                 snake: bool) -> None:
    code, out, _ = _cli(capsys, "render", "--protocol", QWEN, "--task", "gpqa", "--row",
                        json.dumps(_gpqa_row(question, snake=snake)))
    assert code == 0
    assert [NAME_OF[i] for i in out["order"]] == shown
    assert out["gold"] == gold
    lines = out["user"].split("Choices:\n", 1)[1].split("\n\nAnswer:")[0].splitlines()
    assert lines == [f"{letter}. {text}" for letter, text in zip("ABCD", shown)]


def test_shuffle_never_touches_global_random() -> None:
    random.seed(1234)
    state = random.getstate()
    order = shuffle_order("0", "What is X?")
    assert random.getstate() == state
    random.seed(999)
    assert shuffle_order("0", "What is X?") == order


@pytest.mark.parametrize("generator_seed", range(10))
def test_gold_letter_is_balanced_over_198_generated_questions(generator_seed: int) -> None:
    """Property: for 198 generated questions (10 generators) each gold letter holds 15%-35%."""
    rng = random.Random(generator_seed)
    spec = protocol_spec(QWEN, "gpqa")
    words = ["energy", "photon", "enzyme", "reaction", "orbital", "spin", "lattice", "gene", "acid", "field"]
    golds = []
    for i in range(198):
        question = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + f"? ({rng.random():.6f})"
        r = render_row(spec, normalize_row("gpqa", i, _gpqa_row(question)))
        assert r.order is not None and "ABCD"[r.order.index(0)] == r.gold
        golds.append(r.gold)
    shares = {k: Counter(golds)[k] / 198 for k in "ABCD"}
    assert all(0.15 <= s <= 0.35 for s in shares.values()), shares


# ----------------------------------------------------------------------------- extraction (tables)

GSM8K_TABLE = [
    ("The answer is 18.", "18"),
    ("So she pays $1,200.50 total.\nThe answer is 1200.5.", "1200.5"),
    ("The answer is 72, in total", "72"),
    ("The answer is 1.50.", "1.5"),
    ("It is -5 degrees.\nThe answer is -5.", "-5"),
    ("No digits here.", None),
]

GPQA_TABLE = [
    ("C", "C"), ("c", "C"), ("C. explanation", "C"), ("(c)", "C"),
    ("Answer: C\nExplanation", "C"),
    ("ANSWER: b", "B"),
    ("The answer is (B).", "B"),
    ("I considered C, but chose B.", None),
    ("A bird flies", None),
]


@pytest.mark.parametrize(("text", "parsed"), GSM8K_TABLE)
def test_gsm8k_extraction_table(capsys: pytest.CaptureFixture[str], text: str, parsed: str | None) -> None:
    code, out, _ = _cli(capsys, "parse", "--protocol", QWEN, "--task", "gsm8k", "--text", text)
    assert (code, out) == (0, {"parsed": parsed})


@pytest.mark.parametrize(("text", "parsed"), GPQA_TABLE)
def test_gpqa_extraction_table(capsys: pytest.CaptureFixture[str], text: str, parsed: str | None) -> None:
    code, out, _ = _cli(capsys, "parse", "--protocol", QWEN, "--task", "gpqa", "--text", text)
    assert (code, out) == (0, {"parsed": parsed})


@pytest.mark.parametrize(("text", "parsed"), [
    ("Answer: **D**", None),                    # markdown is not one of the published forms
    ("  B  ", "B"),                             # the reply is stripped first
    ("[d]", "D"), ("(A)", "A"), ("the answer: [C]", "C"), ("Answer : d", "D"),
    ("B!", "B"), ("B?", "B"), ("B;", "B"), ("B:", "B"), ("B,", "B"),
    ("B)", None), ("AB", None), ("E", None), ("Answer: E", None),
    ("The answer is B because", None),          # a letter must be followed by the end or . , : ; ! ? newline
])
def test_gpqa_extraction_edges(text: str, parsed: str | None) -> None:
    assert parse_reply(protocol_spec(QWEN, "gpqa"), text) == parsed


@pytest.mark.parametrize(("text", "parsed"), [
    ("The answer is 18.\nQuestion: next one, the answer is 7.", "7"),  # published: no continuation cut
    ("#### 1,234\nthen 99", "99"),               # last number after the last ####
    ("5 then #### 6 and 7", "7"),
    ("x #### no number", None),                  # nothing after the last #### -> unparsable
    ("\\boxed{42} and 1/2", "2"),                # no boxed or fraction handling in the published rule
    ("+3.0", "3"), ("-0.0", "0"), ("1,000,000", "1000000"), ("100", "100"), ("0.10", "0.1"),
])
def test_gsm8k_extraction_is_the_published_rule_even_where_crude(text: str, parsed: str | None) -> None:
    assert parse_reply(protocol_spec(QWEN, "gsm8k"), text) == parsed


def test_gsm8k_gold_uses_the_same_rule() -> None:
    spec = protocol_spec(QWEN, "gsm8k")
    for answer, gold in (("x\n#### 1,200", "1200"), ("#### -3", "-3"), ("no marker, 4 then 5.0", "5")):
        assert render_row(spec, normalize_row("gsm8k", 0, {"question": "q", "answer": answer})).gold == gold


# ----------------------------------------------------------------------------- sampling, engine, registry


def test_sampling_and_engine_are_the_published_ones() -> None:
    for task, max_tokens in (("gsm8k", 512), ("gpqa", 8)):
        spec = protocol_spec(QWEN, task)
        assert spec.sampling.vllm_kwargs() == {"temperature": 0.0, "max_tokens": max_tokens}
        assert spec.engine.vllm_kwargs() == {"enforce_eager": True, "max_model_len": 4096,
                                             "gpu_memory_utilization": 0.5}
        assert spec.chat_template == "model"


def test_default_protocol_is_qwen_chat_v1() -> None:
    assert DEFAULT_PROTOCOL == QWEN
    from runners.incase.accuracy.cli import build_parser

    assert build_parser().parse_args(["run", "--model", "m", "--dataset", "gsm8k", "--implementation", "baseline",
                                      "--out", "o"]).protocol == QWEN


def test_registry_is_frozen_and_pinned() -> None:
    got = {(n, t): spec.sha256() for n, specs in REGISTRY.items() for t, spec in specs.items()}
    assert got == PINNED_SHA256
    assert set(IMPLEMENTATIONS) == set(REGISTRY) == set(registered_names())
    with pytest.raises(TypeError):
        REGISTRY["mine-v1"] = REGISTRY[QWEN]  # type: ignore[index]
    with pytest.raises(Exception, match="frozen"):
        protocol_spec(QWEN, "gsm8k").system_message = "x"  # type: ignore[misc]
    for (name, task), spec in ((k, REGISTRY[k[0]][k[1]]) for k in PINNED_SHA256):
        assert (spec.name, spec.task) == (name, task)
        assert ProtocolSpec.model_validate_json(spec.model_dump_json()).sha256() == spec.sha256()


def test_protocol_hash_is_stable_across_processes() -> None:
    code = ("import json; from results_schema.records.protocols import REGISTRY; print(json.dumps({f'{n}/{t}': s.sha256() "
            "for n, v in REGISTRY.items() for t, s in v.items()}))")
    want = {f"{n}/{t}": h for (n, t), h in PINNED_SHA256.items()}
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             check=True, timeout=120).stdout
        assert json.loads(out) == want


def test_unknown_protocol_or_task_is_an_error() -> None:
    with pytest.raises(UnknownProtocolError, match="unknown accuracy protocol 'qwen-chat-v9'; registered: "
                                                   "boxed-chat-v1, boxed-chat-v2, chat-addition-v1, qwen-chat-v1"):
        protocol_spec("qwen-chat-v9", "gsm8k")
    with pytest.raises(UnknownProtocolError, match="unknown task 'mmlu'"):
        protocol_spec(QWEN, "mmlu")


@pytest.mark.parametrize(("argv", "message"), [
    (["render", "--protocol", "nope-v1", "--task", "gsm8k", "--row", "{}"], "unknown accuracy protocol 'nope-v1'"),
    (["parse", "--protocol", "nope-v1", "--task", "gsm8k", "--text", "1"], "unknown accuracy protocol 'nope-v1'"),
    (["render", "--task", "mmlu", "--row", "{}"], "unknown task 'mmlu'; expected one of gsm8k, gpqa"),
    (["parse", "--task", "mmlu", "--text", "A"], "unknown task 'mmlu'"),
    (["render", "--task", "gsm8k", "--row", "{not json"], "--row is not valid JSON"),
    (["render", "--task", "gsm8k", "--row", "[1, 2]"], "expected a JSON object, got list"),
    (["render", "--task", "gsm8k", "--row", '{"question": "q"}'], "missing or empty field 'answer'"),
    (["render", "--task", "gsm8k", "--row", '{"question": "q", "answer": "none"}'], "GSM8K answer has no number"),
    (["render", "--task", "gpqa", "--row", '{"Question": "q", "Correct Answer": "a"}'],
     "missing or empty field 'incorrect_answer_1'"),
    (["render", "--task", "gsm8k", "--row", '{"question": "q", "answer": NaN}'], "non-finite constant"),
])
def test_render_and_parse_refuse_bad_input_with_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                       message: str) -> None:
    code, _, err = _cli(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_commands_run_as_modules() -> None:
    ok = subprocess.run([sys.executable, "-m", "runners.incase.accuracy", "parse", "--task", "gpqa", "--text", "ANSWER: b"],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (ok.returncode, json.loads(ok.stdout)) == (0, {"parsed": "B"})
    bad = subprocess.run([sys.executable, "-m", "runners.incase.accuracy", "render", "--protocol", "x", "--task", "gpqa",
                          "--row", "{}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown accuracy protocol 'x'" in bad.stderr and "Traceback" not in bad.stderr


# ----------------------------------------------------------------------------- chat template


def test_render_uses_model_chat_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    r = render_row(protocol_spec(QWEN, "gsm8k"), normalize_row("gsm8k", 0, {"question": "How many?",
                                                                            "answer": "#### 1"}))
    text, ids = render_prompt(tok, r.messages())
    assert text.startswith("<|im_start|>system\n" + r.system) and text.endswith("<|im_start|>assistant\n")
    assert r.user in text
    assert tok.decode(ids) == text


def test_render_without_chat_template_is_an_error(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    tok.chat_template = None
    with pytest.raises(ChatTemplateMissing, match="has no chat_template"):
        render_prompt(tok, [{"role": "user", "content": "hi"}])


def test_rows_of_the_wrong_task_are_refused() -> None:
    gsm_row = normalize_row("gsm8k", 0, {"question": "q", "answer": "#### 1"})
    with pytest.raises(DatasetError, match="cannot be rendered for task gpqa"):
        render_row(protocol_spec(QWEN, "gpqa"), gsm_row)
