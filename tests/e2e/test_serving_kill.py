"""A real vLLM API server killed mid-sweep: one failure record naming the cause, nothing left alive.

Runs ``python -m runners.matrix +experiment=serving`` (baseline only, two rates) with real vLLM
on the tiny model. When the first rate's benchmark has started, the test SIGKILLs the API
server process alone -- which frees the port but leaves vLLM's engine core alive -- and then
checks that the runner (a) records exactly one ``server_died`` failure naming the server's
exit by signal 9, (b) writes no serving line for the case, (c) stops every process of the
server's tree (engine core and workers included) and frees the port, and (d) exits 1 with
the serving summary INVALID. Run it under the shared lock: ``flock /tmp/engine.lock pytest ...``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.serving import ServingCaseResult
from runners.incase.serving.server import port_is_free
from tests.runners.helpers import ONE_GEMM_THREAD

REPO_ROOT = Path(__file__).resolve().parents[2]


def _wait_for(pred, timeout_s: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the runner exited ({proc.returncode}) before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_server_killed_mid_sweep_becomes_a_failure_record_and_leaves_nothing(tmp_path: Path,
                                                                              tiny_model_dir: Path) -> None:
    run_dir = tmp_path / "serving" / "kill"
    log = run_dir / "logs" / "serving" / "baseline-r0.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners.matrix", "+experiment=serving", "model=tiny", "phases.serving.repeats=1",
         f"results_root={tmp_path}", "run_id=kill",
         "progress=false", "phases.serving.points=[]", "phases.serving.cases=[]",
         "~phases.serving.repeats_by_label.control_delay_20ms",
         "phases.serving.sequential.looks=[]", "phases.serving.sequential.pairing=none",
         "phases.serving.serving.request_rates=[1.0,2.0]",
         "phases.serving.num_prompts=30", ONE_GEMM_THREAD],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: log.is_file() and "SERVING rate 0" in log.read_text(), 400, "the first rate to start", proc)
        m = re.search(r"SERVING server pid (\d+) port (\d+)", log.read_text())
        assert m, log.read_text()[-3000:]
        pid, port = int(m.group(1)), int(m.group(2))
        server = psutil.Process(pid)
        tree = [server] + server.children(recursive=True)
        assert any("EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name() for p in tree[1:]), \
            [p.name() for p in tree]
        time.sleep(3.0)  # some requests in flight
        server.kill()  # the API server only: its engine core stays alive unless the runner stops the tree
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-5000:]
    (failure,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert failure.failure_type == "server_died" and failure.error_type == "server_died"
    assert "exited with code -9 during rate 0" in failure.error_message
    assert failure.log_tail, "the failure must carry the server log tail"
    assert not (run_dir / "serving-serving.jsonl").exists()
    result = ServingCaseResult.model_validate_json((run_dir / "records" / "serving" / "baseline-r0.serving.json")
                                                   .read_text())
    assert result.fault.cause == "server_died" and result.teardown.server_exited_before_stop
    assert result.teardown.left_after_kill == ()
    for p in tree:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, f"{p.pid} survived"
    assert port_is_free(port)
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is False and any("server_died" in e for e in summary["errors"])
