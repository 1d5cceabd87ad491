"""A sequential serving phase end to end with the fake API server (``runners.orchestration.serving_sequential``).

The fake server's token gap is set per offload process (``FAKE_OFFLOAD_GAP_S``, tests/runners/fake_server.py): a
gap 25 times the baselines' in every block is a cost every (rate, metric) cell calls ``slower`` at look 1; a gap
that swings from block to block (20x, 0.25x, ...) keeps every cell inconclusive, so the label runs to the budget's
look 2. The design is ``+experiment=serving``'s (looks after 3 and 5 blocks, Pocock-type, target 5%, pairing block),
on one rate with 4 requests of 4 tokens, without the speed control (its fixed blocks are planned: tested in
``tests/runners/test_serving_sequential_plan.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.serving.summary import load_serving, validate_serving
from analysis.validation.validate import validate_run
from results_schema.codec.io import read_jsonl
from results_schema.records.serving import ServingRun
from results_schema.records.serving_looks import FILE_NAME, read_serving_looks
from runners.errors import EXIT_INTERRUPTED, EXIT_OK
from analysis.comparison.sequential import SequentialDesign
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.serving_sequential import serving_look_on
from tests.runners.helpers import compose_cfg
from tests.shared_runs import run_matrix

REPO = Path(__file__).resolve().parents[2]
FAKE_SERVER = Path(__file__).with_name("fake_server.py")
BIG = "0.05"  # the baselines' gap is 0.002 s
SWING = "0.04,0.0005"


def _overrides(root: Path, gap: str, *extra: str, analyze: bool = True) -> list[str]:
    return [f"results_root={root}", "run_id=t", "progress=false", f"analyze={str(analyze).lower()}",
            "+experiment=serving", "model=tiny", "phases.serving.cases=[{implementation: baseline, label: baseline_twin}]",
            "~phases.serving.repeats_by_label.control_delay_20ms", "phases.serving.num_prompts=4",
            "phases.serving.max_tokens=4", "phases.serving.serving.request_rates=[8.0]",
            "phases.serving.serving.num_warmups=0",
            f"phases.serving.serving.server_command=[{sys.executable},{FAKE_SERVER}]",
            f'+phases.serving.runtime.env.FAKE_OFFLOAD_GAP_S="{gap}"', *extra]


def _run(root: Path, gap: str) -> tuple[int, Path]:
    ov = _overrides(root, gap)
    return run_matrix(compose_cfg(*ov), ov), root / "serving" / "t"


DESIGN = SequentialDesign((3, 5), 5.0, 0.05, "pocock", "block")


def _quiet_looks(run_dir: Path) -> list:
    """The runner's looks (``serving_look_on``) on the run's recorded lines with their host load left out: what the
    looks decide when no process ran beside foreign work (on a shared host a fake server's rate often does, and its
    cells are then withheld; the run's own lines are checked against that branch)."""
    quiet = [r.model_copy(update={"rate": r.rate.model_copy(update={"host_load": None})})
             for r in read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)]
    out: list = []
    while (nxt := serving_look_on("serving", DESIGN, ("baseline", "baseline_twin"), ["current_g1_n1"], out,
                                  quiet)) is not None:
        out.append(nxt)
    return out


def _contended(run_dir: Path, blocks: int) -> bool:
    return any(r.rate.host_load is not None and r.rate.host_load.contended
               for r in read_jsonl(run_dir / "serving-serving.jsonl", ServingRun) if r.repeat < blocks)


def _lines_text(run_dir: Path) -> list[str]:
    return (run_dir / FILE_NAME).read_text().splitlines()


@pytest.mark.heavy  # a serving matrix of 9 fake servers with analysis (111 s here beside other engineers' work)
def test_a_big_cost_stops_the_label_at_look_1_and_every_output_reads_that_look(tmp_path: Path, capsys,
                                                                               share_host_measurements) -> None:
    code, run_dir = _run(tmp_path, BIG)
    out = capsys.readouterr().out
    assert code == EXIT_OK, out[-3000:]
    assert "sequential serving: 9 processes planned (3 blocks of 3 arms: 2 floor baselines + 1 offload label(s))" in out
    lines = read_serving_looks(run_dir)
    first = lines[0].labels[0]
    assert lines[0].look_alpha == pytest.approx(0.05 * math.log1p((math.e - 1) * 0.6))  # Pocock-type at 3 of 5
    assert first.label == "current_g1_n1" and {(c.rate_rps, c.metric) for c in first.cells} == {
        (8.0, m) for m in ("ttft", "tpot", "itl", "e2el")}
    (quiet,) = _quiet_looks(run_dir)  # uncontended, look 1 stops it: every cell slower over its 3 blocks
    assert quiet.labels[0].state == "conclusive" and quiet.next_blocks == 0
    assert [(c.verdict, c.blocks) for c in quiet.labels[0].cells] == [("slower", 3)] * 4
    if _contended(run_dir, 3):  # a process of look 1 ran beside foreign work: its cells are withheld, it stays open
        assert first.state == "open" and any(c.verdict == "withheld" for c in first.cells) and len(lines) == 2
        return
    assert len(lines) == 1 and first.state == "conclusive" and lines[0].next_blocks == 0
    assert all(c.verdict == "slower" and c.blocks == 3 for c in first.cells)
    assert f"sequential serving/current_g1_n1: {first.reason}" in out and "stopped" in first.reason
    assert "sequential serving: look 1 recorded; phase done" in out
    assert len(read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)) == 9
    assert validate_run(run_dir).valid
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is True, summary["errors"]
    rows = [v for v in summary["baseline_verdicts"] if v["label"] == "current_g1_n1"]
    assert len(rows) == 4 and all(v["verdict"] == "slower" and "CI96.5 paired t" in v["verdict_text"]
                                  and "CI96.5% at look 1 of 2 (3 blocks" in v["verdict_text"] for v in rows)
    cells = {(c.rate_rps, c.metric): c for c in first.cells}
    for v in rows:  # the printed interval is the look's, not a 95% one over the same blocks
        c = cells[(v["rate_rps"], v["metric"])]
        assert (v["ci_low_pct"], v["ci_high_pct"]) == pytest.approx((c.ci_low_pct, c.ci_high_pct), abs=1e-9)


def _swing_overrides(root: Path, *extra: str, analyze: bool = True) -> list[str]:
    return _overrides(root, SWING, "phases.serving.serving.request_rates=[8.0,16.0]", *extra, analyze=analyze)


def _swing_run_killed_after_look_1_and_resumed(root: Path) -> tuple[Path, bytes, str]:
    """The swinging cost's run: the runner (a subprocess) SIGTERMed once look 1 has added its blocks (the first added
    process has a log), then resumed in-process with analysis. Returns (run dir, the look lines recorded before the
    kill, the console of both parts)."""
    ov = _swing_overrides(root, analyze=False)
    run_dir = root / "serving" / "t"
    proc = subprocess.Popen([sys.executable, "-m", "runners.matrix", *ov], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 240
    block4 = run_dir / "logs" / "serving" / "baseline_twin-r3.log"  # the first process look 1 added (ABBA: reversed)
    while proc.poll() is None and time.monotonic() < deadline and not block4.is_file():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    first = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, first[-3000:]
    before = (run_dir / FILE_NAME).read_bytes()
    recorded = {(r.label, r.repeat) for r in read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)}
    assert len(before.splitlines()) == 1 and ("current_g1_n1", 3) not in recorded
    resume = [f"resume={run_dir}", "progress=false", "analyze=true"]
    cap = io.StringIO()
    with contextlib.redirect_stdout(cap):
        code = run_matrix(compose_cfg(*resume), resume)
    assert code == EXIT_OK, cap.getvalue()[-3000:]
    return run_dir, before, first + cap.getvalue()


@pytest.mark.heavy  # 15 fake servers, killed after look 1 and resumed, with analysis (about 2 min here)
def test_a_swinging_cost_killed_after_look_1_resumes_to_the_budget_keeps_its_lines_and_rejects_a_forged_one(
        tmp_path: Path, share_host_measurements: object) -> None:
    """One run for three properties (a serving run per property cost the suite ~100 s each): a cost that swings
    between blocks runs to the budget's look 2; a resume between two looks keeps every line written before the kill
    byte-identical and takes look 2 on the recorded and new blocks; the serving validation rejects forged lines."""
    run_dir, before, out = _swing_run_killed_after_look_1_and_resumed(tmp_path / "swing")
    lines = read_serving_looks(run_dir)
    after = (run_dir / FILE_NAME).read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 2
    assert [(x.look, x.blocks, x.next_blocks, x.labels[0].state) for x in lines] == [
        (1, 3, 2, "open"), (2, 5, 0, "budget")]
    assert not any(c.verdict in ("slower", "faster", "equivalent") for x in lines for c in x.labels[0].cells)
    quiet = _quiet_looks(run_dir)  # uncontended: every cell inconclusive at both looks
    assert [(x.labels[0].state, {c.verdict for c in x.labels[0].cells}) for x in quiet] == [
        ("open", {"inconclusive"}), ("budget", {"inconclusive"})]
    assert "sequential serving: look 1 recorded; 2 more block(s) for baseline + baseline_twin + current_g1_n1" in out
    assert f"sequential serving/current_g1_n1: {lines[1].labels[0].reason}" in out
    assert "look 2 (5 blocks" in out and "sequential serving: look 2 recorded; phase done" in out
    runs = read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)
    keys = [(r.label, r.repeat, r.rate.index) for r in runs]
    assert len(set(keys)) == len(keys) == 15 * 2
    assert sorted({(r.label, r.repeat) for r in runs}) == sorted(
        (lb, rep) for lb in ("baseline", "baseline_twin", "current_g1_n1") for rep in range(5))
    for r in runs:  # the decided blocks keep the rate rotation of their repeat (runners.launching.serving_case)
        assert r.load.request_rates_rps == ((8.0, 16.0) if r.repeat % 2 == 0 else (16.0, 8.0))
    assert validate_run(run_dir).valid
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is True, summary["errors"]
    rows = [v for v in summary["baseline_verdicts"] if v["label"] == "current_g1_n1"]
    assert len(rows) == 8 and all(v["blocks"] == 5 and "at look 2 of 2" in v["verdict_text"] for v in rows
                                  if v["verdict"] != "withheld")
    _forged_lines_fail(run_dir, tmp_path)


def _serving_errors(run_dir: Path) -> list[str]:
    return validate_serving(load_serving(run_dir)).errors


def _forged_lines_fail(run_dir: Path, tmp_path: Path) -> None:
    """A cell's verdict edited by hand, a cell's margin and floor rewritten, then every line re-made under alpha 0.04:
    the serving validation (the run's serving verdict, ``serving-summary.json``) recomputes each look from the
    ServingRun lines and holds its design to the saved config."""
    assert not [e for e in _serving_errors(run_dir) if e.startswith("sequential_")]
    copy = tmp_path / "forged"
    shutil.copytree(run_dir, copy)
    text = _lines_text(copy)
    line = json.loads(text[1])
    cell = line["labels"][0]["cells"][0]
    cell["verdict"] = "slower" if cell["verdict"] != "slower" else "faster"
    text[1] = json.dumps(line, separators=(",", ":"))
    (copy / FILE_NAME).write_text("\n".join(text) + "\n")
    write_sha256sums(copy)
    errors = _serving_errors(copy)
    assert any(e.startswith("sequential_recompute: serving: the recorded serving look is not what its processes "
                            f"give: look 2: current_g1_n1 at 8.0 req/s, ttft: recorded {cell['verdict']}") for e in
               errors), errors
    line = json.loads(_lines_text(run_dir)[1])  # a cell's margin and floor rewritten, its verdict left as it was
    line["labels"][0]["cells"][0].update(margin_pct=99.0, floor_pct=0.0)
    (copy / FILE_NAME).write_text("\n".join([_lines_text(run_dir)[0], json.dumps(line, separators=(",", ":"))]) + "\n")
    write_sha256sums(copy)
    assert any(e.startswith("sequential_recompute: ") and "margin 99.0%" in e for e in _serving_errors(copy))
    (copy / FILE_NAME).write_text("".join(json.dumps({**json.loads(t), "alpha": 0.04}, separators=(",", ":")) + "\n"
                                          for t in _lines_text(run_dir)))
    write_sha256sums(copy)
    assert ("sequential_design: serving: the recorded design is not what the run declared: alpha 0.04 recorded; "
            "declared 0.05 (phases.serving.sequential.alpha)") in _serving_errors(copy)
