"""Output token ids read from the benchmark's stream; the rate order of a repeat."""

from __future__ import annotations

import hashlib
import json

import pytest

from runners.incase.serving.token_ids import parse_stream, token_ids_sha256
from runners.launching.serving_case import rotated


def _sse(*chunks: dict | str) -> bytes:
    return b"".join(("data: " + (c if isinstance(c, str) else json.dumps(c)) + "\n\n").encode() for c in chunks)


def test_token_ids_of_every_content_chunk_in_order_usage_and_done_ignored():
    raw = _sse({"choices": [{"text": "a", "token_ids": [5]}]}, {"choices": [{"text": "bc", "token_ids": [6, 7]}]},
               {"choices": [], "usage": {"completion_tokens": 3}}, "[DONE]")
    assert parse_stream(raw) == [5, 6, 7]
    assert token_ids_sha256([5, 6, 7]) == hashlib.sha256(b"5,6,7").hexdigest()


def test_a_chunk_without_token_ids_is_refused():
    with pytest.raises(ValueError, match="return_token_ids"):
        parse_stream(_sse({"choices": [{"text": "a"}]}))


def test_rates_rotate_with_the_repeat():
    r = (1.0, 4.0, None)
    assert rotated(r, 0) == r and rotated(r, 1) == (4.0, None, 1.0) and rotated(r, 3) == r
