"""Serving analysis: vLLM's TPOT / ITL definitions (derived cases), SLO rate rule, front, verdict direction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.serving.summary import slo_rates, verdicts
from analysis.serving.request_checks import pooled_itl_s, request_tpot_s


def test_tpot_excludes_the_first_token():
    # TTFT 200 ms, E2E 1200 ms, 11 tokens -> 100 ms (not 109)
    assert request_tpot_s(0.2, 1.2, 11) == pytest.approx(0.1)
    assert request_tpot_s(0.2, 1.2, 1) is None


def test_tpot_and_itl_are_different_numbers():
    # A: 2 tokens, TTFT 100, E2E 500 (one 400 ms gap); B: 11 tokens, TTFT 100, E2E 1100 (ten 100 ms gaps)
    tpots = [request_tpot_s(0.1, 0.5, 2), request_tpot_s(0.1, 1.1, 11)]
    assert np.mean(tpots) * 1000 == pytest.approx(250.0)
    itl = pooled_itl_s([[0.4], [0.1] * 10])
    assert np.mean(itl) * 1000 == pytest.approx(127.27, abs=0.01)


def test_bursty_server_has_tpot_one_second_but_itl_ten_seconds():
    # 10 tokens at once every 10 s: 30 tokens in 3 chunks; TTFT 10 s, E2E 30 s
    assert request_tpot_s(10.0, 30.0, 21) == pytest.approx(1.0)
    assert np.mean(pooled_itl_s([[10.0, 10.0]])) == pytest.approx(10.0)


def _table(label, released, rates_met, impl="current"):
    return [dict(phase="s", label=label, implementation=impl, group_size=4, num_in_group=1, prefetch_step=1,
                 offload_params="", rate_index=i, rate_rps=r, achieved_req_s=r * 0.9, meets_slo=m,
                 released_bytes=released) for i, (r, m) in enumerate(rates_met)]


def test_slo_rate_is_highest_rate_met_by_it_and_every_lower_rate():
    t = pd.DataFrame(_table("a", 0, [(1.0, True), (4.0, False), (16.0, True)])
                     + _table("b", 100, [(1.0, True), (4.0, True), (16.0, False)])
                     + _table("c", 50, [(1.0, False), (4.0, True), (16.0, True)]))
    s = slo_rates(t).set_index("label")
    assert s.loc["a", "slo_rate_rps"] == 1.0  # 16 met after 4 missed: noise, not capacity
    assert s.loc["b", "slo_rate_rps"] == 4.0
    assert math.isnan(s.loc["c", "slo_rate_rps"])
    assert s.loc["b", "on_front"] and not s.loc["a", "on_front"] and not s.loc["c", "on_front"]


def test_p99_tpot_verdict_calls_lower_latency_faster():
    rows = []
    for impl, vals in (("current", [10.0, 10.5, 11.0]), ("official", [20.0, 21.0, 22.0])):
        for rep, v in enumerate(vals):
            rows.append(dict(phase="s", group_size=4, num_in_group=1, prefetch_step=1, offload_params="",
                             rate_rps=4.0, implementation=impl, repeat=rep, tpot_p99_ms=v))
    v = verdicts(pd.DataFrame(rows))
    assert len(v) == 1 and v.iloc[0]["verdict"] == "faster"
    assert v.iloc[0]["delta_pct"] < 0


def test_single_repeat_verdict_is_inconclusive():
    rows = [dict(phase="s", group_size=4, num_in_group=1, prefetch_step=1, offload_params="", rate_rps=4.0,
                 implementation=i, repeat=0, tpot_p99_ms=v) for i, v in (("current", 5.0), ("official", 50.0))]
    assert verdicts(pd.DataFrame(rows)).iloc[0]["verdict"] == "inconclusive"
