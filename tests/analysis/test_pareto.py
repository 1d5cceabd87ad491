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


def test_knee_is_the_last_point_before_the_cost_jumps():
    cap = [0, 1, 2, 3, 4]
    thr = [100, 99, 98, 60, 20]
    mask = pareto_mask(cap, thr)
    assert knee_index(cap, thr, mask) == 2


LAYER = 466_115_584  # bytes per Qwen2.5-7B decoder layer (cases/README.md)


def _chord_knee(cap, thr):
    """The old rule (largest distance to the chord of the min-max normalised front), for contrast."""
    xs = [(c - min(cap)) / (max(cap) - min(cap)) for c in cap]
    ys = [(t - min(thr)) / (max(thr) - min(thr)) for t in thr]
    return max(range(len(cap)), key=lambda k: abs(1 - xs[k] - ys[k]))


def test_convex_fast_falling_7b_like_front_knee_is_before_the_cliff():
    """cases/README.md "The knee a person would pick": throughput roughly halves as the offloaded layers
    double (7B-like: 1, 2, 4, 7, 14 of 28 layers); the chord rule picks a tail point keeping about a
    fifth to a quarter of the throughput; the planner's knee is the last release before the cost jumps."""
    layers = [0, 1, 2, 4, 7, 14]
    thr = [100.0, 90.0, 52.0, 27.0, 17.0, 8.5]
    cap = [n * LAYER for n in layers]
    mask = pareto_mask(cap, thr)
    assert all(mask)
    chord = _chord_knee(cap, thr)
    assert layers[chord] == 4 and thr[chord] / thr[0] < 0.3  # the fault: deep in the tail
    k = knee_index(cap, thr, mask)
    assert layers[k] == 1 and thr[k] == 90.0  # 10 %/layer, then 38 %/layer: the cost jumps after (28,1)


def test_front_falling_fast_from_the_first_release_has_its_knee_at_the_baseline():
    layers = [0, 1, 2, 4, 7, 14]
    thr = [100.0 / (1 + n) for n in layers]  # the first layer already halves throughput
    cap = [n * LAYER for n in layers]
    assert knee_index(cap, thr, pareto_mask(cap, thr)) == 0


def test_concave_front_knee_agrees_with_the_chord():
    layers = [0, 1, 2, 4, 7, 14]
    thr = [100.0 * (1 - (n / 14) ** 2) for n in layers]  # cheap first, dearer and dearer
    cap = [n * LAYER for n in layers]
    k = knee_index(cap, thr, pareto_mask(cap, thr))
    assert layers[k] == 7 and thr[k] == 75.0
    assert k == _chord_knee(cap, thr)


def test_front_within_the_margin_has_its_knee_at_the_largest_release():
    cap = [0, 1, 2, 4, 7, 14]
    thr = [100.0, 99.0, 98.5, 98.0, 97.0, 96.0]  # 4 % in all: below the 5 % equivalence margin
    assert knee_index(cap, thr, pareto_mask(cap, thr)) == 5


def test_pareto_cli_prints_front_and_knee(tmp_path, capsys):
    import json

    from analysis.cli import main

    f = tmp_path / "front.csv"
    f.write_text("label,capacity_bytes,throughput_tok_s\n"
                 'baseline,0,100\n"(28,1)",466115584,90\n"(14,1)",932231168,52\n"(8,1)",1398346752,40\n'
                 '"(7,1)",1864462336,27\n"(4,1)",3262809088,17\n"(2,1)",6525618176,8.5\n')
    assert main(["pareto", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"front": ["baseline", "(28,1)", "(14,1)", "(8,1)", "(7,1)", "(4,1)", "(2,1)"], "knee": "(28,1)"}


def test_pareto_cli_drops_dominated_rows_and_rejects_bad_input(tmp_path, capsys):
    import json

    from analysis.cli import main

    f = tmp_path / "t.csv"
    f.write_text("label,capacity_bytes,throughput_tok_s,extra\na,0,10,x\nb,1,9,y\nc,1,8,z\nd,2,2,w\n")
    assert main(["pareto", str(f)]) == 0
    assert json.loads(capsys.readouterr().out) == {"front": ["a", "b", "d"], "knee": "b"}
    bad = tmp_path / "bad.csv"
    bad.write_text("label,bytes,throughput_tok_s\na,0,1\n")
    assert main(["pareto", str(bad)]) == 2
    assert "capacity_bytes" in capsys.readouterr().err
    bad.write_text("label,capacity_bytes,throughput_tok_s\na,0,fast\n")
    assert main(["pareto", str(bad)]) == 2
    assert "'fast' is not a number" in capsys.readouterr().err
    assert main(["pareto", str(tmp_path / "missing.csv")]) == 2


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
