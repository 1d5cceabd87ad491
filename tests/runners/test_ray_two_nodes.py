"""``executor=ray`` on a real two-node Ray cluster (two ``ray start`` on loopback), fake bench.

Node A (head, ``host_a``) and node B (``host_b``) stand for two hosts. Checked here:
the default placement rule (no two performance cases of a phase overlap on one node;
the validate overlap check passes), the opt-in ``per_accelerator`` rule (overlaps are
warnings and the summary flags the run; the same placements relabelled ``per_node`` are
flagged as errors), the per-node identity gate (node B lacks a pinned tool: the run
stops with exit 3, or node B is excluded), and a node killed mid-case (an attempt with
``outcome=node_lost`` and its cause, the case retried on node A, nothing lost).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.serial("ray")  # the module's cluster and another Ray test: never at once

from analysis.report.summary import write_summary  # noqa: E402
from analysis.validation.validate import validate_run  # noqa: E402
from results_schema.codec.io import read_jsonl  # noqa: E402
from results_schema.records.models import CaseRun  # noqa: E402
from results_schema.records.placement import CasePlacement, NodeIdentity  # noqa: E402
from tests.runners.helpers import run_fake  # noqa: E402
from tests.runners.ray_cluster import two_node_cluster  # noqa: E402

TOOL = "i17_offload_fake_tool"
POINTS = "phases.same_runtime.points=[{g: 4, n: 1}, {g: 8, n: 1}]"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Two nodes; ``TOOL`` is on the PATH of the driver and node A only."""
    tmp = tmp_path_factory.mktemp("ray2")
    tool_dir = tmp / "bin"
    tool_dir.mkdir()
    tool = tool_dir / TOOL
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    old_path = os.environ["PATH"]
    os.environ["PATH"] = f"{tool_dir}:{old_path}"  # driver + head (started from this environment)
    try:
        with two_node_cluster(tmp, num_cpus=2, worker_env={"PATH": old_path}) as c:
            os.environ["PATH"] = f"{tool_dir}:{old_path}"
            yield c
    finally:
        os.environ["PATH"] = old_path


def _ray(address: str, *extra: str) -> list[str]:
    return ["executor=ray", f"executor.ray.address={address}", "executor.ray.num_cpus_per_case=1", POINTS, *extra]


def _placements(run_dir: Path) -> list[CasePlacement]:
    return read_jsonl(run_dir / "same_runtime-placements.jsonl", CasePlacement)


@pytest.mark.slow
def test_two_nodes_placement_identity_and_lost_node(cluster, tmp_path: Path, monkeypatch) -> None:
    addr = cluster["address"]
    monkeypatch.setenv("FAKE_BENCH_SLEEP_S", "3")

    # 1. default rule: one performance case per node at a time, both nodes used, overlap check passes
    code, run = run_fake(tmp_path, *_ray(addr), run_id="default")
    assert code == 0
    ps = _placements(run)
    assert len(ps) == 3 and {p.outcome for p in ps} == {"finished"} and {p.sharing for p in ps} == {"per_node"}
    assert len({p.node_id for p in ps}) == 2  # the two "hosts" both ran cases
    for a in ps:
        for b in ps:
            if a is not b and a.node_id == b.node_id:
                assert a.end_unix_s <= b.start_unix_s or b.end_unix_s <= a.start_unix_s
    rep = validate_run(run)
    assert next(c for c in rep.checks if c.name == "placement").passed, rep.issues
    nodes = read_jsonl(run / "cluster-manifest.jsonl", NodeIdentity)
    assert len(nodes) == 2 and {n.action for n in nodes} == {"used"}

    # 2. opt-in per_accelerator: two cases share a node (2 CPU slots each) -> warnings + summary flag
    code, run2 = run_fake(tmp_path, *_ray(addr, "executor.ray.performance_sharing=per_accelerator"), run_id="shared")
    assert code == 0
    write_summary(run2)
    ps2 = _placements(run2)
    assert {p.sharing for p in ps2} == {"per_accelerator"}
    rep2 = validate_run(run2)
    shared = [i for i in rep2.issues if i.code == "shared_node"]
    assert shared and all(i.severity == "warning" for i in shared)
    assert "Parallel placement" in (run2 / "summary" / "comparison-summary.md").read_text()
    # negative: the same real overlapping placements under the default rule are errors
    forced = run2 / "same_runtime-placements.jsonl"
    lines = [json.loads(x) for x in forced.read_text().splitlines()]
    forced.write_text("".join(json.dumps({**d, "sharing": "per_node"}) + "\n" for d in lines))
    rep3 = validate_run(run2)
    assert not rep3.valid and any(i.code == "placement_overlap" and i.severity == "error" for i in rep3.issues)

    # 3. identity gate on every node: node B lacks the pinned tool
    pin = f"runtime.pins.tools=[{TOOL}]"
    code, run4 = run_fake(tmp_path, *_ray(addr), pin, run_id="gate_stop")
    assert code == 3
    gate = read_jsonl(run4 / "cluster-manifest.jsonl", NodeIdentity)
    assert sorted(n.action for n in gate) == ["stopped_run", "used"]
    bad = next(n for n in gate if n.action != "used")
    assert any(TOOL in p for p in bad.problems)
    assert not (run4 / "same_runtime-runs.jsonl").exists()
    code, run5 = run_fake(tmp_path, *_ray(addr, "executor.ray.on_node_failure=exclude"), pin, run_id="gate_excl")
    assert code == 0
    gate5 = read_jsonl(run5 / "cluster-manifest.jsonl", NodeIdentity)
    assert sorted(n.action for n in gate5) == ["excluded", "used"]
    used = next(n.node_id for n in gate5 if n.action == "used")
    assert {p.node_id for p in _placements(run5)} == {used}

    # 4. node B killed mid-case: node_lost attempt with its cause, retried on node A, nothing lost
    worker_id = next(n.node_id for n in gate5 if n.action == "excluded")  # node B (lacks the tool)
    monkeypatch.setenv("FAKE_BENCH_SLEEP_S", "8")
    run6 = tmp_path / "default" / "killed"

    def kill_b_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            logs = list((run6 / "logs" / "same_runtime").glob("*.log")) if run6.is_dir() else []
            if len(logs) >= 2:  # one case on each node is running
                time.sleep(2.0)
                cluster["worker"].kill()
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_b_when_busy, daemon=True)
    killer.start()
    code, run6 = run_fake(tmp_path, *_ray(addr), run_id="killed")
    killer.join(timeout=5)
    assert code == 0
    ps6 = _placements(run6)
    lost = [p for p in ps6 if p.outcome == "node_lost"]
    assert len(lost) == 1 and lost[0].node_id == worker_id and lost[0].cause and lost[0].times_from == "driver"
    retry = [p for p in ps6 if p.label == lost[0].label and p.outcome == "finished"]
    assert len(retry) == 1 and retry[0].attempt == 1 and retry[0].node_id != worker_id
    runs = read_jsonl(run6 / "same_runtime-runs.jsonl", CaseRun)
    assert sorted(r.record.label for r in runs) == ["baseline", "current_g4_n1", "current_g8_n1"]
    assert not (run6 / "same_runtime-failures.jsonl").exists()
    assert list((run6 / "quarantine" / "node-lost").rglob("*.log"))  # the lost attempt's log, set aside
    assert next(c for c in validate_run(run6).checks if c.name == "placement").passed
