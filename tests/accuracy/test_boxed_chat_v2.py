"""Protocol ``boxed-chat-v2`` reads a GPQA reply's final answer; ``boxed-chat-v1`` and ``qwen-chat-v1`` read the
same replies exactly as before.

``data/gpqa_replies.json``: one reply per line of the protocol's docstring (a boxed letter, "final answer: X"
after a discussion, a hedge between options, a rejected option followed by the chosen one, a correction at the
end, a bare letter, prose, an article, a continuation), each with ``why`` and the parse of every protocol. The
``boxed-chat-v2`` column is the reading the protocol states for that reply; the ``boxed-chat-v1`` and
``qwen-chat-v1`` columns pin the frozen protocols' readings (their misreadings included: v1 reads
``Answer: A or B, I am not sure`` as A and ``The answer is \\boxed{C}`` as unparsable).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results_schema.records.protocols import protocol_spec
from runners.incase.accuracy.cli import main
from runners.incase.accuracy.protocol import parse_reply
from tests.accuracy.test_protocol import PINNED_SHA256

CORPUS = json.loads((Path(__file__).parent / "data" / "gpqa_replies.json").read_text(encoding="utf-8"))
PROTOCOLS = ("boxed-chat-v2", "boxed-chat-v1", "qwen-chat-v1")


@pytest.mark.parametrize("row", CORPUS, ids=lambda r: r["why"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_protocol_reads_the_corpus_as_pinned(protocol: str, row: dict) -> None:
    assert parse_reply(protocol_spec(protocol, "gpqa"), row["reply"]) == row[protocol]


def test_the_corpus_covers_what_v2_reads_differently_from_v1() -> None:
    whys = {r["why"] for r in CORPUS}
    assert {"a boxed letter", "final answer after a discussion", "a hedge between options",
            "a rejected option, then the chosen one", "a correction at the end"} <= whys
    hedge = next(r for r in CORPUS if r["reply"] == "Answer: A or B, I am not sure")
    assert (hedge["boxed-chat-v1"], hedge["boxed-chat-v2"]) == ("A", None)
    boxed = next(r for r in CORPUS if r["reply"] == "The answer is \\boxed{C}")
    assert (boxed["boxed-chat-v1"], boxed["boxed-chat-v2"]) == (None, "C")


def test_v2_gpqa_has_room_for_a_sentence_and_v2_gsm8k_is_v1s_rule() -> None:
    v1, v2 = protocol_spec("boxed-chat-v1", "gpqa"), protocol_spec("boxed-chat-v2", "gpqa")
    assert (v1.sampling.max_tokens, v2.sampling.max_tokens) == (8, 64)
    assert v2.option_shuffle == v1.option_shuffle and v2.engine == v1.engine
    g1, g2 = protocol_spec("boxed-chat-v1", "gsm8k"), protocol_spec("boxed-chat-v2", "gsm8k")
    same = ("system_message", "user_template", "extraction_patterns", "sampling", "engine")
    assert all(getattr(g1, k) == getattr(g2, k) for k in same)
    for text in ("\\boxed{1/2}", "#### 1,234\nthen 99", "The answer is 18.\nQuestion: next, 7"):
        assert parse_reply(g2, text) == parse_reply(g1, text)
    assert ("boxed-chat-v2", "gpqa") in PINNED_SHA256


def test_the_parse_command_reads_a_boxed_letter_under_v2(capsys: pytest.CaptureFixture[str]) -> None:
    for protocol, want in (("boxed-chat-v2", "C"), ("boxed-chat-v1", None)):
        assert main(["parse", "--protocol", protocol, "--task", "gpqa", "--text", "The answer is \\boxed{C}"]) == 0
        assert json.loads(capsys.readouterr().out) == {"parsed": want}
