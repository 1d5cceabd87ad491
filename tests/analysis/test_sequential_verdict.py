"""The verdict of record of a sequential phase (``analysis.comparison.sequential_verdict``) on synthetic processes."""

from __future__ import annotations

import math

import pandas as pd

from analysis.comparison.sequential import SequentialDesign, look_verdict
from analysis.comparison.sequential_verdict import sequential_verdicts
from results_schema.records.sequential import LabelLook, LookDecision

DESIGN = SequentialDesign((3, 4, 6))
BASE = [100.0, 101.0, 99.5, 100.5, 99.0, 100.2]


def _runs(values: dict[str, list[float | None]]) -> pd.DataFrame:
    rows = [{"phase": "p", "label": lb, "repeat": r, "throughput_tok_s": v}
            for lb, vs in values.items() for r, v in enumerate(vs) if v is not None]
    return pd.DataFrame(rows)


def _line(look: int, labels: list[tuple[str, str]]) -> LookDecision:
    """A look line as the runner writes it (its verdicts are what this module must not trust)."""
    k = look - 1
    return LookDecision(phase="p", look=look, blocks=DESIGN.looks[k], looks=DESIGN.looks, target_pct=5.0, alpha=0.05,
                        spending="pocock", look_alpha=DESIGN.look_alphas()[k], baseline="baseline",
                        labels=tuple(LabelLook(label=lb, verdict=v, processes=0, reference_processes=0,
                                               ci_low_pct=None, ci_high_pct=None, center_pct=None, method="",
                                               reason="") for lb, v in labels),
                        next_blocks=0)


def test_a_label_open_when_the_run_stopped_is_inconclusive_at_its_last_look_not_the_fixed_rule() -> None:
    noisy = [90.0, 104.0, 85.0, 97.0, 88.0, 95.0]
    runs = _runs({"baseline": BASE, "x": noisy})
    got = sequential_verdicts([_line(1, [("x", "open")])], runs)[("p", "x")]
    want = look_verdict(noisy[:3], BASE[:3], DESIGN, 0)
    assert want.verdict == "open"
    assert got.verdict == "inconclusive" and "stopped early" in got.note
    assert (got.ci_low_pct, got.ci_high_pct) == (want.decision.ci_low_pct, want.decision.ci_high_pct)
    assert got.ci_name == "CI96.9% at look 1 (3 vs 3 processes)" and got.blocks == 3


def test_recorded_verdicts_are_recomputed_and_a_failed_process_is_skipped_as_the_runner_does() -> None:
    slow = [50.0, None, 51.0, 49.0]  # block 2's process failed: look 1 has 2 vs 3 processes
    runs = _runs({"baseline": BASE, "x": slow})
    got = sequential_verdicts([_line(1, [("x", "equivalent")])], runs)[("p", "x")]  # a wrong recorded verdict
    want = look_verdict([50.0, 51.0], BASE[:3], DESIGN, 0)
    assert (got.verdict, want.verdict) == ("slower", "slower")
    assert got.ci_name == "CI96.9% at look 1 (2 vs 3 processes)" and got.processes == (2, 3)
    assert math.isclose(got.ci_high_pct, want.decision.ci_high_pct)


def test_a_label_without_a_process_on_a_side_has_no_interval() -> None:
    runs = _runs({"baseline": BASE, "x": [None, None, None]})
    got = sequential_verdicts([_line(1, [("x", "open")])], runs)[("p", "x")]
    assert got.verdict == "inconclusive" and got.ci_name == "no interval" and math.isnan(got.ci_low_pct)
