"""The accuracy identity rule, live (the runner's per-case status) and offline (the verifier's judgement)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from results_schema.rules.accuracy_rule import baseline_judgement
from runners.outcome.live_checks import accuracy_output_check


@pytest.mark.parametrize(("shas", "judged"), [
    (["a"], "single_baseline"), (["a", "a"], "identity"), (["a", "a", "a"], "identity"), (["a", "b"], "noise_floor"),
    (["a", "a", "b"], "noise_floor"),
])
def test_baseline_judgement(shas: list[str], judged: str) -> None:
    assert baseline_judgement(shas) == judged


def test_baseline_judgement_needs_a_baseline() -> None:
    with pytest.raises(ValueError, match="at least one baseline run"):
        baseline_judgement([])


def _line(label: str, sha: str, repeat: int = 0) -> SimpleNamespace:
    impl = "baseline" if label == "baseline" else "current"
    return SimpleNamespace(phase="acc", label=label, implementation=impl, repeat=repeat,
                           results=[SimpleNamespace(task="gsm8k", examples_sha256=sha)])


def test_the_live_status_follows_the_rule_over_the_baselines_so_far() -> None:
    state = SimpleNamespace(accuracy_baseline_digests={}, token_mismatches=[])
    assert accuracy_output_check(state, _line("current_g4_n1", "x")) is None  # no baseline yet
    assert accuracy_output_check(state, _line("baseline", "a")) is None
    assert accuracy_output_check(state, _line("current_g4_n1", "a")) == "outputs identical to baseline"
    status = accuracy_output_check(state, _line("current_g2_n1", "z"))
    assert status is not None and status.startswith("OUTPUTS DIFFER from the acc baseline on gsm8k")
    assert state.token_mismatches == [f"acc/current_g2_n1-r0: {status}"]
    assert accuracy_output_check(state, _line("baseline", "a", 1)) == "outputs identical to the first baseline run"
    noisy = accuracy_output_check(state, _line("baseline", "b", 2))
    assert noisy is not None and noisy.startswith("BASELINE NOT DETERMINISTIC on this runtime")
    # the baselines now differ: the verifier judges against their floor, so live is no mismatch either
    floor = accuracy_output_check(state, _line("current_g1_n1", "z"))
    assert floor is not None and floor.startswith("judged against the baseline-vs-baseline floor on gsm8k")
    assert len(state.token_mismatches) == 1
