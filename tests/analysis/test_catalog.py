"""Claims about the DuckDB run catalog: explicit schema, idempotent loads, one writer, compare verdicts."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.catalog.store import CatalogError, build, query
from analysis.catalog.compare import compare_runs
from analysis.catalog.schema import TABLES, VIEWS
from analysis.cli import main
from analysis.load import load_run

from .conftest import FIXTURES, make_fixtures

DOC = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"


@pytest.fixture(scope="module")
def fixtures_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("cat") / "catalog.duckdb"
    build(FIXTURES, db)
    return db


def _count(db, sql):
    return int(query(db, sql).iloc[0, 0])


def test_build_loads_every_fixture_run_with_its_rows(fixtures_db):
    runs = set(query(fixtures_db, "SELECT run_id FROM runs")["run_id"])
    assert runs == {"synthetic_run", "20261130T070339Z-448df2", "20261130T072833Z-687e4f", "fixture"}
    for rid, d in (("synthetic_run", "synthetic_run"), ("20261130T072833Z-687e4f", "real_smoke_run")):
        data = load_run(FIXTURES / d)
        assert _count(fixtures_db, f"SELECT count(*) FROM cases WHERE run_id = '{rid}'") == len(data.runs)
        assert _count(fixtures_db, f"SELECT count(*) FROM rounds WHERE run_id = '{rid}'") == len(data.rounds)
        assert _count(fixtures_db, f"SELECT count(*) FROM evidence WHERE run_id = '{rid}'") == len(data.runs)
        assert _count(fixtures_db, f"SELECT count(*) FROM failures WHERE run_id = '{rid}'") == len(data.failures)
    assert _count(fixtures_db, "SELECT count(*) FROM failures WHERE label = 'invalid_g2_n3'") == 1
    m = query(fixtures_db, "SELECT * FROM runs WHERE run_id = '20261130T070339Z-448df2'").iloc[0]
    assert m["model_name"] == "tiny-qwen2-l8" and m["vllm_version"] == "0.32.0" and m["has_manifest"]
    assert len(m["config_sha256"]) == 64


def test_every_documented_table_exists_with_declared_types(fixtures_db):
    names = set(query(fixtures_db, "SELECT table_name FROM information_schema.tables")["table_name"])
    assert set(TABLES) | set(VIEWS) <= names
    types = dict(query(fixtures_db, "SELECT column_name, data_type FROM information_schema.columns "
                                    "WHERE table_name = 'evidence'").itertuples(index=False))
    assert types["selected_layers"] == "BIGINT[]" and types["released_bytes"] == "BIGINT"
    doc = DOC.read_text()
    documented = set(re.findall(r"^### `(\w+)`", doc, flags=re.M))
    assert documented == set(TABLES) | set(VIEWS)


def test_undefined_metrics_are_null_never_nan(fixtures_db):
    # the CPU runs have no 'Available KV cache memory' line: NULL, not NaN (NaN would sort above +inf)
    assert _count(fixtures_db, "SELECT count(*) FROM cases WHERE kv_cache_gib IS NULL") > 0
    assert _count(fixtures_db, "SELECT count(*) FROM cases WHERE isnan(kv_cache_gib) OR isnan(throughput_tok_s)") == 0
    assert _count(fixtures_db, "SELECT count(*) FROM label_summary WHERE isnan(retention)") == 0


@pytest.mark.heavy  # measured 1.2 s in the fast tier (its budget is 2 minutes)
def test_rebuild_is_incremental_and_a_run_loaded_twice_is_one_run(fixtures_db, tmp_path):
    before = {t: _count(fixtures_db, f"SELECT count(*) FROM {t}") for t in TABLES}
    assert {r.action for r in build(FIXTURES, fixtures_db)} == {"unchanged"}
    assert {r.action for r in build(FIXTURES, fixtures_db, force=True)} == {"replaced"}
    # the same run from a second place (a copy): same natural key, replaced, not added
    shutil.copytree(FIXTURES / "real_tiny_run", tmp_path / "elsewhere" / "copy_of_tiny")
    (res,) = build(tmp_path / "elsewhere", fixtures_db)
    assert res.run_id == "20261130T070339Z-448df2" and res.action == "unchanged"  # same files, same run
    (res,) = build(tmp_path / "elsewhere", fixtures_db, force=True)
    assert res.action == "replaced"
    assert query(fixtures_db, f"SELECT run_dir FROM runs WHERE run_id = '{res.run_id}'").iloc[0, 0].endswith(
        "copy_of_tiny")
    after = {t: _count(fixtures_db, f"SELECT count(*) FROM {t}") for t in TABLES if t != "catalog_meta"}
    assert after == {t: n for t, n in before.items() if t != "catalog_meta"}


def test_one_writer_is_reported_as_bad_input(tmp_path, capsys):
    db = tmp_path / "locked.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb,time; c=duckdb.connect({str(db)!r}); "
                               "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        rc = main(["catalog", "build", str(FIXTURES / "synthetic_run"), "--db", str(db)])
    finally:
        holder.kill()
        holder.wait()
    assert rc == 2
    assert "one writer at a time" in capsys.readouterr().err


@pytest.mark.heavy  # measured 1.2 s in the fast tier (its budget is 2 minutes)
def test_compare_pairs_labels_and_gives_interval_verdicts(tmp_path, capsys):
    root = tmp_path / "results"
    a = make_fixtures.valid_run(root / "run_a")
    shutil.copytree(a, root / "run_b")
    bad = make_fixtures.build_edge(a, root / "run_bad", "edge_wrong_class")
    db = tmp_path / "c.duckdb"
    build(root, db)
    pairs, runs = compare_runs(db, "run_a", "run_b")
    assert len(pairs) == 9 and runs["a"]["valid"] and runs["b"]["valid"]
    # identical processes on both sides: the interval straddles 0 and the verdict is never faster/slower
    assert set(pairs["verdict"]) == {"equivalent"}
    assert (pairs["ci_low_pct"] < 0).all() and (pairs["ci_high_pct"] > 0).all() and (pairs["delta_pct"] == 0).all()
    assert main(["catalog", "compare", "run_a", "run_b", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "current_g4_n1" in out and "equivalent" in out and "verdicts: equivalent 9" in out
    bad_pairs, _ = compare_runs(db, "run_a", "run_bad")
    assert set(bad_pairs["verdict"]) == {"INVALID"}  # the whole run is invalid: no pair is evidence
    assert main(["catalog", "compare", "run_a", "run_bad", "--db", str(db)]) == 1
    assert main(["catalog", "compare", "run_a", "nope", "--db", str(db)]) == 2
    assert "not in the catalog" in capsys.readouterr().err


def test_query_and_bad_input(fixtures_db, capsys, tmp_path):
    assert main(["catalog", "query", "SELECT run_id, valid FROM runs ORDER BY run_id", "--db", str(fixtures_db),
                 "--csv"]) == 0
    assert "synthetic_run,True" in capsys.readouterr().out
    assert main(["catalog", "query", "SELECT nope", "--db", str(fixtures_db)]) == 2
    assert main(["catalog", "query", "SELECT 1", "--db", str(tmp_path / "missing.duckdb")]) == 2
    assert main(["catalog", "build", str(tmp_path / "none"), "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "query failed" in err and "does not exist" in err
    with pytest.raises(CatalogError):
        build(tmp_path, tmp_path / "y.duckdb")  # exists but holds no run directory


@pytest.mark.heavy  # builds a catalog of two synthetic runs (about 2 s)
def test_compare_withholds_a_pair_resting_on_a_contended_process_and_says_so(tmp_path, capsys):
    """Run B is run A with one process's host reading replaced by a contended one (foreign work beside it)."""
    from results_schema.records.host_load import CONTENDED_CORES, CONTENDED_STEAL, HostLoad

    root = tmp_path / "results"
    a = make_fixtures.valid_run(root / "run_a")
    shutil.copytree(a, root / "run_b", ignore=shutil.ignore_patterns("summary", "SHA256SUMS"))
    key = make_fixtures.target_of(root / "run_b")
    busy = HostLoad(wall_s=10.0, host_busy_cpu_s=17.0, case_cpu_s=10.0, runner_cpu_s=0.0, foreign_cpu_s=7.0,
                    foreign_cores=0.7, steal_cpu_s=0.0, steal_fraction=0.0, host_cores=2,
                    contended_cores_limit=CONTENDED_CORES, contended_steal_limit=CONTENDED_STEAL, contended=True)
    make_fixtures.rewrite_case(root / "run_b", key, record={"host_load": busy})
    db = tmp_path / "c.duckdb"
    build(root, db)
    pairs, _ = compare_runs(db, "run_a", "run_b")
    hit = pairs[(pairs["phase_b"] == key[0]) & (pairs["label_b"] == key[1])]
    assert list(hit["verdict"]) == ["withheld"]
    n_b = int(hit["processes_b"].iloc[0])
    assert hit["issues"].iloc[0].startswith(f"withheld: contended (A 0 of {int(hit['processes_a'].iloc[0])} "
                                            f"processes, B 1 of {n_b};")
    assert set(pairs.drop(hit.index)["verdict"]) == {"equivalent"}
    assert main(["catalog", "compare", "run_a", "run_b", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"withheld: {key[0]}/{key[1]} vs {key[0]}/{key[1]}: withheld: contended" in out
