"""The real main job: ``python -m runners.matrix`` with real vLLM processes (reduced matrix).

One run of the ``official_cpu`` experiment on the tiny model: baseline, current (4,1)
and official (4,1), the engine core in each case process (``ENGINE_IN_CASE_PROCESS``: the child
layout of runtime ``cpu``, and the evidence its engine-core child publishes, are asserted by
``tests/runners/test_processes.py::test_sigkill_of_the_runner_during_a_real_vllm_case``).
Checks the acceptance of the main job: evidence selected layers equal the selection rule,
wrapped count > 0, offloaded bytes equal the selected layers' parameter bytes, generated token
digests equal the baseline's, the upstream offloader's CPU assertion becomes one failure record
while the rest completes, and the analysis table is printed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offload.selection import select_offload_layers
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.manifest import EnvironmentManifest
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun, RuntimeEvidence
from tests.runners.helpers import ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD, evidence_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_LAYER_BYTES = 295_936  # runners/models/tiny_model.py: one decoder layer of the 8-layer default, bf16


@pytest.mark.slow
def test_main_job_runs_real_vllm_cases_end_to_end(tmp_path: Path, tiny_model_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runners.matrix", "+experiment=official_cpu", f"results_root={tmp_path}",
         "run_id=e2e", "progress=false", ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    run_dir = tmp_path / "official_cpu" / "e2e"
    runs = {r.record.label: r for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)}
    assert set(runs) == {"baseline", "current_g4_n1"}
    base, cur = runs["baseline"], runs["current_g4_n1"]
    assert base.evidence.wrapped_count == 0 and base.evidence.offloaded_bytes == 0
    assert cur.evidence.selected_layers == select_offload_layers(8, 4, 1) == (3, 7)
    assert cur.evidence.wrapped_layers == (3, 7) and cur.evidence.wrapped_count == 2
    assert cur.evidence.offloaded_bytes == 2 * TINY_LAYER_BYTES
    assert cur.record.token_digest == base.record.token_digest
    k = base.record.workload.measured_rounds  # rounds every case runs; a minimum window may add more
    assert [r.token_digest for r in cur.record.rounds[:k]] == [r.token_digest for r in base.record.rounds[:k]]
    for r in (base, cur):
        w = r.record.workload
        assert r.record.output_tokens == w.num_prompts * w.max_tokens * len(r.record.rounds)
        assert r.record.window is not None and r.record.window.reached
        assert r.record.elapsed_s >= w.min_measured_s == 3.0
        assert r.kv_cache.kv_cache_tokens is not None
        rec = r.record  # the published per-process fields: real on CPU, no device memory
        assert rec.requests == w.num_prompts * len(rec.rounds) and rec.requests_per_s is not None
        assert rec.round_latency_p50_s is not None and rec.round_latency_p95_s is not None
        assert rec.rss_before_load_bytes is not None and rec.rss_after_load_bytes is not None
        assert rec.rss_before_load_bytes < rec.rss_after_load_bytes <= rec.rss_peak_load_bytes <= rec.peak_rss_bytes
        assert rec.device_memory_peak_load_bytes is None and rec.device_memory_error is None
    _evidence_hook_published_once_from_the_engine(run_dir, base, cur)
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert failure.label == "official_g4_n1" and failure.error_type == "AssertionError"
    assert "should not already be on CPU" in failure.error_message
    assert (run_dir / failure.log_path).is_file()
    # the upstream offloader's assertion on CPU publishes no evidence (no line, no sidecar)
    official_log = (run_dir / failure.log_path).read_text()
    assert "Module parameters should not already be on CPU" in official_log
    assert evidence_lines(official_log) == []
    assert not (run_dir / "evidence" / "same_runtime" / "official_g4_n1-r0.json").exists()
    assert "│ current_g4_n1 " in out or "| current_g4_n1 " in out  # the rich decision table (ASCII without UTF-8)
    assert (run_dir / "summary" / "report.html").is_file()
    # same GEMM kernels in every case (weight residency is the only difference), on any x86 CPU
    for r in (base, cur):
        assert r.cpu_kernels is not None and r.cpu_kernels.path == "plain"
        assert r.cpu_kernels.kernels == {"torch_linear": r.cpu_kernels.layers} and r.cpu_kernels.layers == 32
    last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1]
    assert last.startswith("validation: VALID") and last.endswith("exit 0"), last
    manifest = read_json(run_dir / "environment-manifest.json", EnvironmentManifest)
    (num,) = manifest.numerics
    assert num.cpu_kernel_path == "plain" and num.torch_version and num.cpu_model
    assert any(f.startswith("avx") for f in num.cpu_isa_flags) and num.thread_env["OMP_NUM_THREADS"] == "1"  # ONE_GEMM_THREAD
    assert (run_dir / "SHA256SUMS").is_file() and (run_dir / "summary").is_dir()


def _evidence_hook_published_once_from_the_engine(run_dir: Path, base: CaseRun, cur: CaseRun) -> None:
    """The evidence hook (``runners/evidence_hook`` on the case's PYTHONPATH) in a real vLLM engine: one
    ``OFFLOAD_EVIDENCE`` line per case, equal to the sidecar, printed by the process that loaded the model
    (here the bench process itself: the engine core runs in it), with the implementation and layers the
    case asked for."""
    for r, impl in ((base, "baseline"), (cur, "current")):
        lines = evidence_lines((run_dir / r.log_path).read_text())
        assert len(lines) == 1 and lines[0] == (run_dir / r.evidence_path).read_text().strip(), lines
        ev = RuntimeEvidence.model_validate_json(lines[0])
        assert ev == r.evidence and ev.implementation == impl
        assert ev.pid == r.record.pid  # ENGINE_IN_CASE_PROCESS: the engine core runs in the bench process
    assert base.evidence.offloader_class.endswith("NoopOffloader") and base.evidence.num_layers == 8
    assert cur.evidence.offloader_class == "offload.prefetch.CurrentPrefetchOffloader"
    assert cur.evidence.post_init_called
