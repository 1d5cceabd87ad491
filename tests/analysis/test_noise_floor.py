"""Claims about the run's noise floor (baseline vs baseline) and the verdicts flagged below it."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.comparison.noise_floor import below_floor, floor_lines, noise_floors, verdict_margin_pct


def _runs(thr, digests):
    rows = [{"phase": "same_runtime", "implementation": "baseline", "label": "baseline", "repeat": i,
             "throughput_tok_s": t, "token_digest": d} for i, (t, d) in enumerate(zip(thr, digests, strict=True))]
    rows.append({"phase": "same_runtime", "implementation": "current", "label": "current_g8_n1", "repeat": 0,
                 "throughput_tok_s": 90.0, "token_digest": "a"})
    return pd.DataFrame(rows)


def test_spread_is_max_minus_min_over_median_of_the_baseline_processes():
    (f,) = noise_floors(_runs([100.0, 96.0], ["a", "a"]))
    assert f["processes"] == 2 and f["throughputs_tok_s"] == [100.0, 96.0]
    assert f["spread_pct"] == pytest.approx(4 / 98 * 100) and f["tokens_identical"] is True
    (g,) = noise_floors(_runs([100.0, 96.0], ["a", "b"]))
    assert g["tokens_identical"] is False
    (h,) = noise_floors(_runs([100.0], ["a"]))
    assert h["spread_pct"] is None and h["tokens_identical"] is None


def test_verdict_margin_is_the_distance_of_the_interval_from_its_boundary():
    assert verdict_margin_pct("slower", 0.85, 0.93, 5.0) == pytest.approx(7.0)
    assert verdict_margin_pct("faster", 1.02, 1.10, 5.0) == pytest.approx(2.0)
    assert verdict_margin_pct("equivalent", 0.98, 1.03, 5.0) == pytest.approx(2.0)
    assert verdict_margin_pct("inconclusive", 0.9, 1.1, 5.0) is None
    assert verdict_margin_pct("slower", None, None, 5.0) is None


def test_a_verdict_holding_by_less_than_the_spread_is_flagged_in_the_printed_lines():
    floors = noise_floors(_runs([100.0, 96.0], ["a", "a"]))  # spread 4.1%
    decision = [{"phase": "same_runtime", "label": "current_g8_n1", "verdict": "slower",
                 "retention_ci_low": 0.90, "retention_ci_high": 0.98},  # slower by 2%: below the floor
                {"phase": "same_runtime", "label": "current_g4_n1", "verdict": "slower",
                 "retention_ci_low": 0.80, "retention_ci_high": 0.88}]  # by 12%: not flagged
    assert list(below_floor(decision, floors, 5.0)) == [("same_runtime", "current_g8_n1")]
    lines = floor_lines(floors, decision, 5.0)
    assert lines[0] == ("noise floor same_runtime: 2 baseline processes 100.0, 96.0 tok/s, spread 4.1% "
                        "(max - min over median), tokens identical")
    assert any(ln.startswith("below the noise floor: same_runtime/current_g8_n1 slower by 2.0%") for ln in lines)
    assert not any("current_g4_n1" in ln for ln in lines)
    one = floor_lines(noise_floors(_runs([100.0], ["a"])), decision, 5.0)
    assert "no baseline-vs-baseline spread measured" in one[0]
