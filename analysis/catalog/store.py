"""A DuckDB catalog across run directories: build (incremental, idempotent) and query.

What is modelled: ``build(results_dir, db)`` finds every run directory under ``results_dir`` (a
directory holding ``*-runs.jsonl``, ``*-failures.jsonl``, ``*-accuracy-cases.jsonl`` or
``environment-manifest.json``), reads it strictly (``analysis.load``, ``results_schema``), validates
it (``analysis.validation.validate``) and writes its rows into the tables of ``analysis.catalog.schema``:

    runs, plan_counts, cases, rounds, evidence, failures, validation_checks, validation_issues,
    accuracy_cases, accuracy_verdicts, serving_results, serving_baseline_verdicts, serving_outputs,
    serving_percentiles, choices, choice_predictions, load_notes
    (+ views label_summary, host_memory, run_overview, invalid_labels)

A run is identified by its natural key ``run_id`` (the manifest's, else the directory name). Loading a
run deletes its rows from every table and inserts the new ones in one transaction, so a run loaded
twice is one run and a failed load leaves the previous state. A run whose files have the same
SHA-256 fingerprint as the loaded one is skipped (incremental). Non-finite floats are stored as NULL.

One writer: DuckDB lets one process hold the file read-write, and then no other process may open it
(even read-only); ``build`` is that single writer, queries open the file read-only.

The record tables (``cases``, ``rounds``, ``evidence``, ``failures``, ``serving_results``, ``choices``,
``choice_predictions``, ...) have one column per model field (``analysis.catalog.columns``); a catalog file written with other columns
(an older ``catalog_schema.SCHEMA_VERSION``) is rebuilt from scratch when opened for writing.

The serving tables beyond ``serving_results`` come from the run's ``summary/serving-summary.json``
(``ServingSummary``): the verdicts vs the baseline's floor, the per-request output comparison per case process
and rate, and the percentiles with their sample.

What is deliberately not modelled: the per-request serving files (``serving_results`` holds each
rate's recorded numbers; ``analysis.serving.summary`` recomputes them and compares the outputs).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from analysis.catalog.columns import row, table_columns
from analysis.catalog.schema import RUN_TABLES, SCHEMA_VERSION, TABLES, VIEWS, ddl
from analysis.load import RunData, load_run
from analysis.report.provenance import provenance
from analysis.validation.validate import validate_run
from results_schema.records.accuracy import AccuracyCaseRun, AccuracyVerification
from results_schema.records.choice import FILE_NAME as DECISIONS_FILE, ChoiceDecision
from results_schema.codec.files import file_sha256
from results_schema.codec.io import RecordError, read_json, scan_jsonl
from results_schema.records.serving import SERVING_SUFFIX, ServingRun
from results_schema.records.serving_summary import ServingSummary
from results_schema.records.summary import Provenance

SERVING_SUMMARY_FILE = "serving-summary.json"
RUN_MARKERS = ("*-runs.jsonl", "*-failures.jsonl", "*-accuracy-cases.jsonl", f"*{SERVING_SUFFIX}",
               "environment-manifest.json")
FINGERPRINT_GLOBS = ("*.jsonl", "environment-manifest.json", "config.yaml", "summary/**/accuracy-verification.json",
                     f"summary/{SERVING_SUMMARY_FILE}")
SERVING_TABLES = {"serving_baseline_verdicts": "baseline_verdicts", "serving_outputs": "outputs",
                  "serving_percentiles": "percentiles"}
"""Catalog table -> the ``ServingSummary`` field whose rows it holds."""


class CatalogError(Exception):
    """Bad input to the catalog (message names the value and what is allowed)."""


def is_run_dir(p: Path) -> bool:
    return p.is_dir() and any(any(p.glob(m)) for m in RUN_MARKERS)


def find_runs(results_dir: Path | str) -> list[Path]:
    """Run directories under ``results_dir`` (itself included), sorted; run directories are not descended."""
    root = Path(results_dir)
    if not root.is_dir():
        raise CatalogError(f"results directory {root} does not exist (give a directory holding run directories)")
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        if is_run_dir(d):
            out.append(d)
            continue
        stack.extend(sorted((c for c in d.iterdir() if c.is_dir() and not c.name.startswith(".")), reverse=True))
    return sorted(out)


def fingerprint(run_dir: Path) -> str:
    """SHA-256 over (relative path, content) of the files the catalog reads from ``run_dir``."""
    h = hashlib.sha256()
    files = sorted({p for g in FINGERPRINT_GLOBS for p in run_dir.glob(g) if p.is_file()})
    for p in files:
        h.update(str(p.relative_to(run_dir)).encode() + b"\0")
        h.update(bytes.fromhex(file_sha256(p)))
    return h.hexdigest()


def _clean(v):
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _frame(cols: list[str], rows: list[dict]) -> pd.DataFrame:
    """Rows -> frame with exactly ``cols``; non-finite floats and missing keys become None (SQL NULL)."""
    df = pd.DataFrame([{c: _clean(r.get(c)) for c in cols} for r in rows], columns=cols, dtype=object)
    return df.where(df.notna(), None)


def column_names(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """Column names of ``table`` in declaration order (from DuckDB's information schema)."""
    return [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                      "ORDER BY ordinal_position", [table]).fetchall()]


def run_rows(run_dir: Path) -> tuple[str, dict[str, list[dict]]]:
    """Read one run directory into ``(run_id, {table: rows})`` (validated; nothing written)."""
    data = load_run(run_dir) if any(run_dir.glob("*-runs.jsonl")) or any(run_dir.glob("*-failures.jsonl")) \
        or (run_dir / "config.yaml").is_file() else None
    prov = provenance(run_dir, data)
    rid = prov.run_id
    rows: dict[str, list[dict]] = {t: [] for t in RUN_TABLES}
    notes: list[str] = []
    if data is not None:
        _case_rows(rid, data, rows)
        rep = validate_run(run_dir, data)
        rows["plan_counts"] = [{"run_id": rid, **c.model_dump()} for c in rep.counts]
        rows["validation_checks"] = [{"run_id": rid, **c.model_dump()} for c in rep.checks]
        rows["validation_issues"] = [{"run_id": rid, "seq": i, **x.model_dump()} for i, x in enumerate(rep.issues)]
        valid, n_err, n_warn = rep.valid, len(rep.errors), len(rep.warnings)
    else:
        valid, n_err, n_warn = False, 1, 0
        rows["validation_issues"].append({"run_id": rid, "seq": 0, "code": "no_records", "severity": "error",
                                          "message": f"{run_dir}: no runs/failures file and no config.yaml"})
    _accuracy_rows(run_dir, rid, rows, notes)
    _serving_rows(run_dir, rid, rows, notes)
    _serving_summary_rows(run_dir, rid, rows, notes)
    _choice_rows(run_dir, rid, rows, notes)
    rows["load_notes"] = [{"run_id": rid, "seq": i, "note": n} for i, n in enumerate(notes)]
    rows["runs"] = [_runs_row(run_dir, prov, valid=valid, errors=n_err, warnings=n_warn)]
    return rid, rows


def _case_rows(rid: str, data: RunData, rows: dict[str, list[dict]]) -> None:
    """Append the ``cases``, ``rounds``, ``evidence`` and ``failures`` rows of ``data`` to ``rows``.

    Every column comes from the record's model (``analysis.catalog.columns``); a field a record predates
    is its default (null) -> NULL.
    """
    cols = {t: table_columns(t) for t in ("cases", "rounds", "evidence", "failures")}
    for _p, _line, cr in data.case_runs:
        r = cr.record
        key = {"run_id": rid, "phase": r.phase, "label": r.label, "repeat": r.repeat}
        rows["cases"].append({"run_id": rid, **row(cols["cases"], cr)})
        rows["rounds"] += [{**key, **row(cols["rounds"], rd)} for rd in r.rounds]
        rows["evidence"].append({**key, **row(cols["evidence"], cr.evidence)})
    for _p, line, f in data.case_failures:
        rows["failures"].append({"run_id": rid, "line": line, **row(cols["failures"], f)})


def _serving_rows(run_dir: Path, rid: str, rows: dict[str, list[dict]], notes: list[str]) -> None:
    """Append one ``serving_results`` row per ``<phase>-serving.jsonl`` line; unreadable lines go to ``notes``."""
    cols = table_columns("serving_results")
    for p in sorted(run_dir.glob(f"*{SERVING_SUFFIX}")):
        good, errs = scan_jsonl(p, ServingRun)
        notes.extend(f"unreadable serving line {err}" for err in errs)
        for _line, s in good:
            rate = s.rate.request_rate_rps
            rows["serving_results"].append({"run_id": rid, "request_rate": "inf" if rate is None else repr(rate),
                                            **row(cols, s)})


def _serving_summary_rows(run_dir: Path, rid: str, rows: dict[str, list[dict]], notes: list[str]) -> None:
    """Append the rows of ``summary/serving-summary.json`` to the ``SERVING_TABLES``; an unreadable file goes to
    ``notes``."""
    path = run_dir / "summary" / SERVING_SUMMARY_FILE
    if not path.is_file():
        return
    try:
        s = read_json(path, ServingSummary)
    except RecordError as exc:
        notes.append(f"unreadable serving summary: {exc}")
        return
    for table, name in SERVING_TABLES.items():
        cols = table_columns(table)
        for item in getattr(s, name):
            rate = item.rate_rps
            rows[table].append({"run_id": rid, "request_rate": "inf" if rate is None else repr(rate), **row(cols, item)})


def _choice_rows(run_dir: Path, rid: str, rows: dict[str, list[dict]], notes: list[str]) -> None:
    """A choose run: one ``choices`` row per ``choose-decisions.jsonl`` line and one ``choice_predictions`` row per
    predicted setting of each; every other column comes from the models; unreadable lines go to ``notes``."""
    path = run_dir / DECISIONS_FILE
    if not path.is_file():
        return
    good, errs = scan_jsonl(path, ChoiceDecision)
    notes.extend(f"unreadable decision line {err}" for err in errs)
    cols, pred_cols = table_columns("choices"), table_columns("choice_predictions")
    for line, d in good:
        chosen = {(c.group_size, c.num_in_group, c.prefetch_step) for c in d.chosen}
        rows["choices"].append({"run_id": rid, "line": line, "chosen_labels": [c.label for c in d.chosen],
                                "predicted_settings": len(d.predictions), **row(cols, d)})
        rows["choice_predictions"] += [
            {"run_id": rid, "line": line, "stage": d.stage, "form": d.form, "meets_need": p.released_bytes >= d.need_bytes,
             "chosen": (p.group_size, p.num_in_group, p.prefetch_step) in chosen, **row(pred_cols, p)}
            for p in d.predictions]


def _accuracy_rows(run_dir: Path, rid: str, rows: dict[str, list[dict]], notes: list[str]) -> None:
    """Append the ``accuracy_cases`` (one per case and task) and ``accuracy_verdicts`` rows; every column comes
    from the models (``analysis.catalog.columns``); unreadable files go to ``notes``."""
    case_cols, verdict_cols = table_columns("accuracy_cases"), table_columns("accuracy_verdicts")
    for p in sorted(run_dir.glob("*-accuracy-cases.jsonl")):
        good, errs = scan_jsonl(p, AccuracyCaseRun)
        notes.extend(f"unreadable accuracy line {err}" for err in errs)
        for _line, a in good:
            rows["accuracy_cases"] += [{"run_id": rid, **row(case_cols, a, o)} for o in a.results]
    for p in sorted(run_dir.glob("summary/**/accuracy-verification.json")):
        try:
            v = read_json(p, AccuracyVerification)
        except RecordError as exc:
            notes.append(f"unreadable accuracy verification: {exc}")
            continue
        rows["accuracy_verdicts"].append({
            "run_id": rid, "report": str(p.relative_to(run_dir)), "cases": len(v.cases),
            "failed_checks": sum(c.status == "fail" for c in v.checks),
            "baselines_agree": all(b.agree for b in v.baselines) if v.baselines else None,
            **row(verdict_cols, v)})


def _runs_row(run_dir: Path, prov: Provenance, *, valid: bool, errors: int, warnings: int) -> dict:
    """The ``runs`` row: provenance, first device entry (``'kind: name x count'``) and validity."""
    kind, _, rest = (prov.devices[0] if prov.devices else "").partition(": ")
    name, _, count = rest.rpartition(" x")
    return {
        "run_id": prov.run_id, "run_dir": str(run_dir.resolve()), "fingerprint": fingerprint(run_dir),
        "loaded_utc": _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None), "has_manifest": prov.manifest,
        "experiment": prov.experiment, "created_utc": prov.created_utc, "hostname": prov.hostname,
        "platform": prov.platform, "machine": prov.machine, "device_kind": kind or None, "device_name": name or None,
        "device_count": int(count) if count.isdigit() else None,
        "python_version": prov.python_version, "vllm_version": "/".join(prov.vllm_versions) or None,
        "torch_version": "/".join(prov.torch_versions) or None, "git_revision": prov.git_revision,
        "git_dirty": prov.git_dirty, "config_sha256": prov.config_sha256, "model_name": prov.model_name,
        "model_path": prov.model_path, "model_num_layers": prov.model_num_layers,
        "model_sha256sums_sha256": prov.model_sha256sums_sha256, "valid": valid, "errors": errors,
        "warnings": warnings}


def connect(db: Path | str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the catalog (creating tables and views when writable).

    Raises:
        CatalogError: the file does not exist (read-only) or another process holds it read-write.
    """
    db = Path(db)
    if read_only and not db.is_file():
        raise CatalogError(f"catalog {db} does not exist; build it with `python -m analysis catalog build "
                           f"RESULTS_DIR --db {db}`")
    try:
        con = duckdb.connect(str(db), read_only=read_only)
    except duckdb.IOException as exc:
        raise CatalogError(f"cannot open catalog {db}: {exc} (one writer at a time: wait for the other "
                           f"process, e.g. a running build, to finish)") from exc
    if not read_only:
        _drop_if_older(con)
        for stmt in ddl():
            con.execute(stmt)
        con.execute("INSERT OR REPLACE INTO catalog_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    return con


def _drop_if_older(con: duckdb.DuckDBPyConnection) -> None:
    """Drop every table and view of a catalog written by another schema version (its runs reload)."""
    try:
        got = con.execute("SELECT value FROM catalog_meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:  # a new file
        return
    if got is not None and got[0] == str(SCHEMA_VERSION):
        return
    for name in VIEWS:
        con.execute(f"DROP VIEW IF EXISTS {name}")
    for name in reversed(list(TABLES)):
        con.execute(f"DROP TABLE IF EXISTS {name}")


@dataclass
class LoadResult:
    run_id: str
    run_dir: Path
    action: str  # loaded, replaced, unchanged
    processes: int = 0


def load_one(con: duckdb.DuckDBPyConnection, run_dir: Path, *, force: bool = False) -> LoadResult:
    """Load (or skip, when unchanged) one run directory in one transaction."""
    fp = fingerprint(run_dir)
    rid, rows = run_rows(run_dir)
    old = con.execute("SELECT fingerprint FROM runs WHERE run_id = ?", [rid]).fetchone()
    if old and old[0] == fp and not force:
        return LoadResult(rid, run_dir, "unchanged")
    con.execute("BEGIN TRANSACTION")
    try:
        for t in RUN_TABLES:
            con.execute(f"DELETE FROM {t} WHERE run_id = ?", [rid])
        for t in RUN_TABLES:
            if not rows[t]:
                continue
            df = _frame(column_names(con, t), rows[t])
            cols = ", ".join(f'"{c}"' for c in df.columns)
            con.register("_rows", df)
            con.execute(f"INSERT INTO {t} ({cols}) SELECT {cols} FROM _rows")
            con.unregister("_rows")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return LoadResult(rid, run_dir, "replaced" if old else "loaded", len(rows["cases"]))


def build(results_dir: Path | str, db: Path | str, *, force: bool = False) -> list[LoadResult]:
    """Load every run directory under ``results_dir`` into ``db`` (see the module docstring).

    Raises:
        CatalogError: ``results_dir`` missing or holding no run directory; the database is locked.
    """
    runs = find_runs(results_dir)
    if not runs:
        raise CatalogError(f"no run directory under {results_dir} (a run directory holds *-runs.jsonl, "
                           "*-failures.jsonl, *-accuracy-cases.jsonl or environment-manifest.json)")
    con = connect(db)
    try:
        return [load_one(con, r, force=force) for r in runs]
    finally:
        con.close()


def query(db: Path | str, sql: str) -> pd.DataFrame:
    """Run ``sql`` on the catalog opened read-only.

    Raises:
        CatalogError: missing catalog or an SQL error (message from DuckDB).
    """
    con = connect(db, read_only=True)
    try:
        return con.execute(sql).df()
    except duckdb.Error as exc:
        raise CatalogError(f"query failed: {exc}") from exc
    finally:
        con.close()
