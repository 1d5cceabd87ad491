"""analysis.comparison.moments: numpy's median, mean and ddof-1 variance, bit for bit, on 1-299 values."""

from __future__ import annotations

import random

import numpy as np
import pytest

import math

from analysis.comparison.moments import mean, median, pairwise_sum, sample_variance


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e8])
def test_sums_means_and_variances_equal_numpys_bit_for_bit(scale: float) -> None:
    rng = random.Random(5)
    for n in range(1, 300):
        a = np.array([rng.gauss(0.0, 1.0) * scale + rng.choice([0.0, 5.0, -3.0]) for _ in range(n)])
        v = a.tolist()
        assert pairwise_sum(v) == float(a.sum()), n
        assert mean(v) == float(a.mean()), n
        if n >= 2:
            assert sample_variance(v) == float(a.var(ddof=1)), n


def test_a_left_to_right_sum_is_not_numpys_from_8_values() -> None:
    """The order matters (what makes the test above able to fail): summed left to right, some 8-value arrays differ
    from numpy's sum in the last bit."""
    rng = random.Random(7)
    differ = 0
    for _ in range(200):
        v = [rng.gauss(0.0, 1.0) * 1e3 + 5.0 for _ in range(8)]
        s = 0.0
        for x in v:
            s += x
        differ += s != float(np.array(v).sum())
    assert differ > 0


def test_the_median_equals_numpys_bit_for_bit_and_is_nan_with_a_nan() -> None:
    rng = random.Random(11)
    for n in range(1, 60):
        v = [rng.gauss(100.0, 7.0) for _ in range(n)]
        assert median(v) == float(np.median(v)), n
        assert median(iter(v)) == median(v)  # any iterable
    assert math.isnan(median([1.0, math.nan, 2.0])) and math.isnan(float(np.median([1.0, math.nan, 2.0])))


def test_no_values() -> None:
    assert pairwise_sum([]) == 0.0
    with pytest.raises(ZeroDivisionError):
        mean([])
    with pytest.raises(ZeroDivisionError):
        sample_variance([1.0])
