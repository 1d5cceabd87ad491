"""A sequential throughput phase end to end with the fake bench (``runners.orchestration.sequential``).

The fake's round time is set per process (``FAKE_SLOW``, ``label-rN:factor``): ``current_g1_n1`` is twice as slow as
the baseline in every process (stopped ``slower`` at look 1), ``current_g2_n1`` is 1.01-1.23x slower, varying from
process to process (open at every look, ``inconclusive`` at the budget with its MDE; its log ratios are 0.11, 0.01,
0.21, 0.03, 0.19, 0.11, so the fixed 95% rule on all 6 processes would call it ``slower`` (about -17.7%..-2.4%)
while the last look's 98.8% interval (about -21%..+2%) contains 0: the outputs must carry the sequential verdict).
The design is the default's: looks after 3, 4 and 6 blocks, Pocock-type spending, target 5%.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from analysis.comparison.compare import label_vs_baseline
from analysis.comparison.sequential import SequentialDesign
from analysis.comparison.sequential_verdict import sequential_verdicts
from analysis.comparison.verdict_rule import decide
from analysis.load import load_run
from analysis.model.fit import recommend
from analysis.report.console import print_summary
from analysis.report.html_figures import pareto_figure, retention_figure
from analysis.report.plots import ci_gid, plot_pareto, plot_retention
from analysis.report.tables import build
from analysis.validation.validate import validate_run
from results_schema.codec.io import dumps_model, read_json, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.plan import RunPlan
from results_schema.records.summary import ComparisonSummary
from results_schema.records.sequential import FILE_NAME, LookDecision, read_looks, with_looks
from runners.errors import EXIT_INTERRUPTED, EXIT_OK
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.sequential import block_items, look_on, phase_values
from tests.runners.helpers import RUNNER, FAKE_BENCH, compose_cfg
from tests.shared_runs import run_matrix
from tests.support.figure_checks import drawn_intervals, legend_covered_points, overlapping_texts, same_4_digits

REPO_ROOT = Path(__file__).resolve().parents[2]
SWING = {0: 1.116, 1: 1.01, 2: 1.234, 3: 1.03, 4: 1.209, 5: 1.116}
SLOW = ",".join(["current_g1_n1:2", *(f"current_g2_n1-r{r}:{f}" for r, f in SWING.items())])


def _overrides(root: Path, *extra: str, analyze: bool = True) -> list[str]:
    return ["model=tiny", "matrix@phases.same_runtime=same_runtime_cpu", f"results_root={root}", "run_id=t",
            f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", f"analyze={str(analyze).lower()}",
            "phases.same_runtime.sequential.looks=[3,4,6]", "phases.same_runtime.measured_rounds=2", "phases.same_runtime.min_measured_s=0.5",
            f'+phases.same_runtime.runtime.env.FAKE_SLOW="{SLOW}"', *extra]


def _runs(run_dir: Path) -> list[CaseRun]:
    return read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[int, Path]:
    root = tmp_path_factory.mktemp("seq")
    ov = _overrides(root)
    return run_matrix(compose_cfg(*ov), ov), root / "default" / "t"


@pytest.mark.heavy(seconds=14)  # one fake-bench run of 18 processes with analysis, shared below (about 25 s)
def test_a_label_stops_when_it_is_known_and_the_open_one_gets_the_next_blocks_until_the_budget(run) -> None:
    code, run_dir = run
    assert code == EXIT_OK
    lines = read_looks(run_dir)
    got = [(d.look, d.blocks, [(x.label, x.verdict) for x in d.labels], d.next_blocks) for d in lines]
    assert got == [(1, 3, [("current_g2_n1", "open"), ("current_g1_n1", "slower"), ("control_delay_2_6ms", "slower")],
                    1),
                   (2, 4, [("current_g2_n1", "open")], 2),
                   (3, 6, [("current_g2_n1", "inconclusive")], 0)]
    assert lines[0].labels[1].ci_high_pct is not None and lines[0].labels[1].ci_high_pct < -40
    assert lines[-1].labels[0].mde_pct is not None and lines[-1].labels[0].mde_pct > 5
    assert "inconclusive at the budget" in lines[-1].labels[0].reason
    counts = Counter(r.record.label for r in _runs(run_dir))
    assert counts == Counter({"baseline": 6, "current_g1_n1": 3, "current_g2_n1": 6, "control_delay_2_6ms": 3})
    assert with_looks(read_json(run_dir / "plan.json", RunPlan), lines).processes == 18


@pytest.mark.heavy  # shares the run above
def test_the_blocks_ran_in_abba_order_and_validate_recomputes_every_look(run, tmp_path: Path) -> None:
    _, run_dir = run
    cfg = compose_cfg(*_overrides(tmp_path))
    planned = [(sc.case.label, sc.repeat) for sc in block_items(cfg, "same_runtime", read_looks(run_dir), 0)]
    assert [(r.record.label, r.record.repeat) for r in _runs(run_dir)] == planned
    assert planned[:8] == [("baseline", 0), ("current_g2_n1", 0), ("current_g1_n1", 0), ("control_delay_2_6ms", 0),
                           ("control_delay_2_6ms", 1), ("current_g1_n1", 1), ("current_g2_n1", 1), ("baseline", 1)]
    report = validate_run(run_dir)
    assert report.valid, [i.message for i in report.issues if i.severity == "error"]
    assert next(c for c in report.checks if c.name == "sequential").passed
    md = (run_dir / "summary" / "comparison-summary.md").read_text()
    assert "## Sequential looks" in md and "| same_runtime | current_g2_n1 | 3 | 6 | 6 vs 6 |" in md
    assert "| inconclusive |" in md and "| slower |" in md
    assert (run_dir / "summary" / "sequential.png").stat().st_size > 0
    html = (run_dir / "summary" / "report.html").read_text()
    assert '<table id="looks">' in html and "current_g2_n1" in html.split('<table id="looks">')[1].split("</table>")[0]
    # a recorded decision that its processes do not give is an error
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    text = (copy / FILE_NAME).read_text().splitlines()
    text[0] = text[0].replace('"verdict":"slower"', '"verdict":"equivalent"')
    (copy / FILE_NAME).write_text("\n".join(text) + "\n")
    bad = validate_run(copy)
    msgs = [i.message for i in bad.issues if i.severity == "error"]
    assert not bad.valid and any("recorded equivalent" in m and "recomputed slower" in m for m in msgs), msgs


@pytest.mark.heavy(seconds=11)  # a runner process stopped after its first look, then resumed in-process (about 25 s)
def test_a_resume_after_a_look_keeps_every_recorded_line_and_takes_the_next_look(tmp_path: Path, run) -> None:
    ov = _overrides(tmp_path, analyze=False)
    run_dir = tmp_path / "default" / "t"
    proc = subprocess.Popen([*RUNNER, *ov], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    block4 = run_dir / "logs" / "same_runtime" / "current_g2_n1-r3.log"  # the first process the first look added
    while proc.poll() is None and time.monotonic() < deadline and not block4.is_file():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, out[-3000:]
    before = (run_dir / FILE_NAME).read_bytes()
    assert len(before.splitlines()) == 1 and ("current_g2_n1", 3) not in {(r.record.label, r.record.repeat)
                                                                           for r in _runs(run_dir)}
    resume = [f"resume={run_dir}", "progress=false", "analyze=false"]
    assert run_matrix(compose_cfg(*resume), resume) == EXIT_OK
    after = (run_dir / FILE_NAME).read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 3
    assert [[(x.label, x.verdict) for x in d.labels] for d in read_looks(run_dir)] == [
        [(x.label, x.verdict) for x in d.labels] for d in read_looks(run[1])]
    keys = [(r.record.label, r.record.repeat) for r in _runs(run_dir)]
    assert len(set(keys)) == len(keys) == 18


def _tampered(run_dir: Path, tmp_path: Path, name: str, lines: list[LookDecision]) -> list[tuple[str, str]]:
    """A copy of ``run_dir`` with ``lines`` as its look lines and ``SHA256SUMS`` written anew (as a hand that edits
    the lines would); the errors ``validate_run`` finds in it, as ``(code, message)``."""
    copy = tmp_path / name
    shutil.copytree(run_dir, copy)
    (copy / FILE_NAME).write_text("".join(dumps_model(x) + "\n" for x in lines))
    write_sha256sums(copy)
    return [(i.code, i.message) for i in validate_run(copy).issues if i.severity == "error"]


@pytest.mark.heavy  # shares the run above
def test_validate_holds_every_look_to_the_design_and_the_labels_the_run_declared(run, tmp_path: Path) -> None:
    _, run_dir = run
    lines = read_looks(run_dir)
    # lines that agree with themselves under alpha 0.04 (the runner's look_on on the recorded processes): each look
    # stops and keeps open the labels the recorded one did, so every other check passes them
    other = SequentialDesign((3, 4, 6), 5.0, 0.04)
    remade: list[LookDecision] = []
    while (nxt := look_on("same_runtime", other, "baseline", [x.label for x in lines[0].labels], remade,
                          phase_values(run_dir, "same_runtime"))) is not None:
        remade.append(nxt)
    assert [(x.blocks, x.still_open, x.next_blocks) for x in remade] == [
        (x.blocks, x.still_open, x.next_blocks) for x in lines]
    errors = _tampered(run_dir, tmp_path, "alpha", remade)
    assert {c for c, _ in errors} == {"sequential_design"}, errors
    assert errors == [("sequential_design", "same_runtime: the recorded design is not what the run declared: alpha 0.04 "
                       "recorded (look 1, look 2, look 3); declared 0.05 (phases.same_runtime.sequential.alpha)")]
    # the first look without the control (it stopped there, so no later look or count misses it)
    first = lines[0].model_copy(update={"labels": lines[0].labels[:2]})
    errors = _tampered(run_dir, tmp_path, "labels", [first, *lines[1:]])
    assert errors == [("sequential_design", "same_runtime: the recorded design is not what the run declared: look 1 "
                       "looks at ['current_g1_n1', 'current_g2_n1']; plan.json plans beside the baseline "
                       "['control_delay_2_6ms', 'current_g1_n1', 'current_g2_n1']")]


@pytest.mark.heavy  # shares the run above
def test_validate_calls_a_declared_sequential_phase_without_look_lines_an_error(run, tmp_path: Path) -> None:
    """The lines emptied (a run stopped before its first look, or lines lost): the phase's processes have no verdict
    of record, which the old validate did not see (only the counts beyond the plan's first look differed)."""
    _, run_dir = run
    errors = _tampered(run_dir, tmp_path, "none", [])
    design = [m for c, m in errors if c == "sequential_design"]
    assert design == ["same_runtime: the run declared looks [3, 4, 6] (phases.same_runtime.sequential.looks) but "
                      "recorded no look line over its 18 process(es) (sequential-decisions.jsonl): the phase has no "
                      "verdict of record"], errors


def _seq_rows(run_dir: Path) -> dict[str, object]:
    cs = read_json(run_dir / "summary" / "comparison-summary.json", ComparisonSummary)
    return {r.label: r for r in cs.decision}


@pytest.mark.heavy  # shares the run above
def test_every_output_carries_the_sequential_verdict_where_the_fixed_rule_would_differ(run) -> None:
    _, run_dir = run
    data = load_run(run_dir)
    lines = read_looks(run_dir)
    seq = sequential_verdicts(lines, data.runs)
    g2 = data.runs[data.runs["label"] == "current_g2_n1"].sort_values("repeat")["throughput_tok_s"].tolist()
    base = data.runs[data.runs["label"] == "baseline"].sort_values("repeat")["throughput_tok_s"].tolist()
    # the case this test is for: the fixed 95% rule on all 6 vs 6 processes calls it, the last look does not
    assert decide(g2, base).verdict == "slower"
    last = lines[-1].labels[0]
    assert (seq[("same_runtime", "current_g2_n1")].verdict, last.verdict) == ("inconclusive", "inconclusive")
    assert last.ci_low_pct is not None and last.ci_high_pct is not None and last.ci_low_pct < 0 < last.ci_high_pct
    first = lines[0].labels[1]
    assert first.ci_low_pct is not None and first.ci_high_pct is not None
    want = {"current_g2_n1": ("inconclusive", "CI98.8% at look 3 (6 vs 6 processes)", last.ci_low_pct,
                              last.ci_high_pct),
            "current_g1_n1": ("slower", "CI96.9% at look 1 (3 vs 3 processes)", first.ci_low_pct, first.ci_high_pct)}
    rows = _seq_rows(run_dir)
    cs = read_json(run_dir / "summary" / "comparison-summary.json", ComparisonSummary)
    summary_rows = {r.label: r for r in cs.rows}
    for label, (verdict, name, lo, hi) in want.items():
        r, s = rows[label], summary_rows[label]
        assert (r.verdict, r.retention_ci_name, s.vs_baseline_verdict, s.vs_baseline_ci_name) == (
            verdict, name, verdict, name)
        assert r.retention_ci_low == pytest.approx(1 + lo / 100, rel=1e-9)
        assert r.retention_ci_high == pytest.approx(1 + hi / 100, rel=1e-9)
    text = " ".join((run_dir / "summary" / "comparison-summary.md").read_text().split())
    assert f"inconclusive (CI98.8% at look 3 (6 vs 6 processes) {last.ci_low_pct:+.1f}%..{last.ci_high_pct:+.1f}%" in text
    assert "slower (CI95" not in text and "inconclusive (CI95" not in text
    # the known-size control's line, too, is its stopping look's verdict
    assert "control_delay_2_6ms vs baseline: slower (CI96.9% at look 1 (3 vs 3 processes)" in text
    buf = io.StringIO()
    print_summary(run_dir / "summary", Console(file=buf, width=250, color_system=None))
    console = buf.getvalue()
    assert "CI (95% unless named)" in console and "(CI98.8% at look 3 (6 vs 6 processes))" in console
    g2_line = next(x for x in console.splitlines() if "current_g2_n1" in x and "CI98.8%" in x)
    assert "inconclusive" in g2_line and "slower" not in g2_line
    page = (run_dir / "summary" / "report.html").read_text(encoding="utf-8")
    assert "CI98.8% at look 3 (6 vs 6 processes)" in page and "CI96.9% at look 1 (3 vs 3 processes)" in page
    _figures_carry(run_dir, want, list(rows.values()))
    tables = build(run_dir)
    need = float(tables["summary"].set_index("label").at["current_g2_n1", "released_bytes"]) / 2**30
    assert need > 0
    rec = recommend(tables["summary"], data.runs, need_gib=need, phase="same_runtime")
    assert rec.best is not None and rec.best["label"] == "current_g2_n1"
    assert rec.verdict.startswith("vs baseline: inconclusive (CI98.8% at look 3 (6 vs 6 processes)")


def _figures_carry(run_dir: Path, want: dict, decision: list) -> None:
    """retention.png / pareto.png draw each label's sequential interval and name it; so do the HTML figures."""
    summary = build(run_dir)["summary"]
    for fig, scale in ((plot_retention(summary), False), (plot_pareto(summary), True)):
        drawn = drawn_intervals(fig)
        legend = " ".join(" ".join(x.get_text().split()) for x in fig.axes[0].get_legend().get_texts())
        for label, (_v, name, lo, hi) in want.items():
            r = summary[summary["label"] == label].iloc[0]
            k = float(r["baseline_throughput_median_tok_s"]) if scale else 1.0
            got = drawn[ci_gid("same_runtime", label)]
            assert same_4_digits(got[0], (1 + lo / 100) * k) and same_4_digits(got[1], (1 + hi / 100) * k), label
            assert f"retention {name}" in legend
        assert "retention 95% CI" not in legend  # no point draws the fixed rule's interval
        assert overlapping_texts(fig) == [] and legend_covered_points(fig) == []
    for fig in (retention_figure(decision), pareto_figure(decision)):
        title = " ".join(str(fig.layout.title.text).split())
        assert all(name in title for _v, name, _lo, _hi in want.values()), title


@pytest.mark.heavy  # shares the run above
def test_a_contended_process_withholds_only_the_verdicts_whose_stopping_look_used_it(run) -> None:
    _, run_dir = run
    data = load_run(run_dir)
    summary = build(run_dir)["summary"]

    def verdicts(contended: set[tuple[str, int]]) -> dict[str, str]:
        runs = data.runs.copy()
        runs["host_contended"] = [(lb, rep) in contended for lb, rep in zip(runs["label"], runs["repeat"], strict=True)]
        vb = label_vs_baseline(dataclasses.replace(data, runs=runs), summary)
        return dict(zip(summary["label"], vb["vs_baseline_verdict"], strict=True))

    assert verdicts(set())["current_g1_n1"] == "slower"
    # the baseline's 5th process came after current_g1_n1's stopping look (3 vs 3): only current_g2_n1 rests on it
    got = verdicts({("baseline", 4)})
    assert (got["current_g1_n1"], got["current_g2_n1"]) == ("slower", "withheld")
    got = verdicts({("current_g1_n1", 0)})
    assert (got["current_g1_n1"], got["current_g2_n1"]) == ("withheld", "inconclusive")


@pytest.mark.heavy  # shares the run above
def test_a_report_build_computes_the_sequential_verdicts_once(run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision columns and the A/A rows read the same verdicts of record, computed once per build."""
    import analysis.comparison.compare as compare

    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return sequential_verdicts(*args, **kwargs)

    monkeypatch.setattr(compare, "sequential_verdicts", counted)
    tables = build(run[1])
    assert len(calls) == 1
    assert tables["summary"].set_index("label").at["current_g1_n1", "vs_baseline_verdict"] == "slower"
    assert any(r["a_label"] == "control_delay_2_6ms" and r["verdict"] == "slower" for r in tables["aa"])
