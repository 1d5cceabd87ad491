"""Paired accuracy where the baselines disagree: exact McNemar on the items, against the baselines' own floor.

Generated fixtures of 300 GSM8K-form items (seeded): two baseline runs that disagree on a few items, and
offload cases built from them. A case that loses a dozen items net fails with its exact McNemar p in
the message; one whose discordance with the baselines is symmetric and within their own passes.
"""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace
from typing import Any

import pytest

from analysis.accuracy.baselines import MCNEMAR_ALPHA, check_vs_floor, mcnemar_exact_p, paired_drop
from analysis.accuracy.checks import Checks
from results_schema.records.accuracy import AccuracyExample, BaselineAgreement

N = 300


def _row(i: int, correct: bool, variant: str = "") -> AccuracyExample:
    gold = str(i)
    parsed = gold if correct else str(i + 1)
    sha = hashlib.sha256(f"{i}:{parsed}:{variant}".encode()).hexdigest()
    return AccuracyExample(index=i, example_id=f"row-{i}", row={}, prompt_sha256="0" * 64, prompt_tokens=4,
                           gold=gold, option_order=None, parsed=parsed, correct=correct, unparsable=False,
                           output_tokens=3, output_token_sha256=sha, finish_reason="stop", output_text=parsed)


def _runs(seed: int = 0) -> tuple[list[AccuracyExample], list[AccuracyExample], list[int]]:
    """Baseline runs r0, r1 (60% correct) that differ on 4 items: 2 flip right->wrong, 2 wrong->right."""
    rng = random.Random(seed)
    right = [rng.random() < 0.6 for _ in range(N)]
    flips = sorted(rng.sample(range(N), 4))
    r0 = [_row(i, right[i]) for i in range(N)]
    r1 = [_row(i, (not right[i]) if i in flips else right[i], "r1" if i in flips else "") for i in range(N)]
    return r0, r1, flips


def _case(r0: list[AccuracyExample], lose: int, gain: int, avoid: list[int]) -> list[AccuracyExample]:
    """r0 with ``lose`` right items made wrong and ``gain`` wrong items made right (never the floor's items)."""
    rights = [x.index for x in r0 if x.correct and x.index not in avoid]
    wrongs = [x.index for x in r0 if not x.correct and x.index not in avoid]
    moved = set(rights[:lose]) | set(wrongs[:gain])
    return [_row(x.index, not x.correct, "case") if x.index in moved else x for x in r0]


def _judge(case: list[AccuracyExample], r0: list[AccuracyExample], r1: list[AccuracyExample],
           flips: list[int], max_drop: float = 0.0) -> tuple[Any, Any]:
    checks = Checks()
    acc = [sum(x.correct for x in r) / N for r in (r0, r1)]
    agree = BaselineAgreement(task="gsm8k", label="baseline", runs=2, agree=False,
                              examples_sha256=("a" * 64, "b" * 64), accuracies=tuple(acc),
                              differing_examples=tuple(flips), judged_by="noise_floor")
    result = SimpleNamespace(task="gsm8k", label="current_g2_n1", accuracy=sum(x.correct for x in case) / N)
    paired = check_vs_floor(checks, result, case, agree, [r0, r1], max_drop)  # type: ignore[arg-type]
    (check,) = checks.items
    return check, paired


def test_exact_mcnemar_p_is_the_binomial_tail() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(3, 3) == pytest.approx(42 / 64)  # P(X >= 3), X ~ Bin(6, 1/2)
    assert mcnemar_exact_p(14, 2) == pytest.approx(137 / 65536)  # C(16,14) + C(16,15) + C(16,16) = 137
    assert mcnemar_exact_p(0, 5) == 1.0 and mcnemar_exact_p(5, 0) == pytest.approx(1 / 32)
    with pytest.raises(ValueError, match="lost=-1"):
        mcnemar_exact_p(-1, 2)


def test_a_case_that_loses_a_dozen_items_net_fails_with_its_p() -> None:
    r0, r1, flips = _runs()
    case = _case(r0, lose=14, gain=2, avoid=flips)
    check, paired = _judge(case, r0, r1, flips)
    assert (paired.lost, paired.gained, paired.floor, paired.examples) == (14, 2, 4, N)
    assert paired.p == pytest.approx(137 / 65536) and paired.p < MCNEMAR_ALPHA
    assert check.status == "fail"
    assert "lost 14, gained 2 of 300 (p = 0.00209" in check.message and "a drop of 0.0400 net" in check.message


def test_a_symmetric_discordance_within_the_baselines_own_passes() -> None:
    r0, r1, flips = _runs()
    case = _case(r0, lose=2, gain=2, avoid=flips)  # 4 items moved, as many as the baselines' own floor
    check, paired = _judge(case, r0, r1, flips)
    assert (paired.lost, paired.gained) == (2, 2) and paired.p == pytest.approx(11 / 16)
    assert check.status == "pass" and "no significant drop" in check.message


def test_a_symmetric_discordance_beyond_the_floor_fails_on_tokens_not_on_accuracy() -> None:
    r0, r1, flips = _runs()
    case = _case(r0, lose=6, gain=6, avoid=flips)
    check, paired = _judge(case, r0, r1, flips)
    assert paired.p > MCNEMAR_ALPHA and check.status == "fail"
    assert "match no baseline run on 12 example(s)" in check.message and "vs floor 4" in check.message


def test_items_the_baselines_score_differently_are_left_out() -> None:
    r0, r1, flips = _runs()
    # the case is wrong on every floor item: none of it counts as lost
    case = [_row(x.index, False, "case") if x.index in flips else x for x in r0]
    paired = paired_drop(case, [r0, r1])
    assert paired.floor == 4 and paired.lost == 0 and paired.p == 1.0
