"""An in-process case on the real vLLM CPU engine (tiny model): A and B rounds in one process, tokens identical.

Claims: the runner plans and runs an ``in_process: abba`` case; the case process switches the installed offloader
through ``LLM.collective_rpc`` before every round; the record shows ABBA arms and modes, no copy in a mode-A round
and copies in every mode-B round, and both rounds of every pair generated the same tokens (greedy, same prompts); the
analysis reads it as an in-process copy share, never a front point.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis.comparison.inprocess import TITLE, record_rows, report_lines
from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from tests.runners.helpers import RUNNER, ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD, TINY_DEFAULT

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.engine
def test_an_in_process_case_alternates_copies_off_and_on_with_identical_tokens(tmp_path: Path,
                                                                                tiny_model_dir: Path) -> None:
    proc = subprocess.run([*RUNNER, *TINY_DEFAULT, "phases.same_runtime.baseline=false",
                           "phases.same_runtime.points=[]",
                           "phases.same_runtime.cases=[{implementation: current, label: ip, group_size: 4, "
                           "num_in_group: 1, in_process: abba}]",
                           "phases.same_runtime.measured_rounds=4", "workload.min_measured_s=0",
                           f"model.path={tiny_model_dir}", f"results_root={tmp_path}", "run_id=ip", "analyze=false",
                           "progress=false", ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    (run,) = read_jsonl(tmp_path / "default" / "ip" / "same_runtime-runs.jsonl", CaseRun)
    ip = run.record.in_process
    assert ip is not None and ip.design == "abba"
    assert ip.arms == ip.modes == tuple("ABBA")
    assert [c for c, m in zip(ip.copies, ip.modes, strict=True) if m == "A"] == [0, 0]
    assert all(c > 0 for c, m in zip(ip.copies, ip.modes, strict=True) if m == "B")
    assert ip.tokens_identical
    rounds = run.record.rounds
    assert rounds[0].token_digest == rounds[1].token_digest and rounds[2].token_digest == rounds[3].token_digest
    assert run.evidence.wrapped_count == 2
    rows = record_rows([run.record])
    assert [r.units for r in rows] == [2, 1] and rows[0].tokens_identical
    assert report_lines(rows)[0] == TITLE
