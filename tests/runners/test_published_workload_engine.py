"""The published workload through ``runners.incase.bench_one`` on the real vLLM CPU engine.

The published ``bench_one`` passed float16, ``trust_remote_code``, ``max_num_seqs`` 8 and
``max_num_batched_tokens`` = ``max_model_len`` x 8 to the engine, built its prompts from a seed text cut to
exactly 128 tokens, sent the same prompts in warm-up and every round, and sampled greedily without
``ignore_eos``. This runs ``workload=published`` (bfloat16 on this CPU, and ``min_measured_s=0``: exactly
3 rounds, as published) on the tiny model and checks what the engine really got and what the record holds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from tests.runners.helpers import RUNNER, ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD, TINY_DEFAULT

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.engine
def test_published_workload_reaches_the_engine_and_the_record(tmp_path: Path, tiny_model_dir: Path) -> None:
    proc = subprocess.run([*RUNNER, *TINY_DEFAULT, "workload=published",
                           "workload.dtype=bfloat16",
                           "workload.min_measured_s=0", "phases.same_runtime.points=[]", f"model.path={tiny_model_dir}",
                           f"results_root={tmp_path}", "run_id=pub", "analyze=false", "progress=false",
                           ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    run_dir = tmp_path / "default" / "pub"
    (run,) = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    rec = run.record
    w = rec.workload
    assert (w.prompt_mode, w.prompts_vary_per_round, w.ignore_eos, w.temperature) == ("seed_text", False, False, 0.0)
    assert (w.num_prompts, w.input_len, w.max_tokens, w.max_num_seqs, w.trust_remote_code) == (8, 128, 64, 8, True)
    assert len(rec.rounds) == 3 and {r.prompt_tokens for r in rec.rounds} == {8 * 128}  # exactly 128 tokens each
    assert len({r.token_digest for r in rec.rounds}) == 1  # the same prompts every round, greedy
    assert rec.requests == 24 and rec.requests_per_s is not None
    log = (run_dir / run.log_path).read_text()
    for arg in ("'trust_remote_code': True", "'max_num_seqs': 8", "'max_num_batched_tokens': 4096"):
        assert arg in log, f"{arg} not among vLLM's non-default args in {run.log_path}"
    assert "enable_prefix_caching" not in log.split("non-default args", 1)[1].splitlines()[0]  # vLLM's default
