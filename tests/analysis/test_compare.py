"""Claims about noise-aware verdicts: small deltas are never speed-ups."""

from __future__ import annotations

import math
import re
import shutil

import pandas as pd
import pytest

from analysis.aggregate import aggregate
from analysis.comparison.compare import SEQUENTIAL_PAIR_NOTE, compare_implementations, spaced_vs_adjacent
from analysis.comparison.verdict_rule import (
    DEFAULT_MARGIN_PCT,
    PAIRED,
    POOLED,
    WELCH,
    decide,
    decide_paired,
    t_quantile,
    unpaired_interval,
    verdict,
    verdict_text,
)
from analysis.load import load_run
from results_schema.records.sequential import FILE_NAME, LabelLook, LookDecision
from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir


def test_verdict_rule_with_margin():
    # bounds are percent of B; default margin 5%
    assert DEFAULT_MARGIN_PCT == 5.0
    assert verdict(6.0, 20.0) == "faster"
    assert verdict(1.0, 8.0) == "faster"  # excludes 0, reaches past the margin
    assert verdict(-20.0, -6.0) == "slower"
    assert verdict(-0.1, 2.0) == "equivalent"  # whole interval inside +-5%
    assert verdict(1.0, 3.0) == "equivalent"  # excludes 0 but inside the margin: never a speed-up
    assert verdict(-3.0, 8.0) == "inconclusive"  # contains 0, wider than the margin
    assert verdict(-3.0, 8.0, margin_pct=10.0) == "equivalent"  # configurable per comparison
    assert verdict(float("nan"), float("nan")) == "inconclusive"
    with pytest.raises(ValueError, match="margin"):
        verdict(0.0, 1.0, margin_pct=0.0)


def test_wide_interval_around_zero_is_inconclusive_not_equivalent():
    """cases/README.md "Verdicts need evidence": [100, 140, 180] vs [90, 150, 200] decide nothing."""
    d = decide([100.0, 140.0, 180.0], [90.0, 150.0, 200.0])
    assert d.verdict == "inconclusive" and d.method == WELCH
    assert d.ci_low_pct < -50.0 and d.ci_high_pct > 100.0
    assert "margin ±5%" in d.text and "CI95 Welch t" in d.text


def test_tight_interval_is_equivalent_under_the_default_margin():
    d = decide([100.0, 101.0, 99.0], [100.0, 100.0, 100.0])
    assert d.verdict == "equivalent"
    assert -5.0 <= d.ci_low_pct <= d.ci_high_pct <= 5.0
    assert decide([100.0, 101.0, 99.0], [100.0, 100.0, 100.0], margin_pct=0.5).verdict == "inconclusive"


def test_equivalent_that_excludes_zero_names_its_side():
    """One meaning of equivalent: inside the margin; when 0 lies outside, the text says which side."""
    d = decide([96.0, 97.0, 98.0, 96.5], [100.0, 100.5, 99.5, 100.0])
    assert d.verdict == "equivalent" and -5.0 < d.ci_low_pct < d.ci_high_pct < 0.0
    assert d.text.startswith("equivalent (slower by ") and "inside ±5%" in d.text
    latency = decide([96.0, 97.0, 98.0, 96.5], [100.0, 100.5, 99.5, 100.0], higher_is_better=False)
    assert latency.verdict == "equivalent" and latency.text.startswith("equivalent (faster by ")
    assert "slower" not in verdict_text("equivalent", -0.5, 2.0)


def test_lower_is_better_metric_flips_direction():
    # latency: A lower than B is "faster"
    assert decide([10.0, 10.1, 10.2], [20.0, 20.1, 20.2], higher_is_better=False).verdict == "faster"
    assert decide([10.0, 10.1, 10.2], [20.0, 20.1, 20.2]).verdict == "slower"


@pytest.mark.parametrize(("p", "df", "printed"), [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 3, 3.182), (0.975, 4, 2.776), (0.975, 6, 2.447),
    (0.975, 10, 2.228), (0.975, 30, 2.042), (0.995, 4, 4.604), (0.95, 5, 2.015), (0.975, math.inf, 1.960)])
def test_t_quantile_matches_the_printed_table(p, df, printed):
    """Student's t table (e.g. Abramowitz & Stegun table 26.10), 3 decimals."""
    assert t_quantile(p, df) == pytest.approx(printed, abs=5e-4)
    assert t_quantile(1.0 - p, df) == pytest.approx(-printed, abs=5e-4)


def test_t_quantile_agrees_with_mpmath_at_30_digits_on_real_df():
    """The quantiles the verdict rule asks for (Welch's real df between the integers, df below 1, the alphas a look
    spends) against mpmath's regularized incomplete beta solved at 30 digits: within 1e-10 relative. The reference is
    mpmath (installed with torch through sympy), not this module's ``t_sf``."""
    import mpmath

    with mpmath.workdps(30):
        _agree_with_mpmath(mpmath)


def test_a_quantile_beyond_what_floats_can_evaluate_is_refused_naming_it():
    """At df 1e-3 the 30% quantile is about -1.1e220 (mpmath), where ``t^2 / df`` overflows a float and the density
    is 0: refused with a ValueError naming p and df, never a wrong finite answer (it stopped at 1.34e154 = sqrt of the
    largest float, or divided by 0)."""
    for p in (0.3, 0.7, 0.999999999):
        with pytest.raises(ValueError, match=r"t_quantile\(p=.*df=0\.001\).*overflows"):
            t_quantile(p, 1e-3)


def _agree_with_mpmath(mpmath) -> None:
    for p in (0.6, 0.95, 0.975, 0.9875, 0.99167, 0.995, 0.99975):
        for df in (0.3, 0.9, 1.0, 1.37, 2.0, 2.5, 3.9, 5.01, 7.77, 12.4, 29.99, 147.3, 4321.5):
            def upper_tail_minus(t, df=mpmath.mpf(df), q=mpmath.mpf(1) - mpmath.mpf(p)):
                return mpmath.betainc(df / 2, mpmath.mpf(1) / 2, 0, df / (df + t * t), regularized=True) / 2 - q

            want = float(mpmath.findroot(upper_tail_minus, mpmath.mpf(t_quantile(p, df)) * 1.01))
            assert t_quantile(p, df) == pytest.approx(want, rel=1e-10), (p, df)
            assert t_quantile(1.0 - p, df) == pytest.approx(-want, rel=1e-10), (p, df)


def test_interval_follows_a_scaling_and_a_swap_exactly():
    """The interval is of a ratio: scaling A by c scales (1 + bounds/100) by c; swapping A and B inverts it."""
    a, b = [101.0, 103.0, 105.0, 99.0], [100.0, 102.0, 104.0, 97.0, 98.0]
    iv, scaled, swapped = unpaired_interval(a, b), unpaired_interval([0.9 * x for x in a], b), unpaired_interval(b, a)
    assert 1 + scaled.low_pct / 100 == pytest.approx(0.9 * (1 + iv.low_pct / 100))
    assert 1 + scaled.high_pct / 100 == pytest.approx(0.9 * (1 + iv.high_pct / 100))
    assert (1 + swapped.low_pct / 100) * (1 + iv.high_pct / 100) == pytest.approx(1.0)
    assert iv.low_pct < iv.center_pct < iv.high_pct and iv.df > 0


def test_unequal_counts_take_the_wider_of_welch_and_pooled():
    """Equal counts: Welch's interval; unequal: a call needs the pooled t to exclude 0 too."""
    even = unpaired_interval([100.0, 104.0, 98.0, 101.0], [95.0, 99.0, 97.0, 96.0])
    assert even.method == WELCH
    # three tight processes against six spread ones: Welch trusts the tight side's variance, the pooled t does not
    spread = [90.0, 110.0, 95.0, 105.0, 92.0, 108.0]
    odd = unpaired_interval([100.0, 100.2, 100.1], spread)
    assert odd.method == POOLED and odd.df == 7.0
    # two processes on a side: Welch with 1 degree of freedom (Hsu), wider than the pooled t
    two = unpaired_interval([100.0, 100.2], spread)
    assert two.method == WELCH and two.df == 1.0 and two.high_pct - two.low_pct > odd.high_pct - odd.low_pct


def test_confidence_is_an_argument_for_a_sequential_look():
    a, b = [96.0, 97.0, 98.0, 96.5], [100.0, 100.5, 99.5, 100.0]
    wide, std = decide(a, b, confidence=0.99), decide(a, b)
    assert wide.ci_low_pct < std.ci_low_pct < std.ci_high_pct < wide.ci_high_pct
    assert "CI99 Welch t" in wide.text and wide.confidence == 0.99
    with pytest.raises(ValueError, match="confidence 1.5"):
        decide(a, b, confidence=1.5)


def test_paired_blocks_use_k_minus_1_degrees_of_freedom():
    d = decide_paired([110.0, 111.0], [100.0, 100.0])
    assert d.method == PAIRED and d.df == 1.0 and d.n_a == 2
    assert d.verdict == "faster" and 0.0 < d.ci_low_pct < 10.0 < 11.0 < d.ci_high_pct
    # t(1) = 12.71: two blocks 2 points apart already leave the interval reaching below 0
    assert decide_paired([110.0, 112.0], [100.0, 100.0]).verdict == "inconclusive"
    assert decide_paired([110.0], [100.0]).verdict == "inconclusive"  # one block: no interval
    with pytest.raises(ValueError, match="one value per block"):
        decide_paired([1.0, 2.0], [1.0])


def test_single_process_gives_no_interval():
    iv = unpaired_interval([5.0], [4.0, 4.5])
    assert math.isnan(iv.low_pct) and "fewer than 2 processes" in iv.why
    assert verdict(iv.low_pct, iv.high_pct) == "inconclusive"
    assert decide([5.0], [4.0, 4.5]).verdict == "inconclusive"
    assert math.isnan(unpaired_interval([0.0, 1.0], [1.0, 2.0]).low_pct)  # a ratio needs positive values


def test_single_process_large_delta_is_inconclusive_not_equivalent(tmp_path):
    """Regression: a -59.93% delta with one process per side was labelled ``equivalent``."""
    comp = _matrix(tmp_path, shift=-54.0, sd=0.5, repeats=1)
    assert len(comp) == 4
    assert set(comp["verdict"]) == {"inconclusive"}
    assert (comp["delta_pct"] < -50).all()
    assert comp["ci_low_tok_s"].isna().all()
    assert all("n=1 vs 1" in n for n in comp["note"])


def test_markdown_shows_inconclusive_note_and_n(tmp_path):
    from analysis.report.markdown import render_markdown
    from analysis.report.tables import build

    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.5),
             SynthCase("current_g4_n1", "current", 4, 1, mean_tok_s=36.0, sd_tok_s=0.5),
             SynthCase("official_g4_n1", "official", 4, 1, mean_tok_s=90.0, sd_tok_s=0.5)]
    run = write_run_dir(tmp_path / "one", [SynthPhase("same_runtime", cases, repeats=1)], seed=1)
    full, _ = render_markdown(build(run))
    section = full.split("## Current vs official", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| same_runtime"))
    assert "inconclusive" in row and "equivalent" not in row
    assert "n=1 vs 1" in row
    assert "| n current | n official |" in section
    assert "inconclusive when no CI can be computed" in section


def _matrix(tmp_path, shift: float, sd: float, repeats: int = 5, seed: int = 1):
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=sd)]
    for g, n in ((8, 1), (4, 1), (4, 2), (2, 1)):
        cases.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=90.0 + shift, sd_tok_s=sd))
        cases.append(SynthCase(f"official_g{g}_n{n}", "official", g, n, mean_tok_s=90.0, sd_tok_s=sd))
    run = write_run_dir(tmp_path / f"run{shift}", [SynthPhase("same_runtime", cases, repeats=repeats)], seed=seed)
    data = load_run(run)
    return compare_implementations(data, aggregate(data))


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_difference_below_process_spread_is_equivalent_only_inside_the_margin(tmp_path):
    comp = _matrix(tmp_path, shift=0.3, sd=0.5)
    assert len(comp) == 4
    assert set(comp["verdict"]) == {"equivalent"}
    assert (comp["margin_pct"] == 5.0).all()
    assert all("±5%" in t for t in comp["verdict_text"])
    # same small shift, spread ~ the margin: the interval contains 0 but is too wide to decide
    wide = _matrix(tmp_path / "wide", shift=0.3, sd=6.0)
    assert set(wide["verdict"]) == {"inconclusive"}
    assert ((wide["ci_low_pct"] < 0) & (wide["ci_high_pct"] > 0)).all()


@pytest.mark.parametrize(("shift", "expected"), [(30.0, "faster"), (-30.0, "slower")])
def test_difference_of_ten_spreads_gets_a_direction(tmp_path, shift, expected):
    comp = _matrix(tmp_path, shift=shift, sd=3.0)
    assert set(comp["verdict"]) == {expected}
    assert "pooled_verdict" not in comp  # rounds are not independent: the pooled figure is descriptive only
    assert ((comp["pooled_delta_tok_s"] > 0) if expected == "faster" else (comp["pooled_delta_tok_s"] < 0)).all()
    assert ((comp["ci_low_tok_s"] > 0) if expected == "faster" else (comp["ci_high_tok_s"] < 0)).all()


def test_spaced_vs_adjacent_pairs_equal_layer_counts(valid_run):
    data = load_run(valid_run)
    t = spaced_vs_adjacent(data, aggregate(data))
    pairs = set(zip(t["adjacent_label"], t["spaced_label"], strict=True))
    assert ("current_g4_n2", "current_g2_n1") in pairs
    assert (t["num_selected_layers"] == 4).all()


def test_long_window_and_cross_stack_tables(tmp_path):
    from analysis.comparison.compare import long_window_table, native_vs_same_runtime
    from tests.support.synthetic import default_cases

    phases = [
        SynthPhase("same_runtime", default_cases(implementations=("current", "official"), official_delta=-30.0,
                                                 sd=0.5), repeats=3),
        SynthPhase("long_window", default_cases(points=((8, 1), (4, 1)), implementations=("current", "official"),
                                                official_delta=-30.0, sd=0.5), repeats=3, measured_rounds=10),
        SynthPhase("native", default_cases(points=((8, 1), (4, 1)), mean=80.0, sd=0.5), repeats=3,
                   runtime="ascend_native_v018"),
    ]
    run = write_run_dir(tmp_path / "run", phases)
    data = load_run(run)
    s = aggregate(data)
    lw = long_window_table(data, s)
    assert len(lw) == 2 and set(lw["verdict"]) == {"faster"} and lw["confirms"].all()
    cross = native_vs_same_runtime(s)
    assert set(cross["comparison"]) == {"cross-stack"}
    assert set(cross["native_label"]) == {"baseline", "current_g8_n1", "current_g4_n1"}
    assert (cross["native_runtime"] == "ascend_native_v018").all()
    from analysis.comparison.compare import confirmation_table
    from analysis.validation.validate import validate_run

    conf = confirmation_table(s)
    assert set(conf["label"]) == {"baseline", "current_g8_n1", "official_g8_n1", "current_g4_n1", "official_g4_n1"}
    assert (conf["long_rounds_per_process"] == 10).all() and conf["confirms_direction"].all()
    assert validate_run(run).valid
    # with the per-label verdicts (as the report has them) "confirms" means the same decided verdict
    from analysis.comparison.compare import label_vs_baseline

    sv = pd.concat([s, label_vs_baseline(data, s)], axis=1)
    conf = confirmation_table(sv).set_index("label")
    assert (conf["margin_pct"] == 5.0).all()
    assert conf.loc["official_g8_n1", "long_verdict"] == conf.loc["official_g8_n1", "short_verdict"] == "slower"
    assert conf.loc["official_g8_n1", "confirms_direction"]
    decided = conf["long_verdict"].isin(["faster", "slower", "equivalent", "reference"])
    assert (conf["confirms_direction"] == ((conf["long_verdict"] == conf["short_verdict"]) & decided)).all()


def test_single_process_and_retention_above_one_are_inconclusive_wherever_shown(tmp_path):
    """The smoke run showed an offload case at 1.19x and sync at 1.37x the baseline, called nothing."""
    from analysis.report.markdown import render_markdown
    from analysis.report.plots import plot_retention
    from analysis.report.tables import build, display_columns

    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.5),
             SynthCase("current_g4_n1", "current", 4, 1, mean_tok_s=119.0, sd_tok_s=0.5),
             SynthCase("sync_g4_n1", "sync", 4, 1, mean_tok_s=137.0, sd_tok_s=0.5),
             SynthCase("current_g2_n1", "current", 2, 1, mean_tok_s=60.0, sd_tok_s=0.5)]
    one = build(write_run_dir(tmp_path / "one", [SynthPhase("same_runtime", cases, repeats=1)], seed=1))
    s = one["summary"].set_index("label")
    assert s.loc["baseline", "vs_baseline_verdict"] == "reference"
    for lb in ("current_g4_n1", "sync_g4_n1", "current_g2_n1"):
        assert s.loc[lb, "vs_baseline_verdict"] == "inconclusive"
        assert "single process" in s.loc[lb, "vs_baseline_note"]
    assert re.search(r"retention 1\.1\d\d > 1\.0", s.loc["current_g4_n1", "vs_baseline_note"])
    # three processes each: the slow point gets a direction, the "faster" offload stays inconclusive
    three = build(write_run_dir(tmp_path / "three", [SynthPhase("same_runtime", cases, repeats=3)], seed=1))
    s3 = three["summary"].set_index("label")
    assert s3.loc["current_g2_n1", "vs_baseline_verdict"] == "slower"
    assert s3.loc["current_g4_n1", "vs_baseline_verdict"] == "inconclusive"
    assert s3.loc["current_g4_n1", "vs_baseline_ci_low_pct"] > 5.0  # the CI alone would say "faster"
    # the decision table (comparison-summary.json, HTML, console) shows the same verdict: one rule, not a twin
    from analysis.comparison.decision import decision_table

    for summary in (three["summary"], three["summary"].drop(columns=["vs_baseline_verdict"])):  # read or computed
        d = decision_table(three["data"], summary, three["validation"]).set_index("label")
        assert d.loc["current_g4_n1", "verdict"] == "inconclusive" and d.loc["current_g2_n1", "verdict"] == "slower"
        assert d.loc["baseline", "verdict"] == "baseline"
        assert d.loc["current_g4_n1", "retention_ci_low"] == pytest.approx(
            1 + s3.loc["current_g4_n1", "vs_baseline_ci_low_pct"] / 100)
    # the table shows the verdict with its margin; the plot marks the point
    main = render_markdown(three)[1]
    row = next(r for r in main.splitlines() if "| sync_g4_n1 |" in r)
    assert "inconclusive (CI95" in row and "margin ±5%" in row and "retention 1.3" in row
    assert "margin ±5%" in display_columns(three["summary"]).set_index("label").loc["current_g2_n1", "vs_baseline"]
    fig = plot_retention(three["summary"])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any(t.startswith("(4,1)") and "inconclusive" in t for t in texts)
    assert "margin ±5%" in fig.axes[0].get_title()


def test_margin_is_configurable_per_report(tmp_path):
    from analysis.report.markdown import render_markdown
    from analysis.report.tables import build

    run = write_run_dir(tmp_path / "m", [SynthPhase("same_runtime", [
        SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.5),
        SynthCase("current_g4_n1", "current", 4, 1, mean_tok_s=96.5, sd_tok_s=0.5),
        SynthCase("official_g4_n1", "official", 4, 1, mean_tok_s=90.0, sd_tok_s=0.5)], repeats=3)], seed=2)
    t5, t10 = build(run), build(run, margin_pct=10.0)
    assert set(t5["comparison"]["verdict"]) == {"faster"}  # about +7 %: past the 5 % margin
    assert set(t10["comparison"]["verdict"]) == {"equivalent"}
    assert "margin ±10%" in render_markdown(t10)[0]
    with pytest.raises(ValueError, match="margin"):
        build(run, margin_pct=-1)


def test_the_decision_table_judges_with_the_report_s_margin(tmp_path):
    import json

    from analysis.report.summary import write_summary

    run = write_run_dir(tmp_path / "d", [SynthPhase("same_runtime", [
        SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.5),
        SynthCase("current_g4_n1", "current", 4, 1, mean_tok_s=93.0, sd_tok_s=0.5)], repeats=3)], seed=2)
    decided = {}
    for margin in (5.0, 10.0):
        write_summary(run, out_dir=tmp_path / f"s{margin:g}", margin_pct=margin)
        doc = json.loads((tmp_path / f"s{margin:g}" / "comparison-summary.json").read_text())
        (row,) = [r for r in doc["decision"] if r["label"] == "current_g4_n1"]
        decided[margin] = row["verdict"]
    assert decided == {5.0: "slower", 10.0: "equivalent"}  # about -7 %: past 5 %, inside 10 %


def test_one_welch_satterthwaite_df_for_the_verdict_and_the_power_rows():
    """``satterthwaite_df`` (the one function; ``unpaired_interval`` and ``power.mde_row`` both call it): two
    equal terms of 2 df each pool to 4 df; a term without spread leaves the other's df; no spread at all is inf."""
    from analysis.comparison.verdict_rule import satterthwaite_df

    assert satterthwaite_df([(1.0, 2), (1.0, 2)]) == pytest.approx(4.0)
    assert satterthwaite_df([(0.5, 3), (0.0, 9)]) == pytest.approx(3.0)
    assert satterthwaite_df([(0.0, 3), (0.0, 3)]) == math.inf
    a, b = [100.0, 104.0, 98.0, 101.0], [90.0, 97.0, 95.0]  # 4 vs 3 processes: Welch's df on log tok/s
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = pd.Series(la).var() / 4, pd.Series(lb).var() / 3
    iv = unpaired_interval(a, b)
    assert iv.method == WELCH  # Welch's is the wider here
    assert iv.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 2))


def test_label_vs_label_rows_of_a_sequential_phase_say_they_are_descriptive(valid_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    data = load_run(run)
    plain = spaced_vs_adjacent(data, aggregate(data))
    assert not plain.empty and not plain["note"].str.contains("descriptive").any()
    phase = str(plain["phase"].iloc[0])
    line = LookDecision(phase=phase, look=1, blocks=3, looks=(3,), target_pct=5.0, alpha=0.05, spending="pocock",
                        look_alpha=0.05, baseline="baseline", next_blocks=0,
                        labels=(LabelLook(label="x", verdict="inconclusive", processes=0, reference_processes=0,
                                          ci_low_pct=None, ci_high_pct=None, center_pct=None, method="", reason=""),))
    (run / FILE_NAME).write_text(line.model_dump_json() + "\n")
    data = load_run(run)
    for t in (spaced_vs_adjacent(data, aggregate(data)), compare_implementations(data, aggregate(data))):
        rows = t[t["phase"] == phase]
        assert not rows.empty and rows["note"].str.contains(SEQUENTIAL_PAIR_NOTE, regex=False).all()
