"""The group-sequential rule (``analysis.comparison.sequential``): spending, looks, stopping, and the recheck `analysis validate` runs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from analysis.comparison.power import detectable_paired_cost_pct
from analysis.comparison.sequential import (
    SequentialDesign,
    label_looks,
    look_blocks,
    look_values,
    look_verdict,
    spent_alpha,
)
from analysis.comparison.sequential_check import declared_design, recheck_looks
from analysis.comparison.verdict_rule import PAIRED as PAIRED_T
from analysis.comparison.verdict_rule import decide, decide_paired
from conf.schema import Config
from conf.typed import plain_config
from results_schema.records.choice import DEFAULT_VERIFY_TARGET_FLOOR_PCT
from results_schema.records.sequential import DEFAULT_ALPHA, DEFAULT_PAIRING, DEFAULT_SPENDING
from results_schema.rules.sequential_rule import check_design
from runners.identity.manifest import json_safe
from runners.orchestration.sequential import design, look_on
from runners.planning.blocks import block_order, block_positions
from tests.runners.helpers import compose_real


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_spending_is_zero_at_the_start_alpha_at_the_end_and_increasing(spending):
    ts = np.linspace(0, 1, 21)
    spent = [spent_alpha(float(t), 0.05, spending) for t in ts]
    assert spent[0] == 0.0 and spent[-1] == pytest.approx(0.05, abs=1e-12)
    assert all(b >= a for a, b in zip(spent, spent[1:], strict=False))  # O'Brien-Fleming-type: below 1e-16 until t ~ 0.05
    assert all(b > a for a, b in zip(spent[4:], spent[5:], strict=False))


def test_pocock_spends_more_early_than_obrien_fleming():
    assert spent_alpha(0.5, 0.05, "pocock") > spent_alpha(0.5, 0.05, "obrien_fleming")
    # Lan-DeMets O'Brien-Fleming-type at t = 0.5: 2 - 2 Phi(1.95996 / sqrt(0.5)) = 0.00557
    assert spent_alpha(0.5, 0.05, "obrien_fleming") == pytest.approx(0.005574, abs=1e-5)
    # Pocock-type at t = 0.5: 0.05 ln(1 + (e - 1) / 2) = 0.03101
    assert spent_alpha(0.5, 0.05, "pocock") == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 2))


@pytest.mark.parametrize("looks", [(3, 4, 6), (2, 3, 4, 6), (5,)])
def test_the_look_alphas_sum_to_alpha(looks):
    d = SequentialDesign(looks)
    assert sum(d.look_alphas()) == pytest.approx(0.05) and all(a > 0 for a in d.look_alphas())
    assert d.confidence(0) == pytest.approx(1 - d.look_alphas()[0])


@pytest.mark.parametrize(("args", "named"), [(((),), "non-empty"), (((1, 3),), ">= 2"), (((3, 3),), "strictly"),
                                             (((3, 4), 0.0), "target_pct 0.0"), (((3, 4), 5, 1.5), "alpha 1.5"),
                                             (((3, 4), 5, 0.05, "linear"), "'linear'")])
def test_a_bad_design_is_refused_naming_the_value(args, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace("+", r"\+")):
        SequentialDesign(*args)
    assert named in str(check_design(*(list(args) + [5.0, 0.05, "pocock"][len(args) - 1:])))


def test_a_look_is_decide_at_the_looks_level_and_the_target_as_margin():
    d = SequentialDesign((3, 4, 6), target_pct=5.0)
    a, b = [70.0, 71.0, 69.5], [100.0, 101.0, 99.0]
    lv = look_verdict(a, b, d, 0)
    ref = decide(a, b, margin_pct=5.0, confidence=d.confidence(0))
    assert lv.decision == ref and lv.verdict == "slower" and lv.stopped
    assert "look 1 (3 vs 3 processes" in lv.reason(d) and "stopped" in lv.reason(d)


def test_an_open_label_is_looked_at_again_on_its_first_n_values_and_ends_inconclusive_with_its_mde():
    d = SequentialDesign((3, 4, 6))
    rng = np.random.default_rng(3)
    a, b = list(100 * np.exp(0.2 * rng.standard_normal(6))), list(100 * np.exp(0.2 * rng.standard_normal(6)))
    looks = label_looks(a, b, d)
    assert [lv.look for lv in looks] == [1, 2, 3] and [lv.processes for lv in looks] == [3, 4, 6]
    assert [lv.verdict for lv in looks] == ["open", "open", "inconclusive"]
    assert looks[-1].decision == decide(a, b, margin_pct=5.0, confidence=d.confidence(2))
    assert looks[-1].mde_pct > 5.0 and "MDE" in looks[-1].reason(d)
    assert label_looks(a[:4], b, d)[-1].look == 2  # values run out: no third look


@pytest.mark.parametrize("design", [SequentialDesign((3, 4, 6)), SequentialDesign((3, 4, 6), pairing="block")])
def test_validate_recomputes_the_runners_look_line_and_names_a_changed_verdict_or_method(design):
    """``recheck_looks`` (what ``analysis validate`` runs) on the line the runner's ``look_on`` writes."""
    vals = {"x": {0: 70.0, 1: 71.0, 2: 69.5}, "baseline": {0: 100.0, 1: 101.0, 2: 99.0}}
    values = {("p", k): v for k, v in vals.items()}
    line = look_on("p", design, "baseline", ["x"], [], vals)
    assert line is not None and line.labels[0].verdict == "slower" and line.pairing == design.pairing
    assert recheck_looks([line], values) == []
    for change, words in (({"verdict": "equivalent"}, "recorded equivalent"),
                          ({"method": "paired t" if design.pairing == "none" else "Welch t"}, "recorded slower")):
        bad = line.model_copy(update={"labels": (line.labels[0].model_copy(update=change),)})
        assert words in recheck_looks([bad], values)[0]
    gone = recheck_looks([line], {("p", "x"): vals["x"], ("p", "baseline"): {0: 100.0, 1: 101.0}})  # a lost process
    assert len(gone) == 1 and "3 vs 3), recomputed" in gone[0] and " vs 2)" in gone[0]


def _declared(cfg: Config, phase: str) -> dict | None:
    """``declared_design`` of ``phase`` on the config as a run's manifest records it (``json_safe(plain_config)``),
    values only."""
    got = declared_design(json_safe(plain_config(cfg)), phase)
    return None if got is None else {k: v for k, (v, _source) in got.items()}


@pytest.mark.heavy  # six config compositions (about 1.6 s)
def test_the_declared_design_is_the_one_the_runner_runs_read_from_the_config_a_run_saves() -> None:
    """What ``analysis validate`` holds each look line to, read from the saved config, where an added field at its
    default (``pairing``, ``choose.verify_target_floor_pct``) is left out."""
    for overrides in ((), ("phases.same_runtime.sequential.pairing=block", "phases.same_runtime.sequential.alpha=0.1")):
        cfg = compose_real(*overrides)
        assert ("pairing" in plain_config(cfg)["phases"]["same_runtime"]["sequential"]) == bool(overrides)
        assert _declared(cfg, "same_runtime") == dataclasses.asdict(design(cfg, "same_runtime"))
    assert _declared(compose_real("phases.same_runtime.sequential.looks=[]"), "same_runtime") is None
    for floor in ((), ("choose.verify_target_floor_pct=7",)):
        cfg = compose_real("+experiment=choose", "need_gib=0.001", *floor)
        assert _declared(cfg, "verify") == {  # every decision's series (runners.orchestration.choose_decide)
            "looks": tuple(cfg.choose.verify_looks), "alpha": DEFAULT_ALPHA, "spending": DEFAULT_SPENDING,
            "pairing": DEFAULT_PAIRING, "target_floor_pct": 7.0 if floor else DEFAULT_VERIFY_TARGET_FLOOR_PCT}
    assert _declared(compose_real("+experiment=choose", "need_gib=0.001", "choose.verify_looks=[]"), "verify") is None


def test_blocks_alternate_baseline_first_and_last():
    assert block_order("B", ["x", "y"], 1) == ["B", "x", "y"]
    assert block_order("B", ["x", "y"], 2) == ["y", "x", "B"]
    pos = block_positions(2, 2)
    assert pos == [[0, 5], [1, 4], [2, 3]]
    assert len({sum(p) for p in pos}) == 1  # over a pair of blocks every arm's mean position is the same
    with pytest.raises(ValueError, match="block 0"):
        block_order("B", [], 0)


PAIRED = SequentialDesign((3, 4, 6), pairing="block")


def test_a_paired_look_is_decide_paired_over_the_complete_blocks_at_the_looks_level():
    a = {0: 90.0, 1: 120.0, 2: 70.0, 3: 100.0}
    b = {0: 100.0, 1: 131.0, 3: 112.0}  # block 3 (repeat 2) of the baseline failed
    la, lb = look_values(a, b, PAIRED, 1)  # look 2: blocks 1..4, the complete ones are repeats 0, 1, 3
    assert (la, lb) == ([90.0, 120.0, 100.0], [100.0, 131.0, 112.0])
    assert look_values(a, b, SequentialDesign((3, 4, 6)), 1) == ([90.0, 120.0, 70.0, 100.0], [100.0, 131.0, 112.0])
    lv = look_verdict(la, lb, PAIRED, 1)
    assert lv.decision == decide_paired(la, lb, margin_pct=5.0, confidence=PAIRED.confidence(1))
    assert lv.decision.method == PAIRED_T and lv.verdict == "slower"
    assert "(3 vs 3 processes, paired by block, alpha 0.0072" in lv.reason(PAIRED) and "CI99.3 paired t" in lv.reason(PAIRED)
    unpaired = look_verdict(*look_values(a, b, SequentialDesign((3, 4, 6)), 1), SequentialDesign((3, 4, 6)), 1)
    assert unpaired.verdict == "open"  # the blocks' shared speed hides the cost from the unpaired interval
    with pytest.raises(ValueError, match="one value per block"):
        look_verdict([1.0, 2.0, 3.0], [1.0, 2.0], PAIRED, 0)


def test_a_paired_look_names_the_complete_blocks_whose_values_it_takes():
    a = {0: 90.0, 1: 120.0, 2: 70.0, 3: 100.0, 5: 80.0}
    b = {0: 100.0, 1: 131.0, 3: 112.0, 4: 95.0, 5: 99.0}  # block 3 of b failed, block 5 of a
    for k, blocks in ((0, [0, 1]), (1, [0, 1, 3]), (2, [0, 1, 3, 5])):
        assert look_blocks(a, b, PAIRED, k) == blocks
        assert look_values(a, b, PAIRED, k) == ([a[r] for r in blocks], [b[r] for r in blocks])
    with pytest.raises(ValueError, match="does not pair by block"):
        look_blocks(a, b, SequentialDesign((3, 4, 6)), 1)
    with pytest.raises(ValueError, match="look 4: the design has 3 looks"):
        look_blocks(a, b, PAIRED, 3)


def test_a_paired_label_open_at_the_budget_ends_inconclusive_with_the_paired_mde():
    rng = np.random.default_rng(4)
    shared = 0.2 * rng.standard_normal(6)
    a = list(100 * np.exp(shared + 0.1 * rng.standard_normal(6)))
    b = list(100 * np.exp(shared + 0.1 * rng.standard_normal(6)))
    last = label_looks(a, b, PAIRED)[-1]
    assert last.look == 3 and last.verdict == "inconclusive"
    sd_d = float(np.std(np.log(a) - np.log(b), ddof=1))
    assert last.mde_pct == detectable_paired_cost_pct(6, sd_d, margin_pct=5.0, confidence=PAIRED.confidence(2))


def test_a_design_refuses_an_unknown_pairing_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="sequential pairing 'rounds': allowed values are none, block"):
        SequentialDesign((3, 4, 6), pairing="rounds")
