"""Claims about the Pareto front (strict dominance) and the knee."""

from __future__ import annotations

import math

import pytest

from analysis.comparison.pareto import knee_index, pareto_mask


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


def test_front_falling_fast_from_the_first_release_has_its_knee_at_the_first_release():
    layers = [0, 1, 2, 4, 7, 14]
    thr = [100.0 / (1 + n) for n in layers]  # the first layer already halves throughput
    cap = [n * LAYER for n in layers]
    assert layers[knee_index(cap, thr, pareto_mask(cap, thr))] == 1  # never the baseline: a knee releases memory


def test_knee_is_the_first_release_when_the_second_step_costs_three_times_more_per_byte():
    """The published front's shape: a cheap first step, a second about 3x dearer per byte, then a flat tail
    of nearly-zero-throughput points that drags the front's average cost per byte down."""
    layers = [0, 1, 2, 4, 7, 14, 28]
    thr = [100.0, 96.0, 84.0, 40.0, 5.0, 3.0, 2.0]
    cap = [n * LAYER for n in layers]
    assert layers[knee_index(cap, thr, pareto_mask(cap, thr))] == 1


def test_linear_front_has_its_knee_at_the_largest_release():
    cap = [0, 1, 2, 3, 4]
    thr = [100.0, 90.0, 80.0, 70.0, 60.0]  # the same cost per byte at every step: no jump
    assert knee_index(cap, thr, pareto_mask(cap, thr)) == 4


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


FRONTS = {  # name -> (csv rows label:layers:tok/s, expected knee): the four fronts a planner reads
    "second_step_three_times_dearer": ("base:0:100 g8n1:1:95 g4n1:2:80 g2n1:4:40 g4n3:6:30", "g8n1"),
    "concave": ("base:0:100 a:1:99.49 b:2:97.96 c:4:91.84 d:7:75 e:14:0", "d"),
    "linear": ("base:0:100 a:1:90 b:2:80 c:3:70 d:4:60", "d"),
    "falls_fast_from_the_first_step": ("base:0:100 a:1:50 b:2:33.3 c:4:20 d:7:12.5", "a"),
}


@pytest.mark.parametrize("name", sorted(FRONTS))
def test_pareto_cli_knee_of_the_four_planner_fronts_is_never_the_baseline(name, tmp_path, capsys):
    import json

    from analysis.cli import main

    rows, knee = FRONTS[name]
    f = tmp_path / f"{name}.csv"
    f.write_text("label,capacity_bytes,throughput_tok_s\n" + "".join(
        f"{lb},{int(n) * LAYER},{t}\n" for lb, n, t in (r.split(":") for r in rows.split())))
    assert main(["pareto", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["knee"] == knee and out["knee"] != "base"


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
    assert k is None or cap[k] > min(c for c, m in zip(cap, mask, strict=True) if m)  # a knee releases memory
