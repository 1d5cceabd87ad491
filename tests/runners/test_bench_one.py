"""bench_one's pure parts: exact-length prompts, per-round freshness, digests, argument validation."""

from __future__ import annotations

import sys

import pytest

from runners.bench_one import digest_ids, main, make_prompt_ids

VOCAB = list(range(10, 300))


def test_prompts_have_exact_length_and_are_deterministic() -> None:
    a = make_prompt_ids(0, 1, 4, 32, VOCAB)
    assert len(a) == 4 and all(len(p) == 32 for p in a)
    assert a == make_prompt_ids(0, 1, 4, 32, VOCAB)
    assert all(t in set(VOCAB) for p in a for t in p)


def test_each_round_gets_fresh_prompts() -> None:
    rounds = [make_prompt_ids(0, r, 4, 32, VOCAB) for r in range(4)]
    firsts = {tuple(r[0][:8]) for r in rounds}
    assert len(firsts) == 4  # no shared prefix -> no prefix-cache reuse across rounds
    assert make_prompt_ids(1, 0, 4, 32, VOCAB) != rounds[0]


def test_digest_is_order_and_boundary_sensitive() -> None:
    assert digest_ids([[1, 2], [3]]) != digest_ids([[3], [1, 2]])
    assert digest_ids([[1, 2], [3]]) != digest_ids([[1], [2, 3]])
    assert digest_ids([[1, 2], [3]]) == digest_ids([[1, 2], [3]])


BASE = ["--phase", "p", "--label", "x", "--repeat", "0", "--runtime", "cpu", "--model", "/nonexistent",
        "--num-prompts", "2", "--input-len", "8", "--max-tokens", "4", "--max-model-len", "64", "--record", "/tmp/r.json"]


@pytest.mark.parametrize("extra, message", [
    (["--implementation", "current", "--offload-group-size", "2", "--offload-num-in-group", "3"],
     "offload_num_in_group (3) must be <= offload_group_size (2)"),
    (["--implementation", "current", "--offload-group-size", "4", "--offload-num-in-group", "1",
      "--offload-backend", "magic"], "offload_backend ('magic')"),
    (["--implementation", "baseline", "--offload-group-size", "4", "--offload-num-in-group", "1"],
     "implementation baseline needs offload_group_size 0"),
    (["--implementation", "current"], "needs offload_group_size > 0"),
])
def test_invalid_arguments_exit_2_before_vllm_is_imported(extra, message, capsys) -> None:
    before = "vllm" in sys.modules
    assert main(BASE + extra) == 2
    assert message in capsys.readouterr().err
    assert ("vllm" in sys.modules) == before
