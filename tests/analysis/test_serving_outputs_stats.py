"""Outputs compared under load (``analysis.serving.outputs``) and serving statistics (``analysis.serving.stats``)."""

from __future__ import annotations

import numpy as np

from analysis.serving.outputs import OutputCheck, judge
from analysis.serving.stats import extreme_kind, floor_verdict, percentile_ci


def test_case_matching_agreeing_baselines_is_identical_and_one_differing_request_differs():
    base = [["a", "b", "c"], ["a", "b", "c"]]
    assert judge(["a", "b", "c"], base, is_baseline=False) == (3, (), (), "identical")
    assert judge(["a", "x", "c"], base, is_baseline=False) == (3, (1,), (), "differs")


def test_failed_requests_are_not_compared():
    assert judge([None, "b"], [["a", "b"]], is_baseline=False) == (1, (), (), "identical")
    assert judge(["a", "b"], [[None, "b"]], is_baseline=False) == (1, (), (), "identical")


def test_baselines_that_disagree_give_a_floor_and_a_case_is_judged_against_its_count():
    base = [["a", "b", "c", "d"], ["a", "B", "c", "d"]]  # request 1 differs between baselines: floor 1
    assert judge(["a", "Z", "c", "d"], base, is_baseline=False)[3] == "within_baseline_noise"
    assert judge(["a", "B", "c", "Z"], base, is_baseline=False)[3] == "within_baseline_noise"  # 1 miss <= floor 1
    got = judge(["Z", "b", "c", "Z"], base, is_baseline=False)
    assert got == (4, (0, 3), (1,), "differs")
    assert judge(["a", "b", "c", "d"], base, is_baseline=True)[3] == "within_baseline_noise"


def test_no_baseline_is_its_own_status():
    assert judge(["a"], [], is_baseline=False) == (0, (), (), "no_baseline")


def test_message_names_the_case_the_rate_its_position_and_the_requests():
    c = OutputCheck(phase="serving", label="f", implementation="current", repeat=0, rate_rps=None, position=1,
                    compared=96, mismatched=(70, 71), floor=(), baselines=2, status="differs")
    assert c.message() == ("serving/f-r0 at inf req/s (position 1 of its sweep): output tokens of 2 of 96 requests "
                           "differ from the baseline's for the same prompts: requests [70, 71]; the 2 baseline "
                           "processes agree")


def test_p99_of_fewer_than_100_requests_is_the_maximum():
    assert extreme_kind(99, 99) == "max" and extreme_kind(100, 99) == "percentile"
    assert extreme_kind(9, 90) == "max" and extreme_kind(10, 90) == "percentile"
    assert extreme_kind(1, 50) == "max" and extreme_kind(2, 50) == "percentile"
    assert extreme_kind(50, 1) == "min"


def test_percentile_interval_brackets_the_percentile_and_is_seeded():
    xs = list(np.linspace(0.01, 0.2, 200))
    lo, hi = percentile_ci(xs, 50)
    assert lo <= float(np.percentile(xs, 50)) <= hi and (lo, hi) == percentile_ci(xs, 50)


def test_slower_only_beyond_the_baselines_floor():
    base = [10.0, 10.2, 9.9, 10.1]
    assert floor_verdict([20.0, 20.5, 19.8, 20.2], base, 3.0)["verdict"] == "slower"
    # 8% slower, but the baselines themselves spread 12%: not a verdict
    got = floor_verdict([10.8, 10.9, 10.7, 10.8], base, 12.0)
    assert got["verdict"] in ("inconclusive", "equivalent") and got["margin_pct"] == 12.0
    assert floor_verdict([10.0, 10.1, 9.95, 10.05], base, 3.0)["verdict"] == "equivalent"
