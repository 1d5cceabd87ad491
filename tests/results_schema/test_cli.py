"""Claims about ``python -m results_schema`` and the file-name dispatch table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.synthetic import SynthPhase, default_cases, write_run_dir
from results_schema.records import dispatch
from results_schema.cli import main
from results_schema.records.dispatch import FileKind, kind_for, register_file_kind


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return write_run_dir(tmp_path_factory.mktemp("cli") / "run", [SynthPhase("same_runtime", default_cases(), repeats=1)])


def test_dispatch_picks_model_by_file_name():
    assert kind_for("x/same_runtime-runs.jsonl").load_model().__name__ == "CaseRun"
    assert kind_for("long_window-failures.jsonl").load_model().__name__ == "CaseFailure"
    assert kind_for("run/records/p/baseline-r0.json").load_model().__name__ == "BenchRecord"
    assert kind_for("run/evidence/p/baseline-r0.json").load_model().__name__ == "RuntimeEvidence"
    assert kind_for("run/summary/validation.json").load_model().__name__ == "ValidationReport"
    assert kind_for("run/environment-manifest.json").pattern == "environment-manifest.json"
    assert kind_for("run/logs/p/x.log") is None


def test_dispatch_is_extensible(monkeypatch):
    monkeypatch.setattr(dispatch, "_EXTRA", [])
    register_file_kind(FileKind("*-custom.jsonl", "results_schema.records.case_outcome:KVCacheCapacity", jsonl=True))
    assert kind_for("a-custom.jsonl").load_model().__name__ == "KVCacheCapacity"


def test_missing_model_module_is_a_clear_error():
    with pytest.raises(LookupError, match="not available"):
        FileKind("x.json", "results_schema.no_such_module:Model", jsonl=False).load_model()


def test_check_accepts_a_valid_run_dir(run_dir, capsys):
    assert main(["check", str(run_dir / "same_runtime-runs.jsonl"), str(run_dir / "records")]) == 0
    assert "line(s) valid, OK" in capsys.readouterr().out


def test_check_reports_file_line_and_field(tmp_path, run_dir, capsys):
    src = (run_dir / "same_runtime-runs.jsonl").read_text().splitlines()
    obj = json.loads(src[1])
    obj["record"]["load_seconds"] = -1.0
    bad = tmp_path / "p-runs.jsonl"
    bad.write_text(src[0] + "\n" + json.dumps(obj) + "\n")
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:2: record.load_seconds: " in out


def test_check_rejects_unknown_file_and_missing_path(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    assert main(["check", str(f), str(tmp_path / "absent")]) == 1
    out = capsys.readouterr().out
    assert "unknown result file kind" in out and "no such file" in out


def test_export_writes_one_schema_per_model(tmp_path):
    assert main(["export", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"CaseRun.schema.json", "CaseFailure.schema.json", "BenchRecord.schema.json",
            "RuntimeEvidence.schema.json", "ValidationReport.schema.json"} <= names
    assert json.loads((tmp_path / "CaseRun.schema.json").read_text())["title"] == "CaseRun"


def test_module_entry_point_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "results_schema", "export", str(tmp_path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
