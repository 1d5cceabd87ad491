"""The sequential verify phase of a choose run end to end with the fake bench (``+experiment=choose``: looks after 3, 4
and 6 blocks; ``runners.orchestration.choose_verify``).

The fake's throughput follows a known serial cost (``FAKE_COPY_FRACTION``, as ``test_choose_run.py``), so the probe's
model predicts the verified setting exactly; the rule chooses ``current_g3_n2`` with the runner-up ``current_g4_n3``.
``SWING`` makes the chosen setting's second process faster (round time x0.7): its interval contains 0 at looks 1 and 2
and excludes it at look 3 (6 blocks), where it stops ``slower``; its median (and so its check against the prediction)
is unchanged. ``WRONG_MODEL`` makes every verified setting slower than predicted: the predict decision's series, the
refit's and the front's each stop at their first look, each series after the one before it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from analysis.comparison.sequential import SequentialDesign
from analysis.model.choice import recompute
from analysis.validation.validate import validate_run
from offload_tools.choice import Prediction, Setting, verify_target
from results_schema.codec.io import dumps_model, read_json, read_jsonl
from results_schema.records.choice import FILE_NAME, SUMMARY_FILE, ChoiceDecision, ChoiceSummary, with_decided
from results_schema.records.models import CaseRun
from results_schema.records.plan import RunPlan
from results_schema.records.sequential import FILE_NAME as LOOKS, LookDecision, read_looks, with_looks
from runners.errors import EXIT_INTERRUPTED, EXIT_OK
from runners.orchestration.choose_verify import sequential_verify_items
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.sequential import look_on, phase_values
from tests.runners.helpers import RUNNER, FAKE_BENCH, compose_cfg
from tests.shared_runs import run_matrix

REPO_ROOT = Path(__file__).resolve().parents[2]
CHOSEN, RUNNER_UP = "current_g3_n2", "current_g4_n3"
"""What the rule chooses from the probe of the serial cost, and the next candidate (checked in the first test)."""
SWING = f'+phases.verify.runtime.env.FAKE_SLOW="{CHOSEN}-r1:0.7"'
WRONG_MODEL = '+phases.verify.runtime.env.FAKE_SLOW="current_g3_n2:1.5,current_g4_n3:2"'


def _overrides(root: Path, *extra: str, analyze: bool = True) -> list[str]:
    return ["+experiment=choose", "need_gib=0.001", "model=tiny", f"results_root={root}", "run_id=t",
            f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", f"analyze={str(analyze).lower()}",
            "phases.probe.measured_rounds=12", "phases.verify.measured_rounds=12",
            '+phases.probe.runtime.env.FAKE_COPY_FRACTION="0.1"', '+phases.verify.runtime.env.FAKE_COPY_FRACTION="0.1"',
            *extra]


def _run(root: Path, *extra: str) -> tuple[int, Path]:
    ov = _overrides(root, *extra)
    return run_matrix(compose_cfg(*ov), ov), root / "choose" / "t"


def _decisions(run_dir: Path) -> list[ChoiceDecision]:
    return read_jsonl(run_dir / FILE_NAME, ChoiceDecision)


def _verify_runs(run_dir: Path) -> list[CaseRun]:
    path = run_dir / "verify-runs.jsonl"
    return read_jsonl(path, CaseRun) if path.is_file() else []


def _looked(run_dir: Path) -> list[tuple[int, int, int, list[tuple[str, str]], int]]:
    return [(x.first_block, x.look, x.blocks, [(y.label, y.verdict) for y in x.labels], x.next_blocks)
            for x in read_looks(run_dir, "verify")]


@pytest.fixture(scope="module")
def swing(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[int, Path]:
    """A right model whose chosen setting is open until its third look (analysis on)."""
    return _run(tmp_path_factory.mktemp("swing"), SWING)


@pytest.mark.heavy(seconds=12)  # one fake-bench choose run with analysis, shared below (about 12 s)
def test_the_target_is_the_predicted_gap_to_the_runner_up_floored_and_declared_in_the_decision(swing) -> None:
    code, run_dir = swing
    assert code == EXIT_OK
    (d,) = _decisions(run_dir)
    vd = d.verify_design
    assert vd is not None and [c.label for c in d.chosen] == [CHOSEN]
    assert (vd.best, vd.runner_up, vd.first_block, vd.looks, vd.floor_pct) == (CHOSEN, RUNNER_UP, 0, (3, 4, 6), 5.0)
    pred = {Setting(p.group_size, p.num_in_group, p.prefetch_step).label("current"): p for p in d.predictions}
    gap = (pred[CHOSEN].retention - pred[RUNNER_UP].retention) * 100
    assert vd.predicted_gap_pct == pytest.approx(gap, rel=1e-9) and vd.target_pct == max(gap, 5.0)
    assert "sequential verify from block 1: looks after 3, 4, 6 blocks, target" in d.note
    assert recompute(d) == []  # the target is what the rule gives on the decision's own predictions
    # every look of the series ran at the declared target
    assert {(x.target_pct, x.looks) for x in read_looks(run_dir)} == {(vd.target_pct, vd.looks)}


def test_the_target_rule_takes_the_gap_above_the_floor_and_the_floor_without_a_runner_up() -> None:
    def p(g: int, ret: float, released: int) -> Prediction:
        return Prediction(Setting(g, 1, 1), (0,), released, 100 * ret, ret, ret - 0.01, ret + 0.01, -1)

    preds = [p(4, 0.9, 10), p(2, 0.8, 20), p(1, 0.6, 40)]
    t = verify_target(preds, 10, (), 5.0)
    assert (t.best, t.runner_up) == (Setting(4, 1, 1), Setting(2, 1, 1))
    assert t.gap_pct == pytest.approx(10.0) and t.target_pct == pytest.approx(10.0)
    assert verify_target(preds, 10, (), 12.0).target_pct == 12.0  # the floor
    assert verify_target(preds, 40, (), 5.0).runner_up is None  # one candidate meets the need
    assert verify_target(preds, 40, (), 5.0).target_pct == 5.0
    assert verify_target(preds, 10, (Setting(4, 1, 1),), 5.0).best == Setting(2, 1, 1)  # measured: not a candidate
    with pytest.raises(ValueError, match="floor"):
        verify_target(preds, 10, (), 0.0)


@pytest.mark.heavy  # shares the run above
def test_a_verified_setting_stops_at_the_look_where_it_is_conclusive(swing) -> None:
    _, run_dir = swing
    assert _looked(run_dir) == [(0, 1, 3, [(CHOSEN, "open")], 1), (0, 2, 4, [(CHOSEN, "open")], 2),
                                (0, 3, 6, [(CHOSEN, "slower")], 0)]
    lines = read_json(run_dir / "summary" / SUMMARY_FILE, ChoiceSummary).lines
    rec = next(x for x in lines if x.startswith("recommended: "))
    assert "(its sequential looks; vs baseline: slower (CI98.8% at look 3 (6 vs 6 processes) " in rec, rec
    assert Counter(r.record.label for r in _verify_runs(run_dir)) == Counter({"baseline": 6, CHOSEN: 6})
    (d,) = _decisions(run_dir)
    plan = with_looks(with_decided(read_json(run_dir / "plan.json", RunPlan), [d]), read_looks(run_dir))
    assert plan.processes == 6 + len(_verify_runs(run_dir))  # the probe's 6 and every verify block the looks added


@pytest.mark.heavy  # shares the run above
def test_the_verify_blocks_ran_in_abba_order_and_validate_recomputes_the_verify_looks(swing, tmp_path: Path) -> None:
    _, run_dir = swing
    cfg = compose_cfg(*_overrides(tmp_path))
    planned = [(sc.case.label, sc.repeat) for sc in
               sequential_verify_items(cfg, _decisions(run_dir), read_looks(run_dir), 0)]
    assert [(r.record.label, r.record.repeat) for r in _verify_runs(run_dir)] == planned
    assert planned[:4] == [("baseline", 0), (CHOSEN, 0), (CHOSEN, 1), ("baseline", 1)]
    report = validate_run(run_dir)
    assert report.valid, [i.message for i in report.issues if i.severity == "error"]
    assert {c.name: c.passed for c in report.checks if c.name in ("sequential", "choice")} == {
        "sequential": True, "choice": True}
    # a look whose verdict its processes do not give, and a look at a target or a pairing the decision did not declare
    for n, (old, new, code, words) in enumerate((('"verdict":"slower"', '"verdict":"equivalent"', "sequential_recompute",
                                   "recorded equivalent"),
                                  ('"target_pct":', '"target_pct":1', "choice_verify_design", "declared"),
                                  ('"pairing":"none"', '"pairing":"block"',
                                   "choice_verify_design", "declared"))):
        copy = tmp_path / f"{code}-{n}"
        shutil.copytree(run_dir, copy)
        lines = (copy / LOOKS).read_text().splitlines()
        lines[-1] = lines[-1].replace(old, new, 1)
        (copy / LOOKS).write_text("\n".join(lines) + "\n")
        msgs = [i.message for i in validate_run(copy).issues if i.code == code]
        assert msgs and words in msgs[0], msgs


@pytest.mark.heavy  # shares the run above
def test_validate_holds_the_verify_looks_and_the_series_a_decision_declared_to_the_config(swing, tmp_path: Path) -> None:
    _, run_dir = swing
    (d,) = _decisions(run_dir)
    vd = d.verify_design
    assert vd is not None
    lines = read_looks(run_dir, "verify")
    # the decision and its looks under alpha 0.04, the looks re-made by the runner's look_on on the recorded processes:
    # they agree with each other (check choice) and with themselves (check sequential), and stop where the recorded did
    other = SequentialDesign(tuple(vd.looks), vd.target_pct, 0.04, vd.spending)
    remade: list[LookDecision] = []
    while (nxt := look_on("verify", other, "baseline", [CHOSEN], remade, phase_values(run_dir, "verify"))) is not None:
        remade.append(nxt)
    assert [(x.blocks, x.next_blocks) for x in remade] == [(x.blocks, x.next_blocks) for x in lines]
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / LOOKS).write_text("".join(dumps_model(x) + "\n" for x in remade))
    (copy / FILE_NAME).write_text(dumps_model(d.model_copy(update={
        "verify_design": vd.model_copy(update={"alpha": 0.04})})) + "\n")
    write_sha256sums(copy)  # as a hand that edits the records would
    errors = [(i.code, i.message) for i in validate_run(copy).issues if i.severity == "error"]
    head = "verify: the recorded design is not what the run declared: "
    assert errors == [
        ("sequential_design", head + "alpha 0.04 recorded (look 1, look 2, look 3); declared 0.05 (every verify "
                                     "series' design: runners.orchestration.choose_decide)"),
        ("sequential_design", head + "decision predict's verify_design (series from block 1): alpha 0.04; "
                                     "declared 0.05 (every verify series' design: runners.orchestration.choose_decide)")]


@pytest.mark.heavy(seconds=14)  # one fake-bench choose run with analysis (about 15 s)
def test_a_refit_and_the_front_each_start_their_own_look_series_after_the_one_before(tmp_path: Path) -> None:
    code, run_dir = _run(tmp_path, WRONG_MODEL)
    assert code == EXIT_OK
    decisions = _decisions(run_dir)
    assert [d.stage for d in decisions] == ["predict", "refit", "front"]
    designs = [d.verify_design for d in decisions]
    assert all(vd is not None for vd in designs)
    assert [vd.first_block for vd in designs if vd is not None] == [0, 3, 6]
    labels = [[c.label for c in d.chosen] for d in decisions]
    assert _looked(run_dir) == [(3 * i, 1, 3, [(lb, "slower") for lb in ls], 0) for i, ls in enumerate(labels)]
    runs = _verify_runs(run_dir)
    assert sorted(r.record.repeat for r in runs if r.record.label == "baseline") == list(range(9))
    for i, ls in enumerate(labels):  # each series' settings in its own blocks, paired with its own baselines
        assert all(sorted(r.record.repeat for r in runs if r.record.label == lb) == [3 * i, 3 * i + 1, 3 * i + 2]
                   for lb in ls)
    plan = with_looks(with_decided(read_json(run_dir / "plan.json", RunPlan), decisions), read_looks(run_dir))
    assert plan.processes == 6 + len(runs)
    report = validate_run(run_dir)
    assert report.valid, [i.message for i in report.issues if i.severity == "error"]
    assert [recompute(d) for d in decisions] == [[], [], []]


# ----------------------------------------------------------------------------- kill and resume


def _interrupt(root: Path, wait_label: str, done: int) -> Path:
    """A runner process (analysis off, ``SWING``) whose verify process ``wait_label`` is held by the fake bench and
    which is stopped (SIGTERM) once ``done`` verify processes are recorded and that one started; returns the run
    directory (the gate file is created after)."""
    gate = root / "gate"
    ov = _overrides(root, SWING, f'+phases.verify.runtime.env.FAKE_BENCH_WAIT_FOR="{gate}"',
                    f'+phases.verify.runtime.env.FAKE_BENCH_WAIT_LABELS="{wait_label}"', analyze=False)
    run_dir = root / "choose" / "t"
    proc = subprocess.Popen([*RUNNER, *ov], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not (
            len(_verify_runs(run_dir)) == done and (run_dir / "logs" / "verify" / f"{wait_label}.log").is_file()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, out[-3000:]
    gate.touch()
    return run_dir


def _resume(run_dir: Path) -> int:
    ov = [f"resume={run_dir}", "progress=false", "analyze=false"]
    return run_matrix(compose_cfg(*ov), ov)


@pytest.mark.heavy  # a runner process stopped in its first verify block (about 10 s)
def test_the_target_is_recorded_before_the_first_verify_block_runs(tmp_path: Path) -> None:
    run_dir = _interrupt(tmp_path, f"{CHOSEN}-r0", 1)  # block 1: baseline-r0 recorded, the setting's r0 held
    (d,) = _decisions(run_dir)
    assert d.verify_design is not None and d.verify_design.target_pct >= 5.0
    assert [(r.record.label, r.record.repeat) for r in _verify_runs(run_dir)] == [("baseline", 0)]
    assert not (run_dir / LOOKS).exists()  # no look yet: the design came before any verify data


@pytest.mark.heavy(seconds=13)  # a runner process stopped after its first look, then resumed in-process (about 15 s)
def test_a_kill_after_a_look_and_a_resume_keep_the_recorded_lines_and_take_the_next_looks(tmp_path: Path,
                                                                                           swing) -> None:
    run_dir = _interrupt(tmp_path, f"{CHOSEN}-r3", 6)  # block 4 (after look 1; even: the setting first) held
    looks_before, decisions_before = (run_dir / LOOKS).read_bytes(), (run_dir / FILE_NAME).read_bytes()
    assert [json.loads(x)["look"] for x in looks_before.decode().splitlines()] == [1]
    assert _resume(run_dir) == EXIT_OK
    assert (run_dir / LOOKS).read_bytes().startswith(looks_before)  # look 1 kept byte for byte, not re-made
    assert (run_dir / FILE_NAME).read_bytes() == decisions_before  # the same decision
    assert _looked(run_dir) == _looked(swing[1])  # looks 2 and 3 on the recorded blocks plus the new ones
    keys = [(r.record.label, r.record.repeat) for r in _verify_runs(run_dir)]
    assert len(set(keys)) == len(keys) == 12  # one record per process
    assert validate_run(run_dir).valid
