"""Published accuracy: each case's recorded backend is checked against plan.json, the
``max_accuracy_drop`` tolerance of the drop rule, and ``accuracy-verification.csv``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from analysis.accuracy.verifier import check_max_accuracy_drop, main, render_markdown, verify, write_report
from analysis.accuracy.table import CSV_COLUMNS, REPORT_CSV
from results_schema.records.accuracy import AccuracyVerification
from results_schema.codec.io import read_json, write_json
from results_schema.records.plan import PlannedCase, PlannedPhase, RunPlan

from .conftest import FakeEngine, make_run, offload

LABELS = ("baseline", "current_g4_n1", "current_g2_n1")


def _plan(run_dir: Path, backends: dict[str, str], phase: str = "accuracy") -> Path:
    cases = tuple(PlannedCase(
        label=label, implementation="baseline" if label == "baseline" else "current",
        offload_group_size=0 if label == "baseline" else int(label.split("_g")[1].split("_")[0]),
        offload_num_in_group=0 if label == "baseline" else 1, offload_prefetch_step=1, offload_params=(),
        offload_backend=backend, repeats=1, expect_error=None, runtime="cpu", device="cpu",
        accuracy_tasks=("gsm8k", "gpqa"), expected_runs=1, expected_failures=0) for label, backend in backends.items())
    plan = RunPlan(experiment="accuracy", run_id="r", processes=len(cases),
                   phases=(PlannedPhase(name=phase, kind="accuracy", cases=cases, processes=len(cases)),))
    path = run_dir / "plan.json"
    write_json(path, plan)
    return path


def _checks(report: AccuracyVerification, name: str) -> list[tuple[str, str | None, str]]:
    return [(c.status, c.label, c.message) for c in report.checks if c.name == name]


@pytest.fixture
def records(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A run directory's ``records/accuracy`` (fake engine; every case recorded ``offload_backend='auto'``)."""
    return make_run(tmp_path / "run" / "records" / "accuracy", tiny_model_dir)


def test_backend_is_checked_against_the_plan(records: Path) -> None:
    plan_path = _plan(records.parents[1], {label: "auto" for label in LABELS})
    report = verify(records, limit=50)
    assert report.passed and report.plan_path == str(plan_path.resolve())
    backend = _checks(report, "backend")
    assert len(backend) == 6 and {s for s, _, _ in backend} == {"pass"}
    assert "Backends: checked against" in render_markdown(report)


def test_a_backend_other_than_planned_fails_naming_both(records: Path) -> None:
    _plan(records.parents[1], {"baseline": "auto", "current_g4_n1": "prefetch", "current_g2_n1": "prefetch"})
    report = verify(records, limit=50)
    assert not report.passed
    fails = [(label, m) for s, label, m in _checks(report, "backend") if s == "fail"]
    assert {label for label, _ in fails} == {"current_g4_n1", "current_g2_n1"} and len(fails) == 4
    assert all("ran with offload_backend='auto', planned 'prefetch'" in m for _, m in fails)
    verdicts = {(c.label, c.task): c.verdict for c in report.cases}
    assert verdicts[("baseline", "gsm8k")] == "pass" and verdicts[("current_g4_n1", "gpqa")] == "fail"


def test_a_case_missing_from_the_plan_fails(records: Path) -> None:
    _plan(records.parents[1], {"baseline": "auto", "current_g4_n1": "auto"})
    fails = [label for s, label, _ in _checks(verify(records, limit=50), "backend") if s == "fail"]
    assert fails == ["current_g2_n1", "current_g2_n1"]


def test_stand_alone_directory_says_the_backend_was_not_checked(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = make_run(tmp_path / "alone", tiny_model_dir)
    report = verify(run, limit=50)
    assert report.passed and report.plan_path is None
    backend = _checks(report, "backend")
    assert len(backend) == 6 and all(s == "skipped" and "not checked: no plan.json" in m for s, _, m in backend)
    assert "Backends: not checked (no plan.json" in render_markdown(report)


def _drop_run(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """GPQA: the baseline answers ``A`` everywhere, the case never parses (accuracy 0)."""
    class Right(FakeEngine):
        def generate(self, prompts, sampling):
            gens = super().generate(prompts, sampling)
            return [g.__class__(text="A", token_ids=(65,), finish_reason="stop") for g in gens]

    class Wrong(FakeEngine):
        def generate(self, prompts, sampling):
            gens = super().generate(prompts, sampling)
            return [g.__class__(text="maybe", token_ids=(1,), finish_reason="length") for g in gens]

    make_run(tmp_path / "r", tiny_model_dir, datasets=("gpqa",), cases=(("baseline", offload()),),
             engine_factory=Right)
    return make_run(tmp_path / "r", tiny_model_dir, datasets=("gpqa",), cases=(("sync", offload(2, 1)),),
                    engine_factory=Wrong)


def test_tolerance_boundary_of_the_drop_rule(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = _drop_run(tmp_path, tiny_model_dir)
    base_acc = next(c.accuracy for c in verify(run, limit=50).cases if c.label == "baseline")
    assert base_acc > 0  # the drop is the baseline's accuracy
    for tolerance, ok in ((0.0, False), (base_acc - 1e-6, False), (base_acc, True), (1.0, True)):
        report = verify(run, limit=50, max_accuracy_drop=tolerance)
        (drop,) = _checks(report, "drop")
        assert (drop[0] == "pass") is ok, (tolerance, drop)
        assert report.max_accuracy_drop == tolerance
        assert any(s == "fail" for s, _, _ in _checks(report, "identity"))  # the tolerance never relaxes identity
        assert not report.passed
    assert f"max_accuracy_drop = {base_acc:.4f}" in render_markdown(verify(run, limit=50, max_accuracy_drop=base_acc))


@pytest.mark.parametrize("bad", [-0.01, 1.5, float("nan"), "x", True])
def test_tolerance_outside_zero_one_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"max_accuracy_drop = .* is invalid: must be a number in \[0, 1\] \(fraction of accuracy\)$"):
        check_max_accuracy_drop(bad)  # type: ignore[arg-type]


def test_cli_refuses_a_negative_tolerance_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--max-accuracy-drop", "-0.1"]) == 2
    err = capsys.readouterr().err
    assert "--max-accuracy-drop: max_accuracy_drop = '-0.1' is invalid" in err and "Traceback" not in err


def test_csv_next_to_json_and_markdown(records: Path, tmp_path: Path) -> None:
    _plan(records.parents[1], {"baseline": "auto", "current_g4_n1": "prefetch", "current_g2_n1": "auto"})
    report = verify(records, limit=50)
    out = tmp_path / "summary"
    json_path, md_path = write_report(out, report)
    assert json_path.parent == md_path.parent == out and read_json(json_path, AccuracyVerification) == report
    with (out / REPORT_CSV).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(report.cases) == 6
    by = {(r["label"], r["task"]): r for r in rows}
    g4 = by[("current_g4_n1", "gsm8k")]
    assert (g4["implementation"], g4["offload_group_size"], g4["offload_num_in_group"], g4["offload_prefetch_step"],
            g4["offload_backend"], g4["verdict"]) == ("current", "4", "1", "1", "auto", "fail")
    g2 = by[("current_g2_n1", "gpqa")]
    summary = next(c for c in report.cases if (c.label, c.task) == ("current_g2_n1", "gpqa"))
    assert (int(g2["num_examples"]), int(g2["correct"]), float(g2["accuracy"]), float(g2["drop_vs_baseline"]),
            g2["verdict"]) == (summary.num_examples, summary.correct, summary.accuracy, 0.0, "pass")
    assert by[("baseline", "gpqa")]["offload_group_size"] == "0"
