"""Claims about the speed control in a throughput phase (a baseline whose every forward sleeps: a cost of known size)."""

from __future__ import annotations

from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from tests.runners.helpers import run_fake

_CASES = ("phases.same_runtime.cases=[{implementation: baseline, label: control_delay_5ms, step_delay_ms: 5.0}, "
          "{implementation: baseline, label: baseline_twin}]")
_SMALL = ("phases.same_runtime.points=[{g: 4, n: 1}]", "phases.same_runtime.repeats=2")


def test_a_throughput_control_records_its_delay_and_its_log_shows_the_delay_acted(tmp_path):
    code, run_dir = run_fake(tmp_path, _CASES, *_SMALL)
    assert code == 0
    runs = read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)
    delays = {(r.record.label, r.record.step_delay_ms) for r in runs}
    assert delays == {("baseline", 0.0), ("baseline_twin", 0.0), ("current_g4_n1", 0.0), ("control_delay_5ms", 5.0)}
    log = (run_dir / "logs" / "same_runtime" / "control_delay_5ms-r0.log").read_text()
    assert "OFFLOAD_CONTROL applied step_delay_ms=5:" in log and "OFFLOAD_CONTROL acted step_delay_ms=5:" in log
    ctl = [r.record.throughput_tok_s for r in runs if r.record.label == "control_delay_5ms"]
    base = [r.record.throughput_tok_s for r in runs if r.record.label == "baseline"]
    assert max(ctl) < min(base)


def test_a_throughput_control_on_an_offload_case_exits_2_before_any_process(tmp_path):
    code, run_dir = run_fake(tmp_path, "phases.same_runtime.cases=[{implementation: current, group_size: 4, "
                             "num_in_group: 1, label: c, step_delay_ms: 5.0}]", *_SMALL)
    assert code == 2 and not run_dir.exists()
    code, run_dir = run_fake(tmp_path, "phases.same_runtime.cases=[{implementation: baseline, label: c, "
                             "step_delay_ms: 5.0}]", *_SMALL, "phases.same_runtime.baseline=false")
    assert code == 2 and not run_dir.exists()  # a control needs the undelayed baseline it is judged against
