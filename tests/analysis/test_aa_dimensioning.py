"""Claims about a throughput phase with twins and a speed control (``+experiment=aa_noise``'s design): the control is
judged, never pooled with the baselines nor put on a front; the twins are separate arms compared A/A; the
dimensioning rows say what the default's design resolves and what it would need."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from analysis.comparison.soundness import CONTROL_NOTE
from analysis.report.console import print_summary
from analysis.report.summary import write_summary
from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir

CONTROL = "control_delay_2_6ms"


def _mutate(_phase, case, _repeat, cr):
    if case.label != CONTROL:
        return cr
    return cr.model_copy(update={"record": cr.record.model_copy(update={"step_delay_ms": 2.6})})


@pytest.fixture(scope="module")
def aa_run(tmp_path_factory):
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0), SynthCase("baseline_twin", "baseline", mean_tok_s=100.0),
             SynthCase("current_g2_n1", "current", 2, 1, mean_tok_s=85.0),
             SynthCase("current_g2_n1_twin", "current", 2, 1, mean_tok_s=85.0),
             SynthCase(CONTROL, "baseline", mean_tok_s=90.0)]
    run = write_run_dir(tmp_path_factory.mktemp("aa") / "run", [SynthPhase("same_runtime", cases, repeats=4)],
                        mutate=_mutate)
    write_summary(run)
    return run, json.loads((run / "summary" / "comparison-summary.json").read_text())


@pytest.mark.heavy  # simulates the verdict rule for every MDE and design (about 30 s CPU)
def test_a_speed_control_is_judged_against_the_undelayed_baselines_and_kept_off_the_front(aa_run):
    _run, cs = aa_run
    dec = {r["label"]: r for r in cs["decision"]}
    assert dec[CONTROL]["verdict"] == "slower" and not dec[CONTROL]["pareto"] and not dec[CONTROL]["knee"]
    assert dec["baseline_twin"]["verdict"] == "baseline"  # a twin baseline is part of the reference
    rows = {r["label"]: r for r in cs["rows"]}
    assert CONTROL_NOTE in rows[CONTROL]["front_excluded"]
    assert rows["current_g2_n1"]["retention"] == pytest.approx(0.85, abs=0.02)  # the control is not in the reference
    (floor,) = cs["noise_floor"]
    assert floor["processes"] == 8  # baseline and its twin, never the control
    ref = next(v for v in cs["variance_components"] if v["arm"] == "reference")
    assert ref["processes"] == 8 and ref["df_between"] == 7
    assert {e["label"] for e in cs["detectable_effects"]} == {"current_g2_n1", "current_g2_n1_twin", CONTROL}


@pytest.mark.heavy
def test_twins_are_compared_a_a_and_the_control_against_each_baseline_label(aa_run):
    _run, cs = aa_run
    aa = [(r["kind"], r["a_label"], r["b_label"], r["verdict"]) for r in cs["aa_comparisons"]]
    assert [a[:3] for a in aa] == [("A/A", "baseline_twin", "baseline"), ("A/A", "current_g2_n1_twin", "current_g2_n1"),
                                   ("control", CONTROL, "baseline"), ("control", CONTROL, "baseline_twin")]
    assert all(v == "slower" for k, _a, _b, v in aa if k == "control")
    assert not any(r["called"] for r in cs["aa_comparisons"] if r["kind"] == "A/A")


@pytest.mark.heavy
def test_dimensioning_states_the_default_design_and_what_resolves_5_and_10_percent(aa_run):
    run, cs = aa_run
    rows = [r for r in cs["dimensioning"] if r["label"] == "current_g2_n1"]
    assert [r["design"] for r in rows][1:] == ["resolve 5%", "resolve 10%"]
    assert rows[0]["processes_per_arm"] == 4 and rows[0]["mde_pct"] is not None
    for r in rows[1:]:
        assert r["processes_per_arm"] >= 2 and r["mde_pct"] <= r["target_pct"]
        assert r["cost_s_per_arm"] == pytest.approx(
            r["processes_per_arm"] * (r["process_cost_s"] + r["rounds_per_process"] * r["round_cost_s"]))
    assert rows[1]["processes_per_arm"] >= rows[2]["processes_per_arm"]  # a smaller cost needs no fewer processes
    buf = io.StringIO()
    print_summary(run / "summary", console=Console(file=buf, width=250, color_system=None))
    out = buf.getvalue()
    assert "A/A calls: 0 of 2" in out and f"speed control (2.6 ms per step) same_runtime: {CONTROL} vs baseline: slower" in out
    assert "dimensioning same_runtime/current_g2_n1: resolve 5%:" in out
    assert f"resolving power same_runtime/{CONTROL}: slower; this run could resolve costs of" in out
