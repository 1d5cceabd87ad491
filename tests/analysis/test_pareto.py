"""Claims about the Pareto front (strict dominance) and the knee."""

from __future__ import annotations

import math

from analysis.pareto import knee_index, pareto_mask


def test_strictly_dominated_points_leave_the_front():
    cap = [0, 1, 2, 2, 3]
    thr = [10, 9, 7, 8, 5]
    assert pareto_mask(cap, thr) == [True, True, False, True, True]


def test_equal_points_both_stay_on_the_front():
    assert pareto_mask([1, 1], [5, 5]) == [True, True]


def test_nan_is_never_on_the_front():
    assert pareto_mask([1, 2], [math.nan, 3]) == [False, True]


def test_knee_is_the_point_farthest_from_the_chord():
    cap = [0, 1, 2, 3, 4]
    thr = [100, 99, 98, 60, 20]
    mask = pareto_mask(cap, thr)
    assert knee_index(cap, thr, mask) == 2


def test_no_knee_with_fewer_than_three_front_points():
    assert knee_index([0, 1], [2, 1], [True, True]) is None
