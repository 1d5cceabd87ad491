"""The batch-gated negative-control fault: it counts decoding sequences from vLLM's attention metadata."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from offload.faults import DECODE_BATCH_K, FAULTS, _decode_batch_hook, decoding_sequences


def _meta(query_lens: list[int], seq_lens: list[int]) -> dict:
    qsl = torch.tensor([0, *torch.cumsum(torch.tensor(query_lens), 0).tolist()])
    return {"layers.0.attn": SimpleNamespace(query_start_loc=qsl, seq_lens=torch.tensor(seq_lens))}


def test_decodes_are_one_token_queries_after_a_context_and_a_long_prefill_is_not_one():
    k = DECODE_BATCH_K
    assert decoding_sequences(_meta([1] * k, [40] * k)) == k
    assert decoding_sequences(_meta([k], [k])) == 0  # one prefill of k tokens: same token count, no decode
    assert decoding_sequences(_meta([1, 1, 32], [33, 20, 32])) == 2
    assert decoding_sequences([_meta([1], [5])]) == 1 and decoding_sequences(None) is None


def test_the_fault_is_named_and_leaves_outputs_alone_outside_a_forward():
    assert "decode_batch_ge_72" in FAULTS
    hook = _decode_batch_hook("decode_batch_ge_72", 3, DECODE_BATCH_K)
    out = (torch.ones(2), torch.ones(2))
    assert hook(None, (), out) is None  # no vLLM forward context here: nothing corrupted
