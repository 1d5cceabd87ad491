"""``executor=ray`` against a private Ray head on loopback, with the tiny model (2 real vLLM cases, one after the other)."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.placement import CasePlacement
from tests.shared_runs import run_matrix
from tests.runners.helpers import ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD, compose_cfg

pytest.importorskip("ray")


@pytest.mark.slow
@pytest.mark.serial("ray")  # two Ray clusters on one host: never at once
def test_ray_executor_runs_each_case_as_a_task_in_a_fresh_process(tmp_path: Path, tiny_model_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``executor.ray.address`` the run starts its own head: a ``RAY_ADDRESS`` left in the
    environment (here one where nothing listens) is not joined."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    overrides = [f"results_root={tmp_path}", "run_id=ray", "executor=ray", "executor.ray.head_num_cpus=2",
                 "executor.ray.num_cpus_per_case=1", "phases.same_runtime.points=[{g: 4, n: 1}]",
                 "workload.min_measured_s=0", "analyze=false", "progress=false",
                 ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD]
    assert run_matrix(compose_cfg(*overrides), overrides) == 0
    run_dir = tmp_path / "default" / "ray"
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    assert sorted(r.record.label for r in runs) == ["baseline", "current_g4_n1"]
    assert len({r.record.pid for r in runs}) == 2  # one fresh process per case
    cur = next(r for r in runs if r.record.label == "current_g4_n1")
    assert cur.evidence.wrapped_layers == (3, 7)
    assert (run_dir / "SHA256SUMS").is_file()
    # default rule: one performance case per node at a time (the private head is one node)
    a, b = sorted(read_jsonl(run_dir / "same_runtime-placements.jsonl", CasePlacement), key=lambda p: p.start_unix_s)
    assert a.node_id == b.node_id and a.sharing == b.sharing == "per_node" and a.end_unix_s <= b.start_unix_s
