"""A choose-then-confirm run end to end with the fake bench (``runners.orchestration.choose``), with the fixed verify
design (``choose.verify_looks=[]``; the sequential one: ``test_choose_sequential.py``): the fake's throughput
follows a known serial cost (``FAKE_COPY_FRACTION``: each round takes ``0.5 * (1 + 0.1 * offloaded layers)`` s), so
the model fitted to the probe is right; ``FAKE_SLOW`` makes the verified settings slower than it predicts, so it is
wrong. A right model verifies its choice once; a wrong one is refitted, then its measured front decides; a need of 0
verifies nothing; an interrupted verify phase resumes the same decision.

Each scenario is one run (module-scoped, shared by the tests that read it); the tiny hidden-128 model releases at
most 0.0019 GiB, so the need is 0.001 GiB (five of eight layers)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from analysis.model.choice import recompute
from results_schema.records.choice import FILE_NAME, SUMMARY_FILE, ChoiceDecision, ChoiceSummary, with_decided
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.plan import RunPlan
from results_schema.records.validation import ValidationReport
from runners.errors import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK
from runners.orchestration.choose import decided_items
from runners.orchestration.choose_probe import probe_decision
from runners.planning.choose_plan import choose_need
from tests.runners.helpers import RUNNER, FAKE_BENCH, compose_cfg
from tests.shared_runs import run_matrix

REPO_ROOT = Path(__file__).resolve().parents[2]
SERIAL_COST = ['+phases.probe.runtime.env.FAKE_COPY_FRACTION="0.1"',
               '+phases.verify.runtime.env.FAKE_COPY_FRACTION="0.1"']
WRONG_MODEL = '+phases.verify.runtime.env.FAKE_SLOW="current_g3_n2:1.5,current_g4_n3:2"'
"""The predicted choice 1.5x slower than predicted, the refit's choice 2x (both outside their intervals: a uniform
slow-down of every verified setting is absorbed by the refit, whose interval widens by the miss it fitted)."""
PREDICTED, REFITTED = "current_g3_n2", "current_g4_n3"
"""What the rule chooses from the probe of the serial cost, and after the refit of the wrong model (checked first)."""


def _overrides(root: Path, *extra: str, run_id: str = "t", analyze: bool = True) -> list[str]:
    # 12 measured rounds of >= 0.5 s: the window reaches the matrices' min_measured_s (6 s), so analysis flags nothing;
    # the fixed verify design (4 processes per setting, rotated): tests/runners/test_choose_sequential.py runs the
    # experiment's sequential one
    return ["+experiment=choose", "choose.verify_looks=[]", "model=tiny", f"results_root={root}", f"run_id={run_id}",
            f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", f"analyze={str(analyze).lower()}",
            "phases.probe.measured_rounds=12", "phases.verify.measured_rounds=12", *SERIAL_COST, *extra]


def _run(root: Path, *extra: str, analyze: bool = True) -> tuple[int, Path]:
    ov = _overrides(root, *extra, analyze=analyze)
    return run_matrix(compose_cfg(*ov), ov), root / "choose" / "t"


def _decisions(run_dir: Path) -> list[ChoiceDecision]:
    return read_jsonl(run_dir / FILE_NAME, ChoiceDecision)


def _runs(run_dir: Path, phase: str) -> list[CaseRun]:
    path = run_dir / f"{phase}-runs.jsonl"
    return read_jsonl(path, CaseRun) if path.is_file() else []


def _counts(run_dir: Path, phase: str) -> Counter[str]:
    return Counter(r.record.label for r in _runs(run_dir, phase))


def _chosen(d: ChoiceDecision) -> list[str]:
    return [c.label for c in d.chosen]


def _keys(run_dir: Path, phase: str) -> list[tuple[str, int]]:
    return sorted((r.record.label, r.record.repeat) for r in _runs(run_dir, phase))


@pytest.fixture(scope="module")
def right(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[int, Path]:
    """A run whose model is right (analysis on)."""
    return _run(tmp_path_factory.mktemp("right"), "need_gib=0.001")


@pytest.fixture(scope="module")
def wrong(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[int, Path]:
    """A run whose verified settings are slower than predicted (analysis on)."""
    return _run(tmp_path_factory.mktemp("wrong"), "need_gib=0.001", WRONG_MODEL)


# ----------------------------------------------------------------------------- a right model


@pytest.mark.heavy(seconds=11)  # one fake-bench run with analysis, shared with the tests below (8 s)
def test_a_right_model_decides_once_and_its_choice_is_verified_with_four_processes_each(right) -> None:
    code, run_dir = right
    assert code == EXIT_OK
    (d,) = _decisions(run_dir)
    assert d.stage == "predict" and d.form == "serial" and d.trusted
    assert d.points and {p.phase for p in d.points} == {"probe"}
    assert 1 <= len(d.chosen) <= d.budget == 2 and _chosen(d) == [PREDICTED]
    assert _counts(run_dir, "verify") == Counter({"baseline": 4, **{label: 4 for label in _chosen(d)}})
    assert _counts(run_dir, "probe") == Counter({"baseline": 2, "current_g1_n1": 2, "current_g2_n1_p3": 2})
    assert d.decided_phase is not None and d.decided_phase.processes == 4 * len(d.chosen)
    whole = with_decided(read_json(run_dir / "plan.json", RunPlan), [d])
    assert whole.processes == len(_runs(run_dir, "probe")) + len(_runs(run_dir, "verify"))


@pytest.mark.heavy  # shares the run above
def test_a_right_models_every_verified_setting_lies_within_its_predicted_interval(right) -> None:
    _, run_dir = right
    (d,) = _decisions(run_dir)
    preds = {(p.group_size, p.num_in_group, p.prefetch_step): p for p in d.predictions}
    runs = _runs(run_dir, "verify")
    base = statistics.median(r.record.throughput_tok_s for r in runs if r.record.label == "baseline")
    for c in d.chosen:
        p = preds[(c.group_size, c.num_in_group, c.prefetch_step)]
        measured = statistics.median(r.record.throughput_tok_s for r in runs if r.record.label == c.label) / base
        assert p.retention_low <= measured <= p.retention_high, (c.label, measured, p)
    summary = read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary)
    assert summary.trusted and [v.label for v in summary.verified] == _chosen(d)
    assert all(v.within_interval for v in summary.verified)
    assert summary.recommended is not None and summary.recommended.label in _chosen(d)
    assert summary.processes_run == 14


@pytest.mark.heavy  # shares the run above
def test_a_right_models_recorded_decision_is_what_the_rule_recomputes_from_its_inputs(right) -> None:
    _, run_dir = right
    assert [recompute(d) for d in _decisions(run_dir)] == [[]]


# ----------------------------------------------------------------------------- a wrong model


@pytest.mark.heavy(seconds=14)  # one fake-bench run with analysis, shared with the tests below (10 s)
def test_a_wrong_model_is_refitted_then_untrusted_and_its_predicted_front_measured(wrong) -> None:
    code, run_dir = wrong
    assert code == EXIT_OK
    decisions = _decisions(run_dir)
    assert [d.stage for d in decisions] == ["predict", "refit", "front"]
    predict, refit, front = decisions
    # the slowed labels must be the ones chosen, else WRONG_MODEL slows nothing that is verified
    assert (_chosen(predict), _chosen(refit)) == ([PREDICTED], [REFITTED]), "the rule's choice changed: update FAKE_SLOW"
    assert [d.trusted for d in decisions] == [True, True, False]
    assert [(c.label, c.missed) for c in refit.checked] == [(PREDICTED, True)]
    assert (REFITTED, True) in [(c.label, c.missed) for c in front.checked]
    assert len(refit.chosen) <= refit.budget == 1 and 1 <= len(front.chosen) <= front.budget
    decided = [label for d in decisions for label in _chosen(d)]
    assert len(set(decided)) == len(decided)  # nothing decided twice
    assert _counts(run_dir, "verify") == Counter({"baseline": 4, **{label: 4 for label in decided}})


@pytest.mark.heavy  # shares the run above
def test_a_wrong_models_run_never_recommends_a_setting_it_did_not_measure(wrong) -> None:
    _, run_dir = wrong
    summary = read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary)
    assert summary.recommended is not None
    assert summary.recommended.label in _counts(run_dir, "verify")
    assert not summary.trusted and any("NOT TRUSTED" in line for line in summary.lines)
    assert [(v.label, v.within_interval) for v in summary.verified][:2] == [(PREDICTED, False), (REFITTED, False)]
    assert all(v.measured_retention is not None for v in summary.verified)  # every decided setting was measured


@pytest.mark.heavy  # shares the run above
def test_a_wrong_models_recorded_decisions_are_what_the_rule_recomputes_from_their_inputs(wrong) -> None:
    _, run_dir = wrong
    assert [recompute(d) for d in _decisions(run_dir)] == [[], [], []]


# ----------------------------------------------------------------------------- no need


@pytest.mark.heavy  # one fake-bench run with analysis (4 s)
def test_a_need_of_0_writes_one_unnecessary_line_and_measures_no_verify_phase(tmp_path: Path) -> None:
    code, run_dir = _run(tmp_path, "need_gib=0")
    (d,) = _decisions(run_dir)
    assert d.stage == "unnecessary" and d.chosen == () and d.form is None and d.decided_phase is None
    assert _counts(run_dir, "probe") == Counter({"baseline": 2})
    assert not (run_dir / "verify-runs.jsonl").exists()
    summary = read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary)
    assert summary.recommended is not None and summary.recommended.label == "baseline"
    assert code == EXIT_OK


# ----------------------------------------------------------------------------- resume


def _interrupt_in_verify(root: Path, *extra: str) -> Path:
    """A runner process (analysis off) whose first verified setting is held by the fake bench
    (``FAKE_BENCH_WAIT_FOR``) and which is stopped (SIGTERM) there: the decision is written, the verify phase's
    first baseline recorded, its first setting not; returns the run directory, the gate file open for a resume."""
    gate = root / "gate"
    ov = _overrides(root, *extra, f'+phases.verify.runtime.env.FAKE_BENCH_WAIT_FOR="{gate}"',
                    '+phases.verify.runtime.env.FAKE_BENCH_WAIT_LABELS="*"', analyze=False)
    run_dir = root / "choose" / "t"
    proc = subprocess.Popen([*RUNNER, *ov], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not (
            len(_runs(run_dir, "verify")) == 1 and list((run_dir / "logs" / "verify").glob("current_*-r0.log"))):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, out[-3000:]
    assert _keys(run_dir, "verify") == [("baseline", 0)], out[-3000:]
    gate.touch()
    return run_dir


def _resume(run_dir: Path) -> int:
    ov = [f"resume={run_dir}", "progress=false", "analyze=false"]
    return run_matrix(compose_cfg(*ov), ov)


@pytest.mark.heavy  # a runner process stopped in its verify phase, then resumed in-process (9 s)
def test_a_resume_during_verify_keeps_the_decision_and_records_each_case_once(tmp_path: Path, right) -> None:
    run_dir = _interrupt_in_verify(tmp_path, "need_gib=0.001")
    before = (run_dir / FILE_NAME).read_bytes()
    (d,) = _decisions(run_dir)
    assert d.stage == "predict"
    assert _resume(run_dir) == EXIT_OK
    assert (run_dir / FILE_NAME).read_bytes() == before  # the same decision, not a second one
    assert _chosen(d) == _chosen(_decisions(right[1])[0])  # the same chosen set as the uninterrupted run
    verify = _keys(run_dir, "verify")
    assert len(set(verify)) == len(verify) == 4 * (1 + len(d.chosen))  # one record per case
    assert Counter(label for label, _ in verify) == Counter({"baseline": 4, **{label: 4 for label in _chosen(d)}})
    assert _keys(run_dir, "probe") == sorted([("baseline", 0), ("baseline", 1), ("current_g1_n1", 0),
                                              ("current_g1_n1", 1), ("current_g2_n1_p3", 0), ("current_g2_n1_p3", 1)])
    assert (run_dir / "SHA256SUMS").is_file()


@pytest.mark.heavy(seconds=12)  # a runner process stopped in its verify phase, then resumed in-process (10 s)
def test_a_resume_during_verify_of_a_wrong_model_still_refits_and_measures_the_front(tmp_path: Path, wrong) -> None:
    run_dir = _interrupt_in_verify(tmp_path, "need_gib=0.001", WRONG_MODEL)
    assert _resume(run_dir) == EXIT_OK
    got = [(d.stage, _chosen(d), d.trusted) for d in _decisions(run_dir)]
    assert got == [(d.stage, _chosen(d), d.trusted) for d in _decisions(wrong[1])]
    verify = _keys(run_dir, "verify")
    assert len(set(verify)) == len(verify)


@pytest.mark.heavy  # copies the right model's run and validates it twice (2 s)
def test_a_tampered_decision_fails_the_choice_check_of_the_validation(tmp_path: Path, right) -> None:
    import json
    import shutil

    from analysis.validation.validate import validate_run

    _, run_dir = right
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    assert not [i for i in validate_run(copy).issues if i.code.startswith("choice")]
    lines = (copy / FILE_NAME).read_text().splitlines()
    doc = json.loads(lines[0])
    doc["predictions"][0]["predicted_tok_s"] *= 1.5  # a prediction its inputs do not give
    (copy / FILE_NAME).write_text("\n".join([json.dumps(doc), *lines[1:]]) + "\n")
    issues = [i for i in validate_run(copy).issues if i.code == "choice_recompute"]
    assert issues and issues[0].severity == "error" and "prediction of" in issues[0].message


@pytest.mark.slow  # a private Ray head (about 20 s to start)
@pytest.mark.serial("ray")  # two Ray clusters on one host: never at once
def test_the_ray_executor_runs_the_choose_phase_unchanged(tmp_path: Path, right) -> None:
    pytest.importorskip("ray")
    ov = _overrides(tmp_path, "need_gib=0.001", "executor=ray", "executor.ray.head_num_cpus=2",
                    "executor.ray.num_cpus_per_case=1", analyze=False)
    assert run_matrix(compose_cfg(*ov), ov) == EXIT_OK
    run_dir = tmp_path / "choose" / "t"
    assert [d.model_dump(exclude={"baseline_tok_s", "noise_pct", "noise_arms", "points", "fits", "form_reason", "half_width_pct",
                                  "predictions", "checked", "note"}) for d in _decisions(run_dir)] == \
        [d.model_dump(exclude={"baseline_tok_s", "noise_pct", "noise_arms", "points", "fits", "form_reason", "half_width_pct",
                               "predictions", "checked", "note"}) for d in _decisions(right[1])]
    assert _counts(run_dir, "verify") == _counts(right[1], "verify")
    assert (run_dir / "verify-placements.jsonl").is_file()  # the verify cases ran as Ray tasks


@pytest.mark.heavy  # a runner process stopped in its probe's re-measure, then resumed in-process (about 12 s)
def test_a_resume_during_a_probe_re_measure_runs_it_once_and_decides_it_never_again(tmp_path: Path) -> None:
    """The probe's first baseline contended: the runner decides its re-measure (``probe/baseline-r2``, held by the
    fake bench) and is stopped (SIGTERM) there; the resume runs that process once, decides no second re-measure and
    predicts from the uncontended baselines."""
    gate = tmp_path / "gate"
    ov = _overrides(tmp_path, "need_gib=0.001", "+phases.probe.runtime.env.FAKE_CONTENDED=baseline-r0",
                    f'+phases.probe.runtime.env.FAKE_BENCH_WAIT_FOR="{gate}"',
                    '+phases.probe.runtime.env.FAKE_BENCH_WAIT_LABELS="baseline-r2"', analyze=False)
    run_dir = tmp_path / "choose" / "t"
    proc = subprocess.Popen([*RUNNER, *ov], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not (
            run_dir / "logs" / "probe" / "baseline-r2.log").is_file():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, out[-3000:]
    before = (run_dir / FILE_NAME).read_bytes()
    assert [d.stage for d in _decisions(run_dir)] == ["remeasure"] and ("baseline", 2) not in _keys(run_dir, "probe")
    gate.touch()
    assert _resume(run_dir) == EXIT_OK
    remeasure, predict, *_ = _decisions(run_dir)
    assert (run_dir / FILE_NAME).read_bytes().startswith(before)  # the re-measure's line kept, not decided again
    assert remeasure.remeasured == ("probe/baseline-r0",) and predict.stage == "predict"
    assert [k for k in _keys(run_dir, "probe") if k[0] == "baseline"] == [("baseline", 0), ("baseline", 1),
                                                                          ("baseline", 2)]
    assert {"probe/baseline-r1", "probe/baseline-r2"} <= set(predict.fitted_processes)


# ----------------------------------------------------------------------------- a contended probe


@pytest.mark.heavy(seconds=10)  # one fake-bench run with analysis (about 12 s)
def test_a_probe_baseline_contended_once_is_re_measured_and_the_fit_uses_only_uncontended_processes(
        tmp_path: Path, capsys) -> None:
    """The host-load sampler of the probe's first baseline reads 0.7 foreign cores (``FAKE_CONTENDED``): it is
    re-measured in a fresh process (``probe/baseline-r2``) before anything is predicted, one ``remeasure`` decision
    records it, the fit names only uncontended processes, and the run ends VALID."""
    code, run_dir = _run(tmp_path, "need_gib=0.001", "+phases.probe.runtime.env.FAKE_CONTENDED=baseline-r0")
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    remeasure, predict, *_ = _decisions(run_dir)
    assert (remeasure.stage, remeasure.remeasured, remeasure.chosen) == ("remeasure", ("probe/baseline-r0",), ())
    assert remeasure.decided_phase is not None and [(c.label, c.repeats) for c in remeasure.decided_phase.cases] == [
        ("baseline", 1)]
    busy = {(r.record.label, r.record.repeat) for r in _runs(run_dir, "probe") if r.record.host_load.contended}
    assert busy == {("baseline", 0)} and ("baseline", 2) in _keys(run_dir, "probe")
    assert predict.stage == "predict" and "probe/baseline-r0" not in predict.fitted_processes
    assert {"probe/baseline-r1", "probe/baseline-r2"} <= set(predict.fitted_processes)
    assert len(predict.baseline_tok_s) == 2  # the two uncontended baselines: r1 and the re-measure
    line = [ln for ln in out.splitlines() if ln.startswith("choose (remeasure): ")]
    assert len(set(line)) == 1 and "probe/baseline-r0 (0.70 foreign cores, steal 0.0%)" in line[0], out  # the runner's
    # line when it decided, and the summary's
    assert "validation: VALID" in out.splitlines()[-1]  # the plan's counts include the re-measure
    assert [recompute(d) for d in _decisions(run_dir)] == [[] for _ in _decisions(run_dir)]


@pytest.mark.heavy  # one fake-bench probe with analysis (about 12 s)
def test_a_probe_contended_after_every_re_measure_stops_the_choice_in_one_honest_last_line(tmp_path: Path,
                                                                                          capsys) -> None:
    """Every probe baseline reads 0.7 foreign cores: both re-measured (``choose.probe_remeasures``, default 2: spent at
    once), then the choice stops. The last line names the contended processes, their foreign cores and what to do, never the
    verify baselines that did not run; exit 6; validation.json fails only its ``choice`` check, with that line."""
    code, run_dir = _run(tmp_path, "need_gib=0.001", "+phases.probe.runtime.env.FAKE_CONTENDED=baseline-r*")
    out = capsys.readouterr().out
    assert code == EXIT_INVALID, out
    decisions = _decisions(run_dir)
    assert [d.stage for d in decisions] == ["remeasure", "stopped"]
    assert decisions[0].remeasured == ("probe/baseline-r0", "probe/baseline-r1")
    stop = decisions[-1]
    assert stop.remeasured == ("probe/baseline-r0", "probe/baseline-r1", "probe/baseline-r2", "probe/baseline-r3")
    last = out.splitlines()[-1]
    assert last.startswith("choose: STOPPED before predicting") and last.endswith("; exit 6"), last
    assert stop.note in last and "verify" not in last.split("; validation:")[0]
    assert "expected 4 run(s)" not in out and "verify/baseline" not in out
    for text in ("probe/baseline-r3 (0.70 foreign cores, steal 0.0%)", "0 uncontended baseline process(es), 2 needed",
                 "rerun the choice on a quiet host, or raise choose.probe_remeasures (now 2)"):
        assert text in last, text
    assert not _runs(run_dir, "verify") and _keys(run_dir, "probe") == sorted(
        [("baseline", r) for r in range(4)] + [(lb, r) for lb in ("current_g1_n1", "current_g2_n1_p3") for r in (0, 1)])
    report = read_json(run_dir / "summary" / "validation.json", ValidationReport)
    assert [c.name for c in report.checks if not c.passed] == ["choice"]
    assert [i.message for i in report.errors] == [stop.note]
    summary = read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary)
    assert summary.recommended is None and stop.note in summary.lines
    assert "processes run: 8 (the probe and its re-measures; nothing predicted, so no candidate counted)" in summary.lines


@pytest.mark.heavy  # one fake-bench probe (about 10 s)
def test_a_probe_re_measure_is_decided_once_and_a_resume_plans_what_was_decided(tmp_path: Path) -> None:
    """The decision lines are the re-measures' record: with 3 re-measures allowed, the rule given the first line
    re-measures the next contended process, never one already replaced; a resume's plan holds every decided
    re-measure."""
    ov = _overrides(tmp_path, "need_gib=0.001", "+phases.probe.runtime.env.FAKE_CONTENDED=baseline-r*",
                    "choose.probe_remeasures=3", analyze=False)
    cfg = compose_cfg(*ov)
    assert run_matrix(cfg, ov) == EXIT_INVALID
    run_dir = tmp_path / "choose" / "t"
    decisions, known = _decisions(run_dir), choose_need(cfg)
    assert known is not None
    assert [(d.stage, d.remeasured) for d in decisions[:2]] == [
        ("remeasure", ("probe/baseline-r0", "probe/baseline-r1")), ("remeasure", ("probe/baseline-r2",))]
    assert decisions[2].stage == "stopped" and "now 3" in decisions[2].note
    for i in (1, 2):  # what is decided from the lines before it (its baselines' throughput: every record so far)
        again = probe_decision(cfg, run_dir, known, set(), decisions[:i])
        assert again is not None
        assert (again.stage, again.remeasured, again.decided_phase, again.note) == (
            decisions[i].stage, decisions[i].remeasured, decisions[i].decided_phase, decisions[i].note)
    resumed = decided_items(cfg, run_dir, 0, known)
    assert [sc.key for sc in resumed if sc.case.phase == "probe"] == [("probe", "baseline", r) for r in (2, 3, 4)]


@pytest.mark.heavy(seconds=15)  # one fake-bench run (about 12 s)
def test_a_contended_calibration_process_is_left_out_of_the_fit_and_its_decision_line(tmp_path: Path) -> None:
    """A calibration setting measured twice (``phases.probe.repeats=2``) with one of its processes contended: it is
    re-measured (``-r2``), the fit uses the uncontended two, and the decision records and prints only uncontended probe
    processes."""
    plain = _runs(_run(tmp_path / "look", "need_gib=0.001", "phases.probe.repeats=2", analyze=False)[1], "probe")
    label = next(r.record.label for r in plain if r.record.label != "baseline")
    code, run_dir = _run(tmp_path / "busy", "need_gib=0.001", "phases.probe.repeats=2",
                         f"+phases.probe.runtime.env.FAKE_CONTENDED={label}-r0")
    assert code == EXIT_OK
    first = _decisions(run_dir)[1]
    assert _decisions(run_dir)[0].remeasured == (f"probe/{label}-r0",)
    probe_used = [p for p in first.fitted_processes if p.startswith("probe/")]
    assert f"probe/{label}-r0" not in probe_used and {f"probe/{label}-r1", f"probe/{label}-r2"} <= set(probe_used)
    assert {f"probe/{r.record.label}-r{r.record.repeat}" for r in _runs(run_dir, "probe")} - set(probe_used) == {
        f"probe/{label}-r0"}
    line = next(ln for ln in read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary).lines
                if ln.startswith("choose (predict): model form"))
    assert f"fitted on uncontended processes {', '.join(first.fitted_processes)}" in line
    assert "from 6 probe processes in 3 arms: pooled SD " in line and "% of log tok/s, 3 df, t(3) = 3.182" in line
    assert "range of two" not in line
