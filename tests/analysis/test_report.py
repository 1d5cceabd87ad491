"""Claims about summary/ outputs, the independent verification and the CLI."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from analysis.aggregate import aggregate
from analysis.cli import main
from analysis.load import load_run
from analysis.report.summary import write_summary
from analysis.verify import verify
from results_schema.codec.io import read_json
from results_schema.records.validation import ValidationReport


@pytest.fixture(scope="module")
def reported(tmp_path_factory, valid_run):
    run = tmp_path_factory.mktemp("rep") / "run"
    shutil.copytree(valid_run, run)
    table = write_summary(run)
    return run, table


def test_write_summary_writes_every_output(reported):
    run, _table = reported
    names = {p.name for p in (run / "summary").iterdir()}
    assert {"comparison-summary.json", "comparison-summary.csv", "comparison-summary.md", "validation.json",
            "pareto.png", "retention.png"} <= names
    assert read_json(run / "summary" / "validation.json", ValidationReport).valid
    doc = json.loads((run / "summary" / "comparison-summary.json").read_text(),
                     parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert len(doc["rows"]) == 9 and len(doc["comparison"]) == 4
    assert (run / "summary" / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_returned_table_has_the_agreed_columns(reported):
    _run, table = reported
    assert table.startswith("validation: VALID")
    header = [line for line in table.splitlines() if line.startswith("| phase")][0]
    for col in ("label", "G", "N", "selected layers", "offloaded bytes", "throughput tok/s",
                "retention vs baseline", "Pareto"):
        assert f"| {col} |" in header
    assert "| current_g4_n1 | current | 4 | 1 | 3,7 |" in table


def test_bytes_and_layers_come_from_evidence_not_labels(tmp_path, valid_run):
    data = load_run(valid_run)
    s = aggregate(data).set_index("label")
    assert s.loc["current_g4_n2", "selected_layers"] == "2,3,6,7"
    assert s.loc["current_g4_n2", "offloaded_bytes"] == 4 * 18_688
    assert s.loc["baseline", "retention"] == 1.0
    assert s.loc["baseline", "pareto"]


def test_aggregate_statistics_match_pandas_definitions(valid_run):
    data = load_run(valid_run)
    s = aggregate(data).set_index("label")
    thr = data.runs[data.runs["label"] == "current_g8_n1"]["throughput_tok_s"]
    assert s.loc["current_g8_n1", "throughput_median_tok_s"] == thr.median()
    assert s.loc["current_g8_n1", "throughput_stdev_tok_s"] == pytest.approx(thr.std(ddof=1))
    lat = data.rounds[data.rounds["label"] == "current_g8_n1"]["elapsed_s"]
    assert s.loc["current_g8_n1", "round_latency_p95_s"] == pytest.approx(lat.quantile(0.95))
    assert s.loc["current_g8_n1", "rounds"] == 9


def test_verify_recomputes_the_summary_exactly(reported):
    run, _ = reported
    res = verify(run)
    assert res.ok, res.mismatches
    assert res.compared > 100 and res.max_abs_diff_printed == 0.0


def test_verify_detects_a_tampered_summary(tmp_path, reported):
    run, _ = reported
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    p = copy / "summary" / "comparison-summary.json"
    doc = json.loads(p.read_text())
    doc["rows"][1]["throughput_median_tok_s"] += 0.01
    p.write_text(json.dumps(doc))
    res = verify(copy)
    assert not res.ok and "throughput_median_tok_s" in res.mismatches[0]
    assert main(["verify", str(copy)]) == 1


@pytest.mark.heavy  # measured 1.5 s in the fast tier (its budget is 2 minutes)
def test_cli_report_validate_verify_recommend(tmp_path, valid_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    assert main(["report", str(run)]) == 0
    assert main(["validate", str(run)]) == 0
    assert main(["verify", str(run)]) == 0
    capsys.readouterr()
    assert main(["recommend", str(run), "--need-gib", str(3 * 18_688 / 2**30)]) == 0
    out = capsys.readouterr().out
    assert "recommendation: current_g4_n2" in out or "recommendation: official_g4_n2" in out \
        or "recommendation: current_g2_n1" in out or "recommendation: official_g2_n1" in out
    assert "model (serial)" in out
    assert main(["recommend", str(run), "--need-gib", "100"]) == 1


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_invalid_run_report_exits_nonzero(tmp_path, fixture_runs):
    run = tmp_path / "run"
    shutil.copytree(fixture_runs["synthetic_edge_traceback"], run)
    assert main(["report", str(run)]) == 1
    md = (run / "summary" / "comparison-summary.md").read_text()
    assert "INVALID" in md and "traceback_in_log" in md


def test_csv_has_one_row_per_label(reported):
    run, _ = reported
    df = pd.read_csv(run / "summary" / "comparison-summary.csv")
    assert list(df["label"])[0] == "baseline" and len(df) == 9


def test_run_with_only_failures_still_reports(tmp_path):
    from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir

    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", [SynthCase("official_g4_n1", "official", 4, 1,
                                                                                 fail=True)], repeats=1)])
    table = write_summary(run)
    assert table.startswith("validation: VALID")
    assert (run / "summary" / "validation.json").is_file()


def test_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.yaml"):
        write_summary(tmp_path)
    assert main(["report", str(tmp_path)]) == 2


def test_run_with_plan_but_no_case_files_is_invalid_not_a_crash(tmp_path, valid_run):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(valid_run / "config.yaml", run / "config.yaml")
    shutil.copy(valid_run / "plan.json", run / "plan.json")
    table = write_summary(run)
    assert table.startswith("validation: INVALID")
    rep = read_json(run / "summary" / "validation.json", ValidationReport)
    assert {i.code for i in rep.errors} == {"count_mismatch"}


def test_summary_lists_token_digest_status_per_case(reported):
    run, _ = reported
    doc = json.loads((run / "summary" / "comparison-summary.json").read_text())
    assert len(doc["token_digests"]) == 27
    assert {d["status"] for d in doc["token_digests"]} == {"identical"}


def test_verify_recomputes_pareto_flags(tmp_path, reported):
    run, _ = reported
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    p = copy / "summary" / "comparison-summary.json"
    doc = json.loads(p.read_text())
    row = next(r for r in doc["rows"] if r["label"] == "current_g4_n1")
    row["pareto"] = not row["pareto"]
    p.write_text(json.dumps(doc))
    res = verify(copy)
    assert [m for m in res.mismatches if "current_g4_n1 pareto" in m]
