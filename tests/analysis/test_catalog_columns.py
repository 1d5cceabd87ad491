"""The catalog's record tables follow the models: a column per field, serving rows, NULL for older runs."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import duckdb
import pytest
from pydantic import BaseModel

from analysis.catalog.store import build, connect, query
from analysis.catalog.columns import TABLE_MODELS, sql_type, table_columns
from analysis.catalog.schema import SCHEMA_VERSION
from analysis.catalog.columns import _unwrap

from .conftest import FIXTURES


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("cols") / "catalog.duckdb"
    build(FIXTURES, path)
    return path


def _leaf_paths(cls: type[BaseModel], path: tuple[str, ...] = (), items: str | None = None) -> list[tuple[str, ...]]:
    """Every leaf field path of a model, walked here independently of the catalog's own walk (the ``items``
    field's item model is walked too: its leaves are paths inside one item)."""
    out = []
    for name, info in cls.model_fields.items():
        inner = _unwrap(info.annotation)
        if ".".join(path + (name,)) == items:
            out += [("*",) + p for p in _leaf_paths(get_args(inner)[0])]
        elif isinstance(inner, type) and issubclass(inner, BaseModel):
            out += _leaf_paths(inner, path + (name,))
        else:
            out.append(path + (name,))
    return out


@pytest.mark.parametrize("table", sorted(TABLE_MODELS))
def test_every_model_field_has_a_column_in_the_built_catalog(db, table):
    layout = TABLE_MODELS[table]
    by_path = {("*",) + c.path if c.from_item else c.path: c.name for c in table_columns(table)}
    cols = set(query(db, f"SELECT column_name FROM information_schema.columns WHERE table_name = '{table}'")
               ["column_name"])
    missing = []
    for p in _leaf_paths(layout.model, items=layout.items):
        dotted = ".".join(p)
        if any(dotted == e or dotted.startswith(e + ".") for e in layout.elsewhere):
            continue
        if by_path.get(p) not in cols:
            missing.append(dotted)
    assert missing == [], f"{layout.model.__name__} fields without a column in {table}: {missing}"


def test_every_model_table_is_derived_including_the_accuracy_tables():
    assert {"accuracy_cases", "accuracy_verdicts"} <= set(TABLE_MODELS)
    assert TABLE_MODELS["accuracy_cases"].items == "results"


def _accuracy_run(run_dir: Path) -> None:
    """A run directory holding one accuracy phase (baseline run twice, one offload case) and its verdict."""
    from results_schema.records.accuracy import AccuracyVerification, BaselineAgreement
    from results_schema.codec.io import append_jsonl, write_json
    from results_schema.records.identity import OffloadSetting
    from tests.results_schema.test_accuracy_case_run import line

    for rep in (0, 1):
        append_jsonl(run_dir / "accuracy-accuracy-cases.jsonl", line(repeat=rep))
    append_jsonl(run_dir / "accuracy-accuracy-cases.jsonl", line(
        label="current-4-1", implementation="current",
        offload=OffloadSetting(offload_group_size=4, offload_num_in_group=1)))
    agree = BaselineAgreement(task="gsm8k", label="baseline", runs=2, agree=False, examples_sha256=("a" * 64, "b" * 64),
                              accuracies=(0.25, 0.375), differing_examples=(3,), judged_by="noise_floor")
    write_json(run_dir / "summary" / "accuracy" / "accuracy-verification.json", AccuracyVerification(
        mode="limited", mode_note="limited", limit=8, run_dir=str(run_dir), passed=True, cases=(), checks=(),
        baselines=(agree,)))


def test_accuracy_tables_hold_one_row_per_case_and_task_and_the_verdict(tmp_path):
    run_dir = tmp_path / "acc_run"
    run_dir.mkdir()
    _accuracy_run(run_dir)
    db = tmp_path / "catalog.duckdb"
    build(run_dir, db)
    rows = query(db, "SELECT label, repeat, task, group_size, num_in_group, offload_params, tasks, mode, accuracy, "
                     "result_path, process_wall_s, case_schema_version FROM accuracy_cases ORDER BY label, repeat, task")
    assert list(rows["label"]) == ["baseline"] * 4 + ["current-4-1"] * 2
    assert list(rows["repeat"]) == [0, 0, 1, 1, 0, 0] and list(rows["task"]) == ["gpqa", "gsm8k"] * 3
    assert list(rows["group_size"]) == [0] * 4 + [4] * 2 and (rows["accuracy"] == 0.25).all()
    assert list(rows["tasks"].iloc[0]) == ["gsm8k", "gpqa"] and (rows["case_schema_version"] == 2).all()
    assert rows["result_path"].iloc[1].endswith("baseline.gsm8k.result.json")
    verdict = query(db, "SELECT report, cases, failed_checks, baselines_agree, mode, \"limit\", baseline_rows "
                        "FROM accuracy_verdicts")
    assert verdict["report"].iloc[0] == "summary/accuracy/accuracy-verification.json"
    assert int(verdict["cases"].iloc[0]) == 0 and not verdict["baselines_agree"].iloc[0]
    assert '"judged_by":"noise_floor"' in verdict["baseline_rows"].iloc[0]


def test_fields_stored_elsewhere_have_their_own_tables():
    assert TABLE_MODELS["cases"].elsewhere == {"evidence", "record.rounds"}
    assert TABLE_MODELS["evidence"].model.__name__ == "RuntimeEvidence"
    assert TABLE_MODELS["rounds"].model.__name__ == "RoundResult"


def test_serving_results_hold_the_serving_fixture_rows(db):
    rows = query(db, "SELECT label, request_rate, completed, tpot_p99_ms, goodput_req_s, slo_attainment, "
                     "slo_attainment_target, ev_offloaded_bytes FROM serving_results WHERE run_id = 'fixture' "
                     "ORDER BY label, request_rate_rps")
    assert list(rows["label"]) == ["baseline", "baseline", "current_g4_n1", "current_g4_n1"]
    assert list(rows["request_rate"]) == ["4.0", "16.0", "4.0", "16.0"]
    assert (rows["completed"] == 6).all() and (rows["tpot_p99_ms"] > 0).all()
    assert (rows["slo_attainment_target"] == 0.9).all()
    assert list(rows["ev_offloaded_bytes"]) == [0, 0, 591872, 591872]
    notes = query(db, "SELECT count(*) AS n FROM load_notes WHERE run_id = 'fixture'")
    assert int(notes["n"].iloc[0]) == 0


def test_new_per_record_fields_are_numbers_for_new_runs_and_null_for_old_ones(db):
    got = query(db, "SELECT run_id, count(requests_per_s) AS n, count(*) AS total FROM cases GROUP BY run_id")
    got = {r.run_id: (r.n, r.total) for r in got.itertuples()}
    assert got["synthetic_run"][0] == got["synthetic_run"][1] == 27  # written with the fields
    assert got["20261130T070339Z-448df2"] == (0, 5)  # recorded before them: NULL
    types = dict(query(db, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                           "'cases'").itertuples(index=False))
    assert types["requests_per_s"] == "DOUBLE" and types["rss_peak_load_bytes"] == "BIGINT"
    assert types["device_memory_source"] == "VARCHAR" and types["window_measured_s"] == "DOUBLE"


def test_a_catalog_of_another_schema_version_is_rebuilt(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE catalog_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
    con.execute("INSERT INTO catalog_meta VALUES ('schema_version', '1')")
    con.execute("CREATE TABLE cases (run_id VARCHAR, only_old_column INTEGER)")
    con.close()
    build(FIXTURES / "synthetic_run", path)
    con = connect(path, read_only=True)
    try:
        cols = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                          "WHERE table_name = 'cases'").fetchall()}
        version = con.execute("SELECT value FROM catalog_meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        con.close()
    assert "only_old_column" not in cols and "requests_per_s" in cols and version == str(SCHEMA_VERSION)


def test_an_annotation_without_a_column_type_is_an_error_not_a_dropped_field():
    with pytest.raises(TypeError, match="no catalog column type for annotation"):
        sql_type(set[int])


def test_compare_covers_per_record_metrics_and_serving_results(tmp_path, capsys):
    import shutil

    from analysis.catalog.compare_metrics import compare_metrics, metric_verdict
    from analysis.cli import main

    root = tmp_path / "results"
    shutil.copytree(FIXTURES / "synthetic_run", root / "a")
    shutil.copytree(FIXTURES / "serving_run", root / "s")
    path = tmp_path / "c.duckdb"
    build(root, path)
    same = compare_metrics(path, "a", "a")
    rps = same[same["metric"] == "requests_per_s"]
    assert len(rps) == 9 and set(rps["verdict"]) == {"equivalent"} and (rps["n_a"] == 3).all()
    serving = compare_metrics(path, "fixture", "fixture")
    assert set(serving["table"]) == {"serving_results"}
    assert {"tpot_p99_ms", "goodput_req_s", "slo_attainment"} <= set(serving["metric"])
    assert set(serving["verdict"]) == {"inconclusive"}  # one repeat per side: no interval
    # lower latency is better: B at half A's latency is "better"; higher throughput is better
    assert metric_verdict([10.0, 10.5, 11.0], [5.0, 5.2, 5.4], higher_is_better=False)[3] == "better"
    assert metric_verdict([10.0, 10.5, 11.0], [5.0, 5.2, 5.4], higher_is_better=True)[3] == "worse"
    assert main(["catalog", "compare", "fixture", "fixture", "--db", str(path)]) == 1  # no performance pair
    out = capsys.readouterr().out
    assert "tpot_p99_ms" in out and "serving_results" in out


def test_serving_summary_tables_hold_the_verdicts_outputs_and_percentiles(db):
    from results_schema.records.serving_summary import ServingSummary
    from results_schema.codec.io import read_json

    s = read_json(FIXTURES / "serving_run" / "summary" / "serving-summary.json", ServingSummary)
    v = query(db, "SELECT label, request_rate, metric, a_median_ms, b_median_ms, floor_pct, verdict "
                  "FROM serving_baseline_verdicts WHERE run_id = 'fixture' ORDER BY rate_rps, metric")
    assert len(v) == len(s.baseline_verdicts) == 8
    assert set(v["request_rate"]) == {"4.0", "16.0"} and (v["label"] == "current_g4_n1").all()
    assert v["floor_pct"].isna().all()  # one baseline process: no floor, NULL (never NaN in the file)
    o = query(db, "SELECT label, repeat, request_rate, position, compared, len(mismatched) AS n_mismatched, status "
                  "FROM serving_outputs WHERE run_id = 'fixture' ORDER BY label, position")
    assert list(o["status"]) == ["identical"] * 4 and (o["compared"] == 6).all() and (o["n_mismatched"] == 0).all()
    p = query(db, "SELECT kind, count(*) AS n FROM serving_percentiles WHERE run_id = 'fixture' GROUP BY kind")
    got = dict(zip(p["kind"], p["n"], strict=True))
    assert sum(got.values()) == len(s.percentiles) and got["max"] > 0
    types = dict(query(db, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                           "'serving_outputs'").itertuples(index=False))
    assert types["mismatched"] == types["floor"] == "BIGINT[]" and types["status"] == "VARCHAR"


def test_serving_output_mismatch_is_queryable_and_a_bad_summary_is_a_load_note(tmp_path):
    import shutil

    from results_schema.codec.io import read_json, write_json
    from results_schema.records.serving_summary import ServingSummary

    run = tmp_path / "serving"
    shutil.copytree(FIXTURES / "serving_run", run)
    path = run / "summary" / "serving-summary.json"
    s = read_json(path, ServingSummary)
    bad = s.outputs[2].model_copy(update={"status": "differs", "mismatched": (1, 4)})
    write_json(path, s.model_copy(update={"outputs": (*s.outputs[:2], bad, *s.outputs[3:]), "valid": False,
                                          "errors": ("outputs differ",)}))
    db = tmp_path / "catalog.duckdb"
    build(run, db)
    got = query(db, "SELECT label, request_rate, mismatched FROM serving_outputs WHERE status = 'differs'")
    assert list(got["label"]) == [bad.label] and list(got["mismatched"].iloc[0]) == [1, 4]
    assert got["request_rate"].iloc[0] == repr(bad.rate_rps)
    path.write_text('{"schema_version": 1}')
    assert [r.action for r in build(run, db)] == ["replaced"]  # the summary is part of the fingerprint
    assert int(query(db, "SELECT count(*) FROM serving_outputs").iloc[0, 0]) == 0
    notes = query(db, "SELECT note FROM load_notes")["note"]
    assert any(n.startswith("unreadable serving summary") for n in notes)
