"""Negative control on this machine: the trained tiny model, real vLLM, a deliberately broken offloader.

``python -m runners.matrix +experiment=negative_control`` (first 8 rows per task to stay cheap: 2
processes) runs the baseline and ``fault_zero_host_copy_g4_n1``, whose host copy of offloaded layer 3
is zeroed after ``post_init``. The accuracy verifier must fail the run (exit 4), naming that case on
both tasks, while the evidence still shows the layer offloaded. The engine core runs in each case process
(``ENGINE_IN_CASE_PROCESS``): the fault is applied by the offloader wherever the engine runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from results_schema.records.accuracy import AccuracyResult
from results_schema.records.accuracy_report import AccuracyVerification
from results_schema.codec.io import read_json
from runners.errors import EXIT_ACCURACY
from tests.runners.helpers import RUNNER, ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD

REPO = Path(__file__).resolve().parents[2]
FAULTY = "fault_zero_host_copy_g4_n1"


@pytest.mark.slow
def test_broken_offloader_fails_the_accuracy_phase_with_exit_4_naming_the_case(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [*RUNNER, "+experiment=negative_control", f"results_root={tmp_path}",
         "run_id=nc", "progress=false", "phases.accuracy.accuracy_limit=8", "phases.accuracy.case_timeout_s=600",
         ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_ACCURACY, out[-4000:]
    assert "accuracy accuracy: FAILED" in out and FAULTY in out
    run = tmp_path / "negative_control" / "nc"
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert not report.passed
    faulty = {c.task: c for c in report.cases if c.label == FAULTY}
    assert set(faulty) == {"gsm8k", "gpqa"}
    assert not any(c.identical_to_baseline for c in faulty.values())
    assert {c.verdict for c in faulty.values()} == {"fail"}
    assert {c.verdict for c in report.cases if c.label == "baseline"} == {"pass"}
    failed = {(c.name, c.task, c.label) for c in report.checks if c.status == "fail"}
    assert {("identity", t, FAULTY) for t in ("gsm8k", "gpqa")} <= failed, failed
    log = next((run / "logs" / "accuracy").glob(f"{FAULTY}-r0*.log")).read_text()
    assert "OFFLOAD_FAULT applied zero_host_copy: host copy of layer 3 zeroed" in log
    results = [read_json(p, AccuracyResult) for p in (run / "records" / "accuracy").glob(f"{FAULTY}-r0/*.result.json")]
    assert results and all(r.evidence is not None and r.evidence.wrapped_layers == (3,) for r in results)
