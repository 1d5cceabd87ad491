"""Claims: a verdict resting on a contended process is withheld and never printed clean; an unstable process
(no warmup round, or a window drifting beyond the noise floor) keeps its point off the front; neither changes
validity, and the run's verdict line counts the contended cases."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from analysis.aggregate import aggregate
from analysis.comparison.compare import compare_implementations
from analysis.comparison.soundness import point_exclusions, unstable_processes, withheld_reason
from analysis.load import load_run, window_drift_pct
from analysis.report.console import print_summary
from analysis.report.summary import write_summary
from analysis.report.tables import build
from results_schema.codec.io import read_json
from results_schema.records.models import CaseRun
from results_schema.records.summary import ComparisonSummary
from results_schema.records.validation import ValidationReport
from tests.support.synthetic import SynthCase, SynthPhase, default_cases, write_run_dir

QUIET, BUSY = 0.05, 1.0


def _cases(**by_label: SynthCase) -> list[SynthCase]:
    cases = default_cases(mean=100.0, sd=0.3, points=((2, 1), (1, 1)), implementations=("current", "official"),
                          slowdown_per_layer=0.05)
    return [by_label.get(c.label, c) for c in cases]


def _run(tmp_path: Path, cases: list[SynthCase], repeats: int = 3, **kw) -> Path:
    return write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=repeats)], **kw)


def _contended_g2(tmp_path: Path) -> Path:
    busy = SynthCase("current_g2_n1", "current", 2, 1, mean_tok_s=90.0, sd_tok_s=0.3,
                     foreign_cores=(QUIET, BUSY, QUIET))
    quiet = {c.label: SynthCase(**{**vars(c), "foreign_cores": (QUIET,) * 3}) for c in _cases()}
    return _run(tmp_path, _cases(**{**quiet, "current_g2_n1": busy}))


def test_the_withheld_reason_counts_contended_processes_over_every_process_the_verdict_rests_on(tmp_path):
    data = load_run(_contended_g2(tmp_path))
    assert withheld_reason(data.runs, "same_runtime", ["current_g2_n1", "baseline"]) == "contended (1 of 6 processes)"
    assert withheld_reason(data.runs, "same_runtime", ["current_g1_n1", "baseline"]) == ""
    ex = point_exclusions(data.runs)
    assert ex[("same_runtime", "current_g2_n1")] == ["withheld: contended (1 of 6 processes)"]
    assert ("same_runtime", "current_g1_n1") not in ex and ("same_runtime", "baseline") not in ex


def test_a_contended_point_gets_a_withheld_verdict_is_off_the_front_and_the_run_stays_valid(tmp_path):
    run = _contended_g2(tmp_path)
    write_summary(run)
    cs = read_json(run / "summary" / "comparison-summary.json", ComparisonSummary)
    val = read_json(run / "summary" / "validation.json", ValidationReport)
    row = {r.label: r for r in cs.decision}
    assert row["current_g2_n1"].verdict == "withheld" and row["current_g2_n1"].withheld == "contended (1 of 6 processes)"
    assert not row["current_g2_n1"].pareto and not row["current_g2_n1"].knee
    assert row["current_g1_n1"].verdict == "slower" and row["current_g1_n1"].pareto
    summary = {r.label: r for r in cs.rows}
    assert summary["current_g2_n1"].contended_processes == 1 and summary["current_g2_n1"].vs_baseline_verdict == "withheld"
    assert "withheld: contended (1 of 6 processes)" in summary["current_g2_n1"].front_excluded
    pair = {r["a_label"]: r for r in cs.comparison}["current_g2_n1"]
    assert pair["verdict"] == "withheld" and str(pair["verdict_text"]).startswith("withheld: contended (1 of 6 processes)")
    assert val.valid and [i.repeat for i in val.warnings if i.code == "contended_case"] == [1]
    assert val.verdict().endswith("; 1 of 15 cases contended (foreign work on the host while they measured)")
    buf = io.StringIO()
    assert print_summary(run / "summary", Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "withheld: contended (1 of 6 processes)" in out
    assert "host: 1 of 15 cases contended (foreign work on the host while they measured)" in out
    assert not any("current_g2_n1" in ln and ("slower" in ln or "equivalent" in ln) for ln in out.splitlines()
                   if ln.startswith("│"))
    html = (run / "summary" / "report.html").read_text()
    assert 'id="contended"' in html and "withheld: contended (1 of 6 processes)" in html
    md = (run / "summary" / "comparison-summary.md").read_text()
    assert "1 of 15 cases contended" in md.splitlines()[2]


def test_a_contended_baseline_withholds_every_verdict_of_its_phase(tmp_path):
    base = SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.3, foreign_cores=(BUSY, QUIET, QUIET))
    run = _run(tmp_path, _cases(baseline=base))
    t = build(run)
    s = t["summary"].set_index("label")
    assert set(s.loc[s["implementation"] != "baseline", "vs_baseline_verdict"]) == {"withheld"}
    assert not s["pareto"].any() and not s["knee"].any()


def test_records_without_host_load_are_never_contended(tmp_path):
    data = load_run(_run(tmp_path, _cases()))
    assert data.runs["host_contended"].isna().all() and point_exclusions(data.runs) == {}


def test_warmup_rounds_zero_marks_the_process_unstable_keeps_the_verdict_and_leaves_the_front(tmp_path):
    cold = SynthCase("current_g1_n1", "current", 1, 1, mean_tok_s=60.0, sd_tok_s=0.3, warmup_rounds=0)
    run = _run(tmp_path, _cases(current_g1_n1=cold))
    data = load_run(run)
    assert set(unstable_processes(data.runs).values()) == {"warmup_rounds=0 (the cold start is measured)"}
    write_summary(run)
    cs = read_json(run / "summary" / "comparison-summary.json", ComparisonSummary)
    row = {r.label: r for r in cs.decision}["current_g1_n1"]
    assert row.verdict == "slower" and not row.pareto and not row.knee
    assert row.unstable == "unstable (3 of 3 processes: warmup_rounds=0 (the cold start is measured))"
    val = read_json(run / "summary" / "validation.json", ValidationReport)
    assert val.valid and sum(i.code == "unstable_case" for i in val.warnings) == 3
    assert "contended" not in val.verdict()


def _drifting(slow_first_round: float):
    def mutate(phase: str, case: SynthCase, repeat: int, cr: CaseRun) -> CaseRun:
        if case.label != "current_g2_n1" or repeat != 0:
            return cr
        r0 = cr.record.rounds[0]
        el = r0.elapsed_s * slow_first_round
        rounds = (r0.model_copy(update={"elapsed_s": el, "throughput_tok_s": r0.output_tokens / el}),
                  *cr.record.rounds[1:])
        total = sum(r.elapsed_s for r in rounds)
        rec = cr.record.model_copy(update={
            "rounds": rounds, "elapsed_s": total, "throughput_tok_s": cr.record.output_tokens / total,
            "requests_per_s": cr.record.requests / total, "window": None, "round_latency_p50_s": None,
            "round_latency_p95_s": None})
        return CaseRun.model_validate({**cr.model_dump(), "record": rec.model_dump()})
    return mutate


@pytest.mark.parametrize("slow, unstable", [(1.0, False), (1.5, True)])
def test_a_window_drifting_beyond_twice_the_noise_floor_is_unstable(tmp_path, slow, unstable):
    run = _run(tmp_path, _cases(), repeats=4, mutate=_drifting(slow))
    data = load_run(run)
    got = unstable_processes(data.runs)
    assert (("same_runtime", "current_g2_n1", 0) in got) is unstable
    if unstable:
        assert got[("same_runtime", "current_g2_n1", 0)].startswith("window drift ")
        assert "x noise floor" in got[("same_runtime", "current_g2_n1", 0)]
        summary = aggregate(data)
        assert not summary.set_index("label").loc["current_g2_n1", "pareto"]


def test_fewer_than_four_baseline_processes_judge_no_drift(tmp_path):
    data = load_run(_run(tmp_path, _cases(), repeats=3, mutate=_drifting(3.0)))
    assert unstable_processes(data.runs) == {}


def test_window_drift_is_the_halves_difference_scaled_to_two_whole_windows():
    assert window_drift_pct([1.0], [10]) is None
    assert window_drift_pct([1.0, 1.0], [10, 10]) == pytest.approx(0.0)
    # halves 10 and 20 tok/s: |10 - 20| / 15 = 66.7%; 2 rounds: scale sqrt(2/2) / sqrt(1 + 1) = 1/sqrt(2)
    assert window_drift_pct([1.0, 1.0], [10, 20]) == pytest.approx(66.667 / 2**0.5, rel=1e-4)
    # 3 rounds (1 | 2): scale sqrt(2/3) / sqrt(1 + 1/2)
    assert window_drift_pct([1.0, 1.0, 1.0], [10, 20, 20]) == pytest.approx(66.667 * (2 / 3) ** 0.5 / 1.5**0.5,
                                                                               rel=1e-4)


def test_official_pairs_resting_on_a_contended_process_are_withheld(tmp_path):
    data = load_run(_contended_g2(tmp_path))
    summary = aggregate(data)
    pairs = compare_implementations(data, summary).set_index("a_label")
    assert pairs.loc["current_g2_n1", "verdict"] == "withheld"
    assert pairs.loc["current_g1_n1", "verdict"] != "withheld"

