"""Prompt construction of the published ``seed_text`` mode, with the tiny model's real tokenizer."""

from __future__ import annotations

import pytest

from runners.incase.prompts import DEFAULT_SEED_TEXT, make_prompt_ids, seed_text_prompt, seed_text_prompts


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.mark.parametrize("input_len", [1, 7, 32, 128])
def test_seed_text_prompt_reencodes_to_exactly_input_len(tokenizer, input_len):
    text = seed_text_prompt(tokenizer, DEFAULT_SEED_TEXT, input_len)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == input_len
    full = tokenizer.encode(DEFAULT_SEED_TEXT * 50, add_special_tokens=False)
    assert ids == full[:input_len]  # a prefix of the repeated seed text, not something else


def test_seed_text_repeats_the_text_when_shorter_than_input_len(tokenizer):
    per_copy = len(tokenizer.encode("abc. ", add_special_tokens=False))
    text = seed_text_prompt(tokenizer, "abc. ", per_copy * 3 + 1)
    assert text.startswith("abc. abc. abc. ")


def test_seed_text_prompts_are_identical_across_prompts(tokenizer):
    prompts = seed_text_prompts(tokenizer, DEFAULT_SEED_TEXT, 8, 128)
    assert len(prompts) == 8 and len(set(prompts)) == 1


def test_seed_text_rejects_empty_text_and_bad_length(tokenizer):
    with pytest.raises(ValueError, match="prompt_seed_text"):
        seed_text_prompt(tokenizer, "", 8)
    with pytest.raises(ValueError, match="input_len"):
        seed_text_prompt(tokenizer, DEFAULT_SEED_TEXT, 0)


def test_seed_text_rejects_a_cut_that_does_not_round_trip():
    class Toy:  # decode adds a trailing space: the re-encoding is one token longer
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(chr(i) for i in ids) + " "

    with pytest.raises(ValueError, match="re-encodes to 4 tokens"):
        seed_text_prompt(Toy(), "abc", 3)


def test_random_ids_vary_per_round_and_have_exact_length():
    a = make_prompt_ids(0, 0, 4, 16, list(range(10, 100)))
    b = make_prompt_ids(0, 1, 4, 16, list(range(10, 100)))
    assert a != b and all(len(p) == 16 for p in a + b)
    assert a == make_prompt_ids(0, 0, 4, 16, list(range(10, 100)))
