"""Published analyzer view: three capacity axes, selectable Pareto axis, KV-over-released flag, columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.aggregate import aggregate
from analysis.load import load_run
from analysis.published import PUBLISHED_COLUMNS, dominated_by, main, published_summary
from results_schema.units import GIB

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run"


@pytest.fixture()
def data():
    d = load_run(REAL)
    kv = {"baseline": 10.0, "current_g8_n1": 10.434, "current_g4_n1": 10.0}  # (8,1): 1 slot, releases 0 bytes
    d.runs["kv_cache_gib"] = d.runs["label"].map(kv).astype("float64")
    return d


def test_three_capacity_axes_and_the_kv_over_released_flag(data):
    t = published_summary(data).set_index("label")
    assert list(published_summary(data).columns) == PUBLISHED_COLUMNS
    g8 = t.loc["current_g8_n1"]
    assert (g8["offloaded_bytes"], g8["released_bytes"]) == (295936, 0)
    assert g8["kv_gain_bytes"] == pytest.approx(0.434 * GIB)
    assert bool(g8["kv_gain_exceeds_released"]) is True
    assert bool(t.loc["current_g4_n1", "kv_gain_exceeds_released"]) is False  # gain 0 <= released 295936
    assert t["kv_gain_exceeds_released"].isna()["current_g4_n2"]  # no KV measured: unknown, not False


def test_pareto_axis_is_selectable_and_dominated_by_follows_it(data):
    off = published_summary(data, capacity_axis="offloaded_bytes").set_index("label")
    rel = published_summary(data, capacity_axis="released_bytes").set_index("label")
    assert set(off["pareto_axis"]) == {"offloaded_bytes"} and set(rel["pareto_axis"]) == {"released_bytes"}
    # released axis: (8,1) releases 0 bytes at lower throughput -> the baseline dominates it
    assert "baseline" in rel.loc["current_g8_n1", "dominated_by"].split(",")
    # offloaded axis: (8,1) offloads one layer, more than the baseline's 0 -> only heavier, faster points dominate
    assert off.loc["current_g8_n1", "dominated_by"] == "current_g2_n1,current_g4_n1,current_g4_n2"
    assert list(aggregate(data, capacity_axis="offloaded_bytes")["pareto"]) == list(off["pareto"])
    with pytest.raises(ValueError, match="capacity_axis 'bytes' must be one of"):
        aggregate(data, capacity_axis="bytes")


def test_published_columns(data):
    t = published_summary(data).set_index("label")
    runs = data.runs.set_index("label")
    rounds = data.rounds
    for label in t.index:
        thr = runs.loc[[label], "throughput_tok_s"]
        assert t.loc[label, "runs_tok_s"] == ",".join(f"{x:.6g}" for x in thr)
        assert t.loc[label, "processes"] == 1 and t.loc[label, "published_stdev_tok_s"] == 0.0
        r = rounds[rounds["label"] == label]
        assert t.loc[label, "pooled_round_throughput_mean_tok_s"] == pytest.approx(r["throughput_tok_s"].mean())
        assert t.loc[label, "round_latency_p50_median_s"] == pytest.approx(float(np.percentile(r["elapsed_s"], 50)))
    base = t.loc["baseline", "pooled_round_throughput_mean_tok_s"]
    g4 = t.loc["current_g4_n1", "pooled_round_throughput_mean_tok_s"]
    assert t.loc["current_g4_n1", "pooled_change_pct"] == pytest.approx((g4 / base - 1) * 100)
    assert np.isnan(aggregate(data).set_index("label").loc["baseline", "throughput_stdev_tok_s"])  # n=1: no spread


def test_dominated_by_ignores_nan():
    assert dominated_by([0, 1, float("nan")], [2, 1, 5], ["a", "b", "c"]) == [[], [], []]
    assert dominated_by([0, 1], [1, 2], ["a", "b"]) == [["b"], []]
    # ties: >= both and > one dominates (equal throughput, more capacity; equal capacity, more throughput)
    assert dominated_by([0, 1], [1, 1], ["a", "b"]) == [["b"], []]
    assert dominated_by([1, 1], [1, 2], ["a", "b"]) == [["b"], []]
    assert dominated_by([1, 1], [1, 1], ["a", "b"]) == [[], []]  # equal points do not dominate each other


def test_cli_writes_csv_and_rejects_a_missing_dir(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main([str(REAL), "--capacity-axis", "released_bytes", "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0].split(",") == PUBLISHED_COLUMNS
    assert main([str(tmp_path / "nope")]) == 2
