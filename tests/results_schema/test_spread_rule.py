"""The spread rule (results_schema.rules.spread_rule): ``(max - min) / median`` in percent, none below two values or
at a median <= 0; the runner's choice and the analysis use this one function."""

from __future__ import annotations

import pytest

from results_schema.rules.spread_rule import spread_pct


@pytest.mark.parametrize(("xs", "want"), [
    ([100.0, 96.0, 98.0], 4 / 98 * 100),  # odd count: the middle value
    ([10.0, 12.0, 11.0, 20.0], 10 / 11.5 * 100),  # even count: the mean of the two middle values
    ([5.0, 5.0], 0.0),
])
def test_spread_is_range_over_median_in_percent(xs, want):
    assert spread_pct(xs) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("xs", [[], [3.0], [0.0, 0.0], [-1.0, 0.0, 1.0]])
def test_no_spread_below_two_values_or_at_a_median_not_above_zero(xs):
    assert spread_pct(xs) is None


def test_the_analysis_and_the_runner_use_this_rule():
    from analysis.comparison import noise_floor
    from runners.orchestration import choose_decide

    assert noise_floor.spread_pct is spread_pct and choose_decide.spread_pct is spread_pct
