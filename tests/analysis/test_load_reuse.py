"""Claim: analysis.load reads JSONL through results_schema's line scanners (one set of line rules)."""

from __future__ import annotations

import inspect
import shutil

import analysis.load as load
from analysis.load import load_run
from results_schema.codec.io import check_jsonl
from results_schema.records.models import CaseRun


def test_load_has_no_private_jsonl_line_loop():
    src = inspect.getsource(load)
    assert "scan_jsonl" in src and "scan_table" in src
    assert "enumerate(fh" not in src and "parse_line(" not in src


def test_load_reports_the_same_bad_lines_as_check_jsonl(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run, ignore=shutil.ignore_patterns("summary"))
    runs = sorted(run.glob("*-runs.jsonl"))[0]
    lines = runs.read_bytes().splitlines(keepends=True)
    lines.insert(1, b"\n")
    lines.insert(3, b'{"not": "a record"}\n')
    runs.write_bytes(b"".join(lines) + b'{"torn": ')
    ok, errors = check_jsonl(runs, CaseRun)
    data = load_run(run)
    mine = [(e.path, e.line, e.message) for e in data.line_errors if e.path == str(runs)]
    assert mine == [(e.path, e.line, e.message) for e in errors]
    assert len(errors) == 3
    assert len([1 for p, _n, _m in data.case_runs if p == runs]) == ok
