"""The fake case processes' tokenizer (``tests.support.tokenizer.qwen2_tokenizer``, no torch import) is what
``transformers.AutoTokenizer`` loads for every test model: the same class, the same rendered prompts (text
and token ids, under both registered protocols, every fixture row) and the same prompt token counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_schema.records.protocols import protocol_spec
from runners.incase.accuracy.case import auto_tokenizer
from runners.incase.accuracy.datasets import load_dataset
from runners.incase.accuracy.protocol import render_prompt, render_row
from tests.support.tokenizer import qwen2_tokenizer

REPO = Path(__file__).resolve().parents[2]
ANSWERING = REPO / "eval_models" / "tiny-answering-qwen2-l4-h128"
MANIFEST = REPO / "eval_datasets" / "fixtures" / "manifest.json"


@pytest.mark.heavy  # imports torch (AutoTokenizer)
@pytest.mark.parametrize("which", ["tiny", "answering"])
def test_the_stand_in_renders_every_fixture_prompt_as_auto_tokenizer_does(which: str, tiny_model_dir: Path) -> None:
    model = str(tiny_model_dir if which == "tiny" else ANSWERING)
    auto, direct = auto_tokenizer(model), qwen2_tokenizer(model)
    assert type(direct) is type(auto)
    rendered = 0
    for protocol in ("qwen-chat-v1", "boxed-chat-v1"):
        for task in ("gsm8k", "gpqa"):
            _, _, rows = load_dataset(MANIFEST, task)
            spec = protocol_spec(protocol, task)
            for row in rows:
                messages = render_row(spec, row).messages()
                assert render_prompt(direct, messages) == render_prompt(auto, messages)
                rendered += 1
    assert rendered >= 8
    text = "The quick brown fox, 12345 tokens; <|im_end|> and ünïcödé."
    assert direct(text, add_special_tokens=False).input_ids == auto(text, add_special_tokens=False).input_ids


def test_a_model_of_another_type_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="model_type 'llama'; qwen2_tokenizer loads only 'qwen2' models"):
        qwen2_tokenizer(tmp_path)
