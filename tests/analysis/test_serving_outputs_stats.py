"""Outputs compared under load (``analysis.serving.outputs``) and serving statistics (``analysis.serving.stats``)."""

from __future__ import annotations

import numpy as np
import pytest

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
    assert judge(["a", "B", "c", "Z"], base, is_baseline=False) == (4, (3,), (1,), "differs")  # outside the floor
    assert judge(["a", "Y", "c", "d"], base, is_baseline=False) == (4, (1,), (1,), "within_baseline_noise")
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
    assert got["verdict"] == "inconclusive" and got["margin_pct"] == 5.0  # the floor gates slower, not equivalent
    assert floor_verdict([10.0, 10.1, 9.95, 10.05], base, 3.0)["verdict"] == "equivalent"
    # a latency 2-3% higher, inside the margin: equivalent, and the text says on which side (higher = slower)
    near = floor_verdict([10.2, 10.3, 10.25, 10.3], [10.0, 10.05, 9.95, 10.0], 1.0)
    assert near["verdict"] == "equivalent" and near["verdict_text"].startswith("equivalent (slower by ")


# --------------------------------------------------------------------- the floor's baselines and host load

from pathlib import Path  # noqa: E402

from analysis.serving.stats import baseline_verdicts  # noqa: E402
from results_schema.records.host_load import HostLoad  # noqa: E402
from results_schema.codec.io import read_jsonl  # noqa: E402
from results_schema.records.serving import ServingRun  # noqa: E402

_LINES = Path(__file__).parents[1] / "fixtures" / "serving_run" / "serving-serving.jsonl"


def _proc(r: ServingRun, label: str, impl: str, repeat: int, tpot_ms: float, **kw) -> ServingRun:
    """A copy of fixture line ``r`` as process ``label-r<repeat>`` whose P50s are all ``tpot_ms``."""
    stats = {m: getattr(r.rate, m).model_copy(update={"p50_ms": tpot_ms}) for m in ("ttft", "tpot", "itl", "e2el")}
    rate = r.rate.model_copy(update={**stats, **kw})
    ev = r.evidence.model_copy(update={"implementation": impl})
    return r.model_copy(update={"label": label, "implementation": impl, "repeat": repeat, "rate": rate,
                                "evidence": ev, "step_delay_ms": 20.0 if label == "control" else 0.0})


def _runs(contended: bool = False) -> list[ServingRun]:
    r = read_jsonl(_LINES, ServingRun)[0]
    load = HostLoad(wall_s=10.0, host_busy_cpu_s=20.0, case_cpu_s=10.0, runner_cpu_s=0.0, foreign_cpu_s=10.0,
                    foreign_cores=1.0, steal_cpu_s=0.0, steal_fraction=0.0, host_cores=2, contended_cores_limit=0.25,
                    contended_steal_limit=0.05, contended=True)
    out = [_proc(r, "baseline", "baseline", i, v) for i, v in enumerate((30.0, 30.5, 29.8, 30.2))]
    out += [_proc(r, "control", "baseline", i, v) for i, v in enumerate((50.0, 51.0, 49.5, 50.5))]
    out += [_proc(r, "current_g1_n1", "current", i, v, **({"host_load": load} if contended and i == 2 else {}))
            for i, v in enumerate((48.0, 49.0, 50.0, 47.5))]
    return out


def test_a_speed_control_is_judged_against_the_undelayed_baselines_and_its_known_answer_is_slower():
    rows = baseline_verdicts(_runs())
    got = {(v["label"], v["metric"]): v for v in rows}
    assert {lb for lb, _m in got} == {"control", "current_g1_n1"}  # the control is no floor baseline
    assert all(v["b_processes"] == 4 and abs(v["b_median_ms"] - 30.1) < 1e-9 for v in rows)
    assert got[("control", "tpot")]["verdict"] == "slower" and got[("current_g1_n1", "tpot")]["verdict"] == "slower"


def test_a_rate_run_beside_foreign_work_withholds_its_verdicts():
    rows = [v for v in baseline_verdicts(_runs(contended=True)) if v["label"] == "current_g1_n1"]
    assert rows and all(v["verdict"] == "withheld" for v in rows)
    assert rows[0]["verdict_text"].startswith("withheld: contended (1 of 8 processes")
    assert all(v["verdict"] == "slower" for v in baseline_verdicts(_runs(contended=True)) if v["label"] == "control")


def test_a_contended_rate_is_a_warning_naming_the_process_and_its_foreign_cores():
    from analysis.serving.summary import _check_run

    errors: list[str] = []
    warnings: list[str] = []
    for r in _runs(contended=True):
        _check_run(r, errors, warnings)
    hot = [w for w in warnings if "contended" in w]
    assert len(hot) == 1 and hot[0].startswith("serving/current_g1_n1-r2 rate 0: contended") and "1.00 foreign" in hot[0]


def test_a_control_whose_slowdown_the_floor_hides_is_a_warning_and_never_on_the_slo_front():
    import pandas as pd

    from analysis.serving.stats import control_warnings
    from analysis.serving.summary import rate_table, slo_rates

    runs = _runs()
    rows = [dict(v, verdict="inconclusive") if v["label"] == "control" else v for v in baseline_verdicts(runs)]
    warn = control_warnings(rows, runs)
    assert len(warn) == 1 and warn[0].startswith("speed control serving/control at ") and "expected slower" in warn[0]
    assert control_warnings(baseline_verdicts(runs), runs) == []  # slower: the expected answer, no warning
    frame = pd.DataFrame([{"phase": "serving", "label": lb, "implementation": "baseline", "group_size": 0,
                           "num_in_group": 0, "prefetch_step": 1, "offload_params": "", "rate_rps": 4.0,
                           "achieved_req_s": 4.0, "output_tok_s": 1.0, "goodput_req_s": 4.0, "slo_attainment": 1.0,
                           "duration_s": 1.0, "repeat": 0, "failed": 0, "meets_slo": True, "completed": 200,
                           "slo_target": 0.9, "released_bytes": 0, "offloaded_bytes": 0, "offloader_class": "x",
                           "wrapped_layers": "", "prefix_caching": False, "distinct_prompts": 1, "num_prompts": 1,
                           "step_delay_ms": ms,
                           **{f"{m}_{p}_ms": 1.0 for m in ("ttft", "tpot", "itl", "e2el") for p in ("p50", "p90", "p99")}}
                          for lb, ms in (("baseline", 0.0), ("control", 20.0))])
    front = slo_rates(rate_table(frame)).set_index("label")["on_front"].to_dict()
    assert front == {"baseline": True, "control": False}


# --------------------------------------------------------------------- the blocks design (paired by repeat)

def _blocked(drift: float, effect: float, twin_gap: float = 0.0) -> list[ServingRun]:
    """3 blocks (repeats) of baseline + baseline_twin + current_g1_n1 on a host that slows by ``drift`` (a
    factor per block); current is ``effect`` times its block's baseline; the twin ``twin_gap`` apart."""
    r = read_jsonl(_LINES, ServingRun)[0]
    out = []
    for rep in range(3):
        base = 30.0 * (1 + drift) ** rep
        out += [_proc(r, "baseline", "baseline", rep, base),
                _proc(r, "baseline_twin", "baseline", rep, base * (1 + twin_gap)),
                _proc(r, "current_g1_n1", "current", rep, base * effect * (1 + 0.01 * rep))]
    return out


def test_a_host_that_drifts_between_blocks_widens_the_unpaired_floor_but_not_the_blocks_one():
    from analysis.serving.stats import block_verdict

    rows = [v for v in baseline_verdicts(_blocked(drift=0.3, effect=1.3, twin_gap=0.02)) if v["metric"] == "tpot"]
    assert len(rows) == 1 and rows[0]["design"] == "blocks" and rows[0]["blocks"] == 3
    assert abs(rows[0]["floor_pct"] - 2.0) < 0.05 and rows[0]["verdict"] == "slower"
    assert 25.0 < rows[0]["ci_low_pct"] <= rows[0]["delta_pct"] <= rows[0]["ci_high_pct"] < 35.0
    assert "paired in 3 blocks" in rows[0]["verdict_text"] and "widest baseline spread inside a block" in rows[0]["verdict_text"]
    # the same processes judged unpaired: the drift (30% per block) is the floor, and hides the 30% cost
    a = [30.0 * 1.3 ** k * 1.3 * (1 + 0.01 * k) for k in range(3)]
    b = [30.0 * 1.3 ** k * f for k in range(3) for f in (1.0, 1.02)]
    assert floor_verdict(a, b, 70.0)["verdict"] == "inconclusive"
    # a block whose twins disagree by more than the effect: the floor is that block's spread, not the median
    got = block_verdict([([39.0], [30.0, 30.6]), ([39.0], [30.0, 30.6]), ([39.0], [25.0, 36.0])])
    # +28% in every block, inside a 36% floor: not slower (the floor gates it) and never equivalent (the one meaning of
    # equivalent: the interval inside ±5%, not inside a margin widened to the floor): inconclusive
    assert abs(got["floor_pct"] - 36.07) < 0.01 and got["verdict"] == "inconclusive" and got["margin_pct"] == 5.0
    assert got["verdict_text"].startswith("inconclusive (") and "paired in 3 blocks (2 df" in got["verdict_text"]


def test_no_cost_is_equivalent_in_blocks_and_one_block_falls_back_to_processes():
    from analysis.serving.stats import block_verdict

    rows = [v for v in baseline_verdicts(_blocked(drift=0.3, effect=1.0, twin_gap=0.02)) if v["metric"] == "tpot"]
    assert rows[0]["design"] == "blocks" and rows[0]["verdict"] == "equivalent"
    one = [p for p in _blocked(drift=0.0, effect=1.3) if p.repeat == 0 or p.label != "baseline_twin"]
    row = [v for v in baseline_verdicts(one) if v["metric"] == "tpot"][0]
    assert row["design"] == "processes" and row["blocks"] is None  # only block 0 has two baselines
    with pytest.raises(ValueError, match="block needs >= 2 baselines"):
        block_verdict([([39.0], [30.0])])


def test_order_effects_take_their_same_position_floor_from_the_blocks_two_baselines():
    from analysis.serving.stats import order_effects

    runs = _blocked(drift=0.0, effect=1.3, twin_gap=0.08)
    rows = {(v["label"], v["metric"]): v for v in order_effects(runs)}
    # every process here ran rate 0 at position 0: one position, no order row; rotate the record to fake two
    assert rows == {}
    moved = [p.model_copy(update={"rate": p.rate.model_copy(update={"index": p.repeat % 2})}) for p in runs]
    got = {(v["label"], v["metric"]): v for v in order_effects(moved)}
    cur = got[("current_g1_n1", "tpot")]
    assert abs(cur["floor_pct"] - 8.0 / 1.04) < 0.01  # the twins' same-position spread, not the 5% default
    assert cur["positions"] == (0, 1) and cur["effect"] is False  # current differs by 1% between positions


def test_under_drift_only_a_label_whose_position_matters_more_than_the_baselines_shows_an_order_effect():
    from analysis.serving.stats import order_effects

    # 3 blocks, the host 30% slower per block; positions rotate with the block (position = repeat), as in serving
    runs = [p.model_copy(update={"rate": p.rate.model_copy(update={"index": p.repeat})})
            for p in _blocked(drift=0.3, effect=1.3, twin_gap=0.02)]
    got = {(v["label"], v["metric"]): v for v in order_effects(runs)}
    assert {lb for lb, _m in got} == {"baseline", "baseline_twin", "current_g1_n1"}
    assert not any(v["effect"] for v in got.values())  # the drift moves every label alike: no order effect
    assert got[("current_g1_n1", "tpot")]["spread_pct"] < 2.0  # relative to the baselines at each position
    # current 40% slower when the rate runs first: beyond what the baselines show by position
    bumped = [p.model_copy(update={"rate": p.rate.model_copy(update={
        "tpot": p.rate.tpot.model_copy(update={"p50_ms": p.rate.tpot.p50_ms * 1.4})})})
        if p.label == "current_g1_n1" and p.repeat == 2 else p for p in runs]
    row = {(v["label"], v["metric"]): v for v in order_effects(bumped)}[("current_g1_n1", "tpot")]
    assert row["effect"] is True and row["spread_pct"] > row["floor_pct"]


def test_a_block_without_two_baselines_is_left_out_and_named():
    runs = [p for p in _blocked(drift=0.0, effect=1.3, twin_gap=0.02) if not (p.repeat == 2 and p.label == "baseline_twin")]
    row = [v for v in baseline_verdicts(runs) if v["metric"] == "tpot"][0]
    assert row["design"] == "blocks" and row["blocks"] == 2 and row["a_processes"] == 3
    assert "1 process(es) unpaired (their block lacks two baselines)" in row["verdict_text"]
    assert "paired in 2 blocks (1 df" in row["verdict_text"] and "CI95 paired t" in row["verdict_text"]


def test_a_verdict_row_says_blocks_exactly_for_the_blocks_design():
    from results_schema.records.serving_summary import BaselineVerdictRow

    row = {"phase": "serving", "label": "current_g1_n1", "rate_rps": 4.0, "metric": "tpot", "a_processes": 3,
           "b_processes": 6, "a_median_ms": 40.0, "b_median_ms": 30.0, "floor_pct": 5.0, "margin_pct": 5.0,
           "verdict": "slower", "delta_pct": 33.0, "ci_low_pct": 30.0, "ci_high_pct": 36.0, "verdict_text": "x"}
    assert BaselineVerdictRow(**row, design="blocks", blocks=3).blocks == 3
    assert BaselineVerdictRow(**row).design == "processes"  # a summary written before the blocks design
    with pytest.raises(ValueError, match="blocks is set exactly for the blocks design"):
        BaselineVerdictRow(**row, design="blocks")
    with pytest.raises(ValueError, match="blocks is set exactly for the blocks design"):
        BaselineVerdictRow(**row, blocks=3)


def test_the_twin_baseline_is_never_a_second_point_on_the_slo_front():
    import pandas as pd

    from analysis.serving.summary import slo_rates

    def row(label: str, impl: str, released: int, ok: bool, delay: float = 0.0) -> dict:
        return {"phase": "serving", "label": label, "implementation": impl, "group_size": 0, "num_in_group": 0,
                "prefetch_step": 1, "offload_params": "", "rate_rps": 4.0, "meets_slo": ok, "achieved_req_s": 4.0,
                "released_bytes": released, "step_delay_ms": delay}

    frame = pd.DataFrame([row("baseline", "baseline", 0, False), row("baseline_twin", "baseline", 0, True),
                          row("control", "baseline", 0, True, 20.0), row("current_g1_n1", "current", 10, True)])
    front = slo_rates(frame).set_index("label")["on_front"].to_dict()
    assert front == {"baseline": False, "baseline_twin": False, "control": False, "current_g1_n1": True}


def test_an_order_effect_in_blocks_says_its_spread_is_relative_to_the_baselines():
    import pandas as pd

    from analysis.serving.report import _order_md
    from analysis.serving.stats import order_effects

    runs = [p.model_copy(update={"rate": p.rate.model_copy(update={"index": p.repeat})})
            for p in _blocked(drift=0.3, effect=1.3, twin_gap=0.02)]
    bumped = [p.model_copy(update={"rate": p.rate.model_copy(update={
        "tpot": p.rate.tpot.model_copy(update={"p50_ms": p.rate.tpot.p50_ms * 1.4})})})
        if p.label == "current_g1_n1" and p.repeat == 2 else p for p in runs]
    rows = order_effects(bumped)
    assert all(v["relative"] for v in rows)
    lines = [ln for ln in _order_md(pd.DataFrame(rows)) if "order effect: current_g1_n1" in ln]
    assert len(lines) == 1 and "(relative to the baselines at each position: spread" in lines[0]
