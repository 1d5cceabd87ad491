"""Protocol qwen-chat-v1: sampling settings, chat template, GPQA option shuffle."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from runners.accuracy.datasets import GPQARow, GSM8KRow
from runners.accuracy.protocol import (
    ChatTemplateMissing,
    build_messages,
    protocol_spec,
    render_prompt,
    shuffle_order,
)


def test_gsm8k_protocol_is_greedy_seed0_512_tokens() -> None:
    spec = protocol_spec("gsm8k")
    assert (spec.name, spec.sampling.temperature, spec.sampling.seed, spec.sampling.max_tokens) == (
        "qwen-chat-v1", 0.0, 0, 512)
    assert spec.shuffle_seed is None
    assert "\\boxed{}" in spec.system_message


def test_gpqa_protocol_is_greedy_seed0_8_tokens_with_shuffle_seed() -> None:
    spec = protocol_spec("gpqa")
    assert (spec.sampling.temperature, spec.sampling.seed, spec.sampling.max_tokens, spec.shuffle_seed) == (
        0.0, 0, 8, 0)
    assert spec.system_message != protocol_spec("gsm8k").system_message


def test_protocol_hash_changes_with_any_setting() -> None:
    spec = protocol_spec("gsm8k")
    changed = spec.model_copy(update={"sampling": spec.sampling.model_copy(update={"temperature": 0.7})})
    assert spec.sha256() == protocol_spec("gsm8k").sha256()
    assert changed.sha256() != spec.sha256()


def test_unknown_task_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown task 'mmlu'"):
        protocol_spec("mmlu")


def test_shuffle_is_a_pure_function_of_seed_and_question_and_leaves_global_random_alone() -> None:
    random.seed(1234)
    state = random.getstate()
    a = shuffle_order(0, "What is X?")
    assert random.getstate() == state
    random.seed(999)
    assert shuffle_order(0, "What is X?") == a
    assert sorted(a) == [0, 1, 2, 3]
    orders = {shuffle_order(s, "What is X?") for s in range(40)}
    assert len(orders) > 5  # the seed matters


def test_gold_letter_is_balanced_over_198_questions() -> None:
    golds = []
    for i in range(198):
        row = GPQARow(index=i, example_id=f"r{i}", question=f"Synthetic question number {i} about physics?",
                      options=("right", "w1", "w2", "w3"))
        _, gold, order = build_messages(protocol_spec("gpqa"), row)
        assert order is not None and "ABCD"[order.index(0)] == gold
        golds.append(gold)
    shares = {k: v / 198 for k, v in Counter(golds).items()}
    assert set(shares) == set("ABCD")
    assert all(0.15 <= s <= 0.35 for s in shares.values()), shares


def test_gpqa_user_turn_shows_every_option_once_under_its_letter() -> None:
    row = GPQARow(index=0, example_id="r0", question="Q?", options=("right", "w1", "w2", "w3"))
    messages, gold, order = build_messages(protocol_spec("gpqa"), row)
    user = messages[1]["content"]
    assert f"{gold}) right" in user
    for opt in ("right", "w1", "w2", "w3"):
        assert user.count(opt) == 1
    assert messages[0] == {"role": "system", "content": protocol_spec("gpqa").system_message}


def test_gsm8k_messages_carry_question_and_gold() -> None:
    row = GSM8KRow(index=0, example_id="row-0", question="How many?", gold="12")
    messages, gold, order = build_messages(protocol_spec("gsm8k"), row)
    assert (messages[1]["content"], gold, order) == ("How many?", "12", None)


def test_render_uses_model_chat_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    messages, _, _ = build_messages(protocol_spec("gsm8k"), GSM8KRow(0, "row-0", "How many?", "1"))
    text, ids = render_prompt(tok, messages)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert tok.decode(ids) == text


def test_render_without_chat_template_is_an_error(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    tok.chat_template = None
    with pytest.raises(ChatTemplateMissing, match="has no chat_template"):
        render_prompt(tok, [{"role": "user", "content": "hi"}])
