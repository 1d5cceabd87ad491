"""gpu_compare's plan and verdicts (no engine): alternating repeats and the interval rule."""

from __future__ import annotations

from offload_tools import gpu_compare as gc


def test_plan_alternates_which_implementation_goes_first_per_point_and_repeat():
    plan = gc.build_plan([(28, 1), (4, 1)], 2, baseline=True)
    assert plan == [("baseline", 0, 0, 0), ("current", 28, 1, 0), ("official", 28, 1, 0),
                    ("official", 4, 1, 0), ("current", 4, 1, 0),
                    ("baseline", 0, 0, 1), ("official", 28, 1, 1), ("current", 28, 1, 1),
                    ("current", 4, 1, 1), ("official", 4, 1, 1)]


def _recs(cur, off, digest="d"):
    recs = [{"implementation": "baseline", "token_digest": "d", "group_size": 0, "num_in_group": 0}]
    recs += [{"implementation": "current", "group_size": 4, "num_in_group": 1, "throughput_tok_s": t,
              "token_digest": digest} for t in cur]
    recs += [{"implementation": "official", "group_size": 4, "num_in_group": 1, "throughput_tok_s": t,
              "token_digest": "d"} for t in off]
    return recs


def test_one_sample_per_side_is_inconclusive_not_ok_even_with_a_large_ratio():
    (row,) = gc.summarize(_recs([200.0], [100.0]))
    assert row["verdict"] == "inconclusive" and row["ok"] is False and row["ratio"] == 2.0


def test_overlapping_samples_are_equivalent_and_ok():
    (row,) = gc.summarize(_recs([100.0, 103.0, 98.0], [101.0, 99.0, 102.0]))
    assert row["verdict"] == "equivalent" and row["ok"] is True
    assert row["ci_low"] < 0 < row["ci_high"]


def test_separated_samples_decide_faster_or_slower():
    assert gc.summarize(_recs([120.0, 121.0, 122.0], [100.0, 101.0, 102.0]))[0]["verdict"] == "faster"
    (row,) = gc.summarize(_recs([90.0, 91.0, 92.0], [100.0, 101.0, 102.0]))
    assert row["verdict"] == "slower" and row["ok"] is False


def test_current_tokens_differing_fail_the_point():
    (row,) = gc.summarize(_recs([120.0, 121.0], [100.0, 101.0], digest="other"))
    assert row["verdict"] == "current_tokens_differ" and row["ok"] is False
