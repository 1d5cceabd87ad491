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


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

points = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(points)
def test_front_is_exactly_the_non_dominated_set(pts):
    cap = [float(c) for c, _ in pts]
    thr = [float(t) for _, t in pts]
    mask = pareto_mask(cap, thr)

    def dominates(i, j):
        return cap[i] >= cap[j] and thr[i] >= thr[j] and (cap[i] > cap[j] or thr[i] > thr[j])

    for j in range(len(pts)):
        assert mask[j] == (not any(dominates(i, j) for i in range(len(pts)) if i != j))
    assert any(mask)
    k = knee_index(cap, thr, mask)
    assert k is None or mask[k]
