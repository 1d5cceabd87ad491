"""The in-process measurement loop (runners.incase.rounds.run_inprocess_rounds) and its record's rules.

Claims: measured rounds come in whole ABBA blocks, the offloader is switched to each round's mode before it runs, both
rounds of a pair run the same prompts, the copies of every round are recorded (none in mode A), the A/A designs keep
one mode; a pair whose rounds differ in tokens is recorded as such and the record refuses a wrong claim; a record
whose window ran a block past both minima, a mode A round that copied, or arms out of ABBA order are refused.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from results_schema.records.inprocess import InProcessRounds, check_in_process_rounds
from runners.incase.rounds import round_result, run_inprocess_rounds


class FakeOffloader:
    """``set_mode`` of a switchable offloader: in mode B every round issues 3 copies, none in mode A."""

    def __init__(self) -> None:
        self.in_place = False
        self.copies_issued = 0
        self.switches: list[str] = []

    def set_mode(self, mode: str) -> dict:
        self.switches.append(mode)
        self.in_place = mode == "A"
        return {"in_place": self.in_place, "copies_issued": self.copies_issued, "in_place_skips": 0}

    def round(self, seconds: float, calls: list[int], tokens_of=lambda g, off: [[g, g + 1], [7]]):
        def one_round(g: int):
            calls.append(g)
            if not self.in_place:
                self.copies_issued += 3
            return seconds, tokens_of(g, self), 8

        return one_round


def test_rounds_run_in_whole_abba_blocks_with_the_pairs_on_the_same_prompts():
    off, calls = FakeOffloader(), []
    rounds, ip = run_inprocess_rounds(off.round(0.5, calls), off.set_mode, design="abba", warmup_rounds=2,
                                      min_rounds=3, min_measured_s=2.5)
    assert len(rounds) == 8  # 4 rounds = 2.0 s < 2.5 s: a second block
    assert ip.arms == tuple("ABBAABBA") and ip.modes == ip.arms
    assert ip.copies == (0, 3, 3, 0, 0, 3, 3, 0)
    assert calls == [0, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # warm-up 0, 1; pair k on prompts 2 + k
    assert off.switches[:2] == ["B", "A"]
    assert ip.tokens_identical


@pytest.mark.parametrize(("design", "mode"), [("aa", "A"), ("bb", "B")])
def test_an_aa_design_keeps_one_mode_in_both_arms(design, mode):
    off = FakeOffloader()
    rounds, ip = run_inprocess_rounds(off.round(1.0, []), off.set_mode, design=design, warmup_rounds=1,
                                      min_rounds=4, min_measured_s=0.0)
    assert len(rounds) == 4 and ip.arms == tuple("ABBA") and set(ip.modes) == {mode}
    assert set(ip.copies) == ({0} if mode == "A" else {3})


def test_a_pair_whose_tokens_differ_is_recorded_and_a_false_claim_is_refused():
    off = FakeOffloader()

    def tokens(g, o):
        return [[g, 1 if o.in_place else 2]]

    rounds, ip = run_inprocess_rounds(off.round(1.0, [], tokens), off.set_mode, design="abba", warmup_rounds=0,
                                      min_rounds=4, min_measured_s=0.0)
    assert not ip.tokens_identical
    with pytest.raises(ValueError, match="tokens_identical is True"):
        check_in_process_rounds(ip.model_copy(update={"tokens_identical": True}), rounds, 4, 0.0)


def test_an_offloader_that_does_not_switch_stops_the_case():
    off = FakeOffloader()
    with pytest.raises(RuntimeError, match="reports in_place=False"):
        run_inprocess_rounds(off.round(1.0, []), lambda m: off.set_mode("B"), design="abba", warmup_rounds=0,
                             min_rounds=4, min_measured_s=0.0)


def test_the_record_refuses_a_window_a_block_too_long_copies_in_mode_a_and_arms_out_of_order():
    rounds = [round_result(i, 1.0, [[1]], 8) for i in range(8)]
    ip = InProcessRounds(design="abba", arms=tuple("ABBAABBA"), modes=tuple("ABBAABBA"), copies=(0, 1, 1, 0) * 2,
                         tokens_identical=True)
    check_in_process_rounds(ip, rounds, 4, 5.0)  # 4 rounds = 4 s < 5 s: the second block was needed
    with pytest.raises(ValueError, match="already reached"):
        check_in_process_rounds(ip, rounds, 4, 3.0)
    with pytest.raises(ValidationError, match="issued copies"):
        InProcessRounds(design="abba", arms=tuple("ABBA"), modes=tuple("ABBA"), copies=(1, 1, 1, 0),
                        tokens_identical=True)
    with pytest.raises(ValidationError, match="ABBA order"):
        InProcessRounds(design="aa", arms=tuple("ABAB"), modes=tuple("AAAA"), copies=(0, 0, 0, 0),
                        tokens_identical=True)
    with pytest.raises(ValidationError, match="multiple of 4"):
        InProcessRounds(design="bb", arms=tuple("AB"), modes=tuple("BB"), copies=(1, 1), tokens_identical=True)
