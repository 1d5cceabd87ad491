"""End to end on this machine: tiny model, fixture datasets, real vLLM, one fresh process per case.

``python -m runners.matrix +experiment=accuracy`` runs baseline + current (4,1) + current (2,1) + baseline again,
each in a fresh ``python -m runners.incase.accuracy run --case ...`` process evaluating the GSM8K and
GPQA fixtures on one engine whose core runs in that process (``ENGINE_IN_CASE_PROCESS``; 4 processes),
then the verifier,
which must report zero drop and identical example hashes (limited mode: fixtures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from results_schema.records.accuracy import AccuracyCaseRun, AccuracyResult, AccuracyVerification
from results_schema.codec.io import read_json, read_jsonl
from tests.runners.helpers import ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_accuracy_matrix_on_tiny_model_is_identical_across_offload(tmp_path: Path, tiny_model_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "runners.matrix", "+experiment=accuracy", f"results_root={tmp_path}", "run_id=e2e",
         "progress=false", "phases.accuracy.case_timeout_s=600", ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3000,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = tmp_path / "accuracy" / "e2e"
    report = read_json(out / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert report.passed and report.mode == "limited"
    assert len(report.cases) == 8  # 4 processes (baseline twice) x 2 tasks
    assert all(c.identical_to_baseline and c.drop_vs_baseline == 0.0 for c in report.cases)
    assert "LIMITED" in (out / "summary" / "accuracy-verification.md").read_text().splitlines()[0]
    assert not (out / "accuracy-failures.jsonl").exists()
    assert [x.label for x in read_jsonl(out / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun)] == [
        "baseline", "current_g4_n1", "current_g2_n1", "baseline"]  # the baseline runs twice
    paths = sorted((out / "records" / "accuracy").glob("*/*.result.json"))
    results = [read_json(p, AccuracyResult) for p in paths]
    assert {r.engine_name for r in results} == {"vllm"}
    assert {r.protocol_name for r in results} == {"qwen-chat-v1"}  # the default: the published protocol
    assert {tuple(sorted(r.engine.vllm_kwargs().items())) for r in results} == {
        (("enforce_eager", True), ("gpu_memory_utilization", 0.5), ("max_model_len", 4096))}
    assert len({r.pid for r in results}) == 4  # one fresh process per case run
    for label, runs in (("baseline", 2), ("current_g4_n1", 1), ("current_g2_n1", 1)):
        assert len({r.pid for r in results if r.label == label}) == runs
    for task, n in (("gsm8k", 8), ("gpqa", 12)):
        hashes = {r.examples_sha256 for r in results if r.task == task}
        assert len(hashes) == 1
        assert {r.num_examples for r in results if r.task == task} == {n}
    gsm_path, gsm = next((p, r) for p, r in zip(paths, results, strict=True)
                         if r.task == "gsm8k" and r.label == "baseline")
    assert gsm.output_tokens > 8  # the model really decoded
    rows = [json.loads(line) for line in (gsm_path.parent / gsm.examples_path).read_text().splitlines()]
    assert {row["finish_reason"] for row in rows} <= {"stop", "length"}
    for r in results:
        if r.label != "baseline":
            assert r.evidence is not None and r.evidence.wrapped_count > 0 and r.evidence.offloaded_bytes > 0
    ev = {r.label: r.evidence for r in results if r.task == "gsm8k" and r.evidence is not None}
    if ev:  # the evidence hook is installed: layers come from the modules really wrapped
        assert ev["current_g4_n1"].wrapped_layers == (3, 7)
        assert ev["current_g2_n1"].wrapped_layers == (1, 3, 5, 7)
