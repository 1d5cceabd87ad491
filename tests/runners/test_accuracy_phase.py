"""The project runner's accuracy phase with a fake engine (no vLLM): manifest choice and
pre-launch check, typed completion lines, resume, and the end-of-run accuracy verifier."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conf.schema import ConfigError

from results_schema.records.accuracy import AccuracyCaseRun, AccuracyResult, AccuracyVerification
from results_schema.records.case import CaseSpec
from results_schema.cli import check_paths
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.protocols import protocol_spec
from runners.errors import EXIT_ACCURACY, EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_OK
from tests.shared_runs import run_matrix

from tests.runners.helpers import compose_cfg

FAKE_ACCURACY = Path(__file__).with_name("fake_accuracy.py")
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "eval_datasets" / "fixtures"


def run_accuracy(results_root: Path, *extra: str, run_id: str = "a", analyze: bool = True) -> tuple[int, Path]:
    """Only the tiny accuracy phase (baseline + current (4,1), gsm8k + gpqa fixtures) with the fake engine."""
    overrides = [f"results_root={results_root}", f"run_id={run_id}", "progress=false",
                 f"analyze={str(analyze).lower()}", "~matrix@phases.same_runtime",
                 "+matrix@phases.accuracy=accuracy_tiny",
                 f"accuracy_command=[{sys.executable},{FAKE_ACCURACY}]", *extra]
    cfg = compose_cfg(*overrides)
    code = run_matrix(cfg, overrides)
    return code, results_root / str(cfg.experiment_name) / run_id


def test_default_manifest_is_the_committed_fixtures_and_reproduce_uses_the_generated_sets() -> None:
    cfg = compose_cfg("+matrix@phases.accuracy=accuracy_tiny")
    assert cfg.phases["accuracy"].accuracy_manifest == "eval_datasets/fixtures/manifest.json"
    assert (REPO / cfg.phases["accuracy"].accuracy_manifest).is_file()
    cfg = compose_cfg("+experiment=reproduce")
    assert cfg.phases["accuracy"].accuracy_manifest == "eval_datasets/synthetic/manifest.json"
    assert (REPO / cfg.phases["accuracy"].accuracy_manifest).is_file()


def protocols_of(run: Path) -> set[tuple[str, str, str]]:
    """(task, protocol name, protocol sha256) of every result of the run; checks each case file and result."""
    out = set()
    for line in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun):
        case = read_json(line.command[line.command.index("--case") + 1], CaseSpec)  # the case file it ran
        assert case.accuracy is not None and case.accuracy.protocol in ("qwen-chat-v1", "boxed-chat-v1")
        for o in line.results:
            r = read_json(run / o.result_path, AccuracyResult)
            assert (r.protocol_name, r.protocol_sha256) == (o.protocol_name, o.protocol_sha256)
            assert r.protocol == protocol_spec(r.protocol_name, r.task)
            out.add((o.task, o.protocol_name, o.protocol_sha256))
    return out


def _assert_limited_run_recorded_and_verified(run: Path, code: int, out: str) -> None:
    """The default tiny accuracy run: three processes (baseline twice), typed lines, a LIMITED verification."""
    assert code == EXIT_OK, out
    lines = read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun)
    assert [(x.label, x.repeat, x.tasks) for x in lines] == [("baseline", 0, ("gsm8k", "gpqa")),
                                                              ("current_g4_n1", 0, ("gsm8k", "gpqa")),
                                                              ("baseline", 1, ("gsm8k", "gpqa"))]  # baseline twice
    for line in lines:
        assert line.dataset_manifest_path == str(FIXTURES / "manifest.json")
        case = read_json(line.command[line.command.index("--case") + 1], CaseSpec)  # the case file it ran
        assert case.accuracy is not None and case.accuracy.manifest == str(FIXTURES / "manifest.json")
        assert {o.mode for o in line.results} == {"limited"}
        for o in line.results:
            assert (run / o.result_path).is_file()
            assert read_json(run / o.result_path, AccuracyResult).examples_sha256 == o.examples_sha256
    assert not (run / "accuracy-failures.jsonl").exists()
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert report.passed and report.mode == "limited" and len(report.cases) == 6  # 3 processes x 2 tasks
    assert all(c.identical_to_baseline for c in report.cases)
    assert "LIMITED" in (run / "summary" / "accuracy-verification.md").read_text().splitlines()[0]
    assert "accuracy accuracy: PASSED (LIMITED" in out
    page = (run / "summary" / "report.html").read_text()  # re-rendered after the verifier wrote its report
    assert "Accuracy verification" in page and 'id="accuracy-verdict-accuracy-verification.json"' in page
    sums = (run / "SHA256SUMS").read_text()
    for name in ("summary/accuracy-verification.json", "summary/accuracy-verification.md", "summary/report.html",
                 "accuracy-accuracy-cases.jsonl"):
        assert f"  {name}\n" in sums
    assert check_paths([run]) == 0  # every file kind, the completion lines included, validates


def test_missing_manifest_stops_before_any_process(tmp_path: Path, capsys) -> None:
    code, run = run_accuracy(tmp_path, "phases.accuracy.accuracy_manifest=no/such/manifest.json")
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG
    assert "accuracy_manifest='no/such/manifest.json'" in out and "does not exist" in out
    assert str(REPO / "no/such/manifest.json") in out
    assert not run.exists()


def test_manifest_with_a_mismatched_file_stops_before_any_process(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    with open(data / "gpqa-fixture.jsonl", "a") as fh:
        fh.write("\n")
    code, run = run_accuracy(tmp_path / "results", f"phases.accuracy.accuracy_manifest={data / 'manifest.json'}")
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG, out
    assert "gpqa-fixture.jsonl" in out and "accuracy phase 'accuracy'" in out
    assert not run.exists()


def test_manifest_without_an_entry_for_a_task_stops(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    m = json.loads((data / "manifest.json").read_text())
    m["datasets"] = [d for d in m["datasets"] if d["task"] != "gpqa"]
    (data / "manifest.json").write_text(json.dumps(m))
    code, _ = run_accuracy(tmp_path / "results", f"phases.accuracy.accuracy_manifest={data / 'manifest.json'}")
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG and "'gpqa'" in out


@pytest.mark.heavy  # a whole runner matrix in process with real case processes (tokenizer, scoring, analysis) (18 s CPU)
def test_output_difference_fails_the_run_with_the_accuracy_exit_code(tmp_path: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ACCURACY", "current_g4_n1=differ")
    code, run = run_accuracy(tmp_path)
    out = capsys.readouterr().out
    assert code == EXIT_ACCURACY, out
    assert "accuracy accuracy: FAILED" in out
    # the live check: the differing case is never printed or counted as ok
    (prog,) = [ln for ln in out.splitlines() if ln.startswith("[2/3] accuracy/current_g4_n1-r0:")]
    assert "OUTPUTS DIFFER from the accuracy baseline on gsm8k, gpqa" in prog and ": ok" not in prog, prog
    assert "done: 2 ok, 1 with tokens differing from the baseline," in out, out[-3000:]
    (again,) = [ln for ln in out.splitlines() if ln.startswith("[3/3] accuracy/baseline-r1:")]
    assert "outputs identical to the first baseline run" in again, again
    last = [ln for ln in out.splitlines() if ln.strip()][-1]  # a failed verification never ends "VALID"
    assert last.startswith("FAILED: accuracy verification of phase(s) accuracy; validation: ") and \
        last.endswith(f"exit {EXIT_ACCURACY}"), last
    page = (run / "summary" / "report.html").read_text()  # the report's headline is not VALID either
    assert "<title>INVALID — offload report" in page and 'id="accuracy-failed"' in page
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert not report.passed
    assert any(c.name == "identity" and c.status == "fail" and c.label == "current_g4_n1" for c in report.checks)
    assert "summary/accuracy-verification.json" in (run / "SHA256SUMS").read_text()


@pytest.mark.heavy  # a whole runner matrix in process with real case processes (tokenizer, scoring, analysis) (16 s CPU)
def test_crashed_case_is_a_failure_line_and_the_verifier_names_the_missing_case(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ACCURACY", "current_g4_n1=crash")
    code, run = run_accuracy(tmp_path)
    out = capsys.readouterr().out
    assert code == EXIT_CASE_FAILURES, out
    assert [x.label for x in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun)] == [
        "baseline", "baseline"]  # the baseline runs twice; the offload case crashed
    assert "current_g4_n1" in (run / "accuracy-failures.jsonl").read_text()
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert not report.passed  # the baseline has no offload case to compare with


@pytest.mark.heavy(seconds=10)  # a whole runner matrix in process with real case processes, then its resume (27 s CPU)
def test_accuracy_phase_records_cases_verifies_in_limited_mode_and_resume_skips_completed_cases(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    count = tmp_path / "count.txt"
    monkeypatch.setenv("FAKE_ACCURACY_COUNT", str(count))  # the fake engine's launch counter (changes no output)
    code, run = run_accuracy(tmp_path / "results")
    _assert_limited_run_recorded_and_verified(run, code, capsys.readouterr().out)
    assert protocols_of(run) == {(t, "qwen-chat-v1", protocol_spec("qwen-chat-v1", t).sha256())
                                 for t in ("gsm8k", "gpqa")}  # the default: the published protocol
    assert count.read_text().split() == ["baseline", "current_g4_n1", "baseline"]
    # as if interrupted after the second case's process wrote its files but before its line was recorded
    cases = run / "accuracy-accuracy-cases.jsonl"
    cases.write_text(cases.read_text().splitlines(keepends=True)[0])
    count.unlink()
    capsys.readouterr()
    overrides = ["progress=false", f"resume={run}"]
    code = run_matrix(compose_cfg(*overrides), overrides)
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert "resume: 1 of 3 cases already recorded" in out
    assert count.read_text().split() == ["current_g4_n1", "baseline"]  # the completed baseline r0 was not re-run
    assert [x.label for x in read_jsonl(cases, AccuracyCaseRun)] == ["baseline", "current_g4_n1", "baseline"]
    assert list((run / "quarantine").rglob("current_g4_n1.gsm8k.result.json"))  # partial files moved aside
    assert read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification).passed
    assert check_paths([run]) == 0


def test_dry_run_does_not_need_the_manifest(tmp_path: Path, capsys) -> None:
    code, run = run_accuracy(tmp_path, "dry_run=true", "phases.accuracy.accuracy_manifest=/nowhere/manifest.json")
    assert code == EXIT_OK and not run.exists()


@pytest.mark.heavy  # a whole runner matrix in process with real case processes (tokenizer, scoring) (10 s CPU)
def test_config_chooses_the_manifest_and_resume_refuses_a_changed_one(tmp_path: Path, capsys) -> None:
    """The configured manifest reaches every line and result; a resume refuses a changed one. The run has
    ``analyze=false``: its cases are recorded and no verifier runs."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    code, run = run_accuracy(tmp_path / "results", f"phases.accuracy.accuracy_manifest={data / 'manifest.json'}",
                             analyze=False)
    assert code == EXIT_OK
    assert not (run / "summary" / "accuracy-verification.json").exists()  # no analysis, no verifier
    for line in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun):
        assert line.dataset_manifest_path == str(data / "manifest.json")
    for p in (run / "records" / "accuracy").rglob("*.result.json"):
        assert read_json(p, AccuracyResult).dataset_manifest_path == str((data / "manifest.json").resolve())
    cases = run / "accuracy-accuracy-cases.jsonl"
    cases.write_text(cases.read_text().splitlines(keepends=True)[0])
    m = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps(m, indent=1))  # same entries, different bytes
    capsys.readouterr()
    overrides = ["progress=false", f"resume={run}"]
    assert run_matrix(compose_cfg(*overrides), overrides) == 3
    out = capsys.readouterr().out
    assert "resume: accuracy phase 'accuracy' case 'baseline' r0 used dataset manifest" in out


@pytest.mark.heavy  # a whole runner matrix in process with real case processes (tokenizer, scoring, analysis) (20 s CPU)
def test_phase_backend_and_limit_reach_every_case_and_are_verified(tmp_path: Path, capsys) -> None:
    """Offload_backend=prefetch (as published) is recorded by each offload case and checked by the
    verifier against plan.json; the tolerance is reported; the CSV sits next to the JSON and Markdown.
    ``accuracy_limit`` (the same run) reaches every case and the verifier: a limited verification."""
    code, run = run_accuracy(tmp_path, "phases.accuracy.offload_backend=prefetch",
                             "phases.accuracy.max_accuracy_drop=0.05", "phases.accuracy.accuracy_limit=3")
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    assert {x.limit for x in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun)} == {3}
    for line in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun):
        assert line.offload.offload_backend == ("auto" if line.label == "baseline" else "prefetch")
        for o in line.results:
            assert read_json(run / o.result_path, AccuracyResult).offload.offload_backend == line.offload.offload_backend
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert report.passed and report.max_accuracy_drop == 0.05 and report.plan_path == str(run / "plan.json")
    assert report.limit == 3 and {c.num_examples for c in report.cases} == {3}
    backend = [c for c in report.checks if c.name == "backend"]
    assert len(backend) == 6 and {c.status for c in backend} == {"pass"}  # 3 processes (baseline twice) x 2 tasks
    assert {(c.label, c.offload_backend) for c in report.cases} == {("baseline", "auto"), ("current_g4_n1", "prefetch")}
    rows = (run / "summary" / "accuracy-verification.csv").read_text().splitlines()
    assert rows[0].startswith("label,implementation,offload_group_size") and len(rows) == 7  # header + 3 processes x 2 tasks
    assert "current_g4_n1,current,4,1,1,prefetch,gsm8k," in "\n".join(rows)
    assert "  summary/accuracy-verification.csv\n" in (run / "SHA256SUMS").read_text()


def test_negative_max_accuracy_drop_stops_before_any_process(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^phases\.accuracy\.max_accuracy_drop=-0\.5: must be a number in \[0, 1\] "
                                          r"\(fraction of accuracy\)$"):  # refused when typed: the CLI exits 2
        run_accuracy(tmp_path, "phases.accuracy.max_accuracy_drop=-0.5")
    assert not (tmp_path / "default").exists()
