"""``python -m analysis accuracy-verify DIR`` delegates to ``analysis.accuracy.verifier``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from analysis.cli import main
from results_schema.records.accuracy import AccuracyVerification
from results_schema.codec.io import read_json
from tests.accuracy.conftest import make_run, offload

REPO = Path(__file__).resolve().parents[2]


def test_accuracy_verify_passes_limited_and_fails_formal(tmp_path: Path, tiny_model_dir: Path, capsys,
                                                          monkeypatch) -> None:
    for name in ("OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH"):  # run_cases sets OFFLOAD_IMPL: restored at teardown
        monkeypatch.setenv(name, "recorded")
        monkeypatch.delenv(name)
    run = make_run(tmp_path / "run", tiny_model_dir, cases=(("baseline", offload()), ("current", offload(4, 1))))
    capsys.readouterr()
    report_dir = tmp_path / "report"
    assert main(["accuracy-verify", str(run), "--limit", "12", "--report-dir", str(report_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Accuracy verification -- LIMITED (--limit 12)")
    assert read_json(report_dir / "accuracy-verification.json", AccuracyVerification).passed
    assert main(["accuracy-verify", str(run), "--no-write"]) == 1  # fixtures are never formal evidence
    assert "counts" in capsys.readouterr().out
    assert not (run / "accuracy-verification.json").exists()


def test_accuracy_verify_is_listed_in_help() -> None:
    r = subprocess.run([sys.executable, "-m", "analysis", "--help"], cwd=REPO, capture_output=True, text=True,
                       check=True)
    assert "accuracy-verify" in r.stdout
