"""A sequential serving phase end to end with a fake serving case process (``runners.orchestration.serving_sequential``).

Each case process is ``tests/runners/fake_serving.py`` (the run's ``serving_command``): it writes the records the
serving driver writes, from the fake server's token gap, set per offload label and process
(``FAKE_OFFLOAD_GAP_S_<label>``, tests/runners/fake_server.py), with a seeded per-request jitter of +-10% and no
host load (no process is contended, so every look is deterministic). The driver itself, against a server, is tested
in ``tests/runners/test_serving.py``; here it would cost a vLLM client import in each of the 18 case processes.
current_g1_n1's gap is 100 times the baselines' in every block, a cost every (rate, metric) cell calls ``slower`` at
look 1; current_g2_n1's swings from block to block (100x, 0.25x, ...) and keeps every cell inconclusive, so that
label runs to the budget's look 2. One run holds both: 3 blocks of 4 arms, look 1 stops current_g1_n1 and gives the
two floor baselines and current_g2_n1 blocks 4 and 5 (18 case processes). The design is ``+experiment=serving``'s
(looks after 3 and 5 blocks, Pocock-type, target 5%, pairing block), on two rates with 4 requests of 4 tokens,
without the speed control (its fixed blocks are planned: tested in ``tests/runners/test_serving_sequential_plan.py``).
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

from analysis.comparison.sequential import SequentialDesign
from analysis.serving.summary import load_serving, validate_serving
from analysis.validation.validate import validate_run
from results_schema.codec.io import read_jsonl
from results_schema.records.serving import ServingRun
from results_schema.records.serving_looks import FILE_NAME, ServingLookDecision, read_serving_looks
from runners.errors import EXIT_INTERRUPTED, EXIT_OK
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.serving_sequential import serving_look_on
from tests.runners.helpers import RUNNER, compose_cfg
from tests.shared_runs import run_matrix
from tests.support.synthetic import host_load

REPO = Path(__file__).resolve().parents[2]
FAKE_SERVING = Path(__file__).with_name("fake_serving.py")
BIG, SWING = "current_g1_n1", "current_g2_n1"
GAPS = {BIG: "0.2", SWING: "0.2,0.0005"}  # the baselines' gap is 0.002 s
RATES = (8.0, 16.0)
METRICS = ("ttft", "tpot", "itl", "e2el")
DESIGN = SequentialDesign((3, 5), 5.0, 0.05, "pocock", "block")


def _overrides(root: Path) -> list[str]:
    return [f"results_root={root}", "run_id=t", "progress=false", "analyze=false", "+experiment=serving",
            "model=tiny", "phases.serving.cases=[{implementation: baseline, label: baseline_twin}]",
            "~phases.serving.repeats_by_label.control_delay_20ms", "phases.serving.points=[{g: 1, n: 1}, {g: 2, n: 1}]",
            "phases.serving.num_prompts=4", "phases.serving.max_tokens=4",
            f"phases.serving.serving.request_rates=[{RATES[0]},{RATES[1]}]", "phases.serving.serving.num_warmups=0",
            f"serving_command=[{sys.executable},{FAKE_SERVING}]",
            *(f'+phases.serving.runtime.env.FAKE_OFFLOAD_GAP_S_{label}="{gap}"' for label, gap in GAPS.items())]


def _runs(run_dir: Path) -> list[ServingRun]:
    return read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)


def _looks_on_records(run_dir: Path, labels: tuple[str, ...],
                      runs: list[ServingRun] | None = None) -> list[ServingLookDecision]:
    """The runner's looks (``serving_look_on``) recomputed from the run's recorded lines (or ``runs``) for ``labels``
    open before look 1."""
    if runs is None:
        runs = _runs(run_dir)
        assert all(r.rate.host_load is None for r in runs)  # the fake records none: no cell is withheld
    out: list[ServingLookDecision] = []
    while (nxt := serving_look_on("serving", DESIGN, ("baseline", "baseline_twin"), labels, out,
                                  runs)) is not None:
        out.append(nxt)
    return out


def _lines_text(run_dir: Path) -> list[str]:
    return (run_dir / FILE_NAME).read_text().splitlines()


def _label(line: ServingLookDecision, label: str):
    (x,) = [x for x in line.labels if x.label == label]
    return x


def _run_killed_after_look_1_and_resumed(root: Path) -> tuple[Path, bytes, str]:
    """The run: the runner (a subprocess) SIGTERMed once look 1 has added its blocks (a process of block 4 has a
    log), then resumed in-process with analysis. Returns (run dir, the look lines recorded before the kill, the
    console of both parts)."""
    run_dir = root / "serving" / "t"
    proc = subprocess.Popen([*RUNNER, *_overrides(root)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    logs = run_dir / "logs" / "serving"
    while proc.poll() is None and time.monotonic() < deadline and not any(logs.glob("*-r3.log")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    first = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, first[-3000:]
    before = (run_dir / FILE_NAME).read_bytes()
    recorded = {(r.label, r.repeat) for r in _runs(run_dir)}
    assert len(before.splitlines()) == 1 and (SWING, 3) not in recorded
    resume = [f"resume={run_dir}", "progress=false", "analyze=true"]
    cap = io.StringIO()
    with contextlib.redirect_stdout(cap):
        code = run_matrix(compose_cfg(*resume), resume)
    assert code == EXIT_OK, cap.getvalue()[-3000:]
    return run_dir, before, first + cap.getvalue()


@pytest.mark.heavy(seconds=40)  # 18 fake serving case processes, killed after look 1 and resumed, with analysis
def test_a_big_cost_stops_at_look_1_a_swinging_one_runs_to_the_budget_through_a_kill_and_resume(
        tmp_path: Path, share_host_measurements: object) -> None:
    """One run for four properties: a cost called at look 1 stops its label there and every output reads that look;
    a cost that swings between blocks runs to the budget's look 2; a resume between two looks keeps every line
    written before the kill byte-identical and takes look 2 on the recorded and new blocks; the serving validation
    rejects forged lines."""
    run_dir, before, out = _run_killed_after_look_1_and_resumed(tmp_path / "run")
    assert "sequential serving: 12 processes planned (3 blocks of 4 arms: 2 floor baselines + 2 offload label(s))" \
        in out
    lines = read_serving_looks(run_dir)
    after = (run_dir / FILE_NAME).read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 2
    assert lines[0].look_alpha == pytest.approx(0.05 * math.log1p((math.e - 1) * 0.6))  # Pocock-type at 3 of 5
    assert [x.label for x in lines[0].labels] == [BIG, SWING]
    for x in lines[0].labels:  # every (rate, metric) cell of each label, over look 1's 3 blocks
        assert sorted((c.rate_rps, c.metric) for c in x.cells) == sorted((r, m) for r in RATES for m in METRICS)
    assert lines == _looks_on_records(run_dir, (BIG, SWING))  # what the recorded processes give, look by look
    (alone,) = _looks_on_records(run_dir, (BIG,))  # the big cost alone: look 1 ends the phase, no block is added
    assert (alone.still_open, alone.next_blocks, _label(alone, BIG).state) == ((), 0, "conclusive")
    _a_contended_process_withholds_its_cells_and_keeps_its_label_open(run_dir)
    _big_cost_stopped_at_look_1(run_dir, lines, out)
    _swinging_cost_ran_to_the_budget(run_dir, lines, out)
    _forged_lines_fail(run_dir, tmp_path)


def _a_contended_process_withholds_its_cells_and_keeps_its_label_open(run_dir: Path) -> None:
    """The same lines with the big cost's block-2 process contended at RATES[0] (1.5 foreign cores): look 1 withholds
    the cells resting on it (every metric at that rate), calls the others, and keeps the label open, so both labels
    get blocks 4 and 5."""
    hot = host_load(1.5)
    assert hot.contended
    runs = [r.model_copy(update={"rate": r.rate.model_copy(update={"host_load": hot})})
            if (r.label, r.repeat, r.rate.request_rate_rps) == (BIG, 1, RATES[0]) else r for r in _runs(run_dir)]
    first = _looks_on_records(run_dir, (BIG, SWING), runs)[0]
    big = _label(first, BIG)
    withheld = sorted(c.rate_rps for c in big.cells if c.verdict == "withheld")
    assert big.state == "open" and first.still_open == (BIG, SWING) and first.next_blocks == 2
    assert withheld == [RATES[0]] * len(METRICS)
    assert all(c.verdict == "slower" for c in big.cells if c.rate_rps != RATES[0])


def _big_cost_stopped_at_look_1(run_dir: Path, lines: list[ServingLookDecision], out: str) -> None:
    first = _label(lines[0], BIG)
    assert [(x.look, x.still_open, x.next_blocks) for x in lines] == [(1, (SWING,), 2), (2, (), 0)]
    assert first.state == "conclusive" and [(c.verdict, c.blocks) for c in first.cells] == [("slower", 3)] * 8
    assert f"sequential serving/{BIG}: {first.reason}" in out and "stopped" in first.reason
    assert sorted({r.repeat for r in _runs(run_dir) if r.label == BIG}) == [0, 1, 2]
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    rows = [v for v in summary["baseline_verdicts"] if v["label"] == BIG]
    assert len(rows) == 8 and all(v["verdict"] == "slower" and "CI96.5 paired t" in v["verdict_text"]
                                  and "CI96.5% at look 1 of 2 (3 blocks" in v["verdict_text"] for v in rows)
    cells = {(c.rate_rps, c.metric): c for c in first.cells}
    for v in rows:  # the printed interval is the look's, not a 95% one over the same blocks
        c = cells[(v["rate_rps"], v["metric"])]
        assert (v["ci_low_pct"], v["ci_high_pct"]) == pytest.approx((c.ci_low_pct, c.ci_high_pct), abs=1e-9)


def _swinging_cost_ran_to_the_budget(run_dir: Path, lines: list[ServingLookDecision], out: str) -> None:
    assert [(x.look, x.blocks, x.next_blocks, _label(x, SWING).state) for x in lines] == [
        (1, 3, 2, "open"), (2, 5, 0, "budget")]
    assert not any(c.verdict in ("slower", "faster", "equivalent") for x in lines for c in _label(x, SWING).cells)
    assert ("sequential serving: look 1 recorded; 2 more block(s) for baseline + baseline_twin + "
            f"{', '.join(lines[0].still_open)}") in out
    assert f"sequential serving/{SWING}: {_label(lines[1], SWING).reason}" in out
    assert "look 2 (5 blocks" in out and "sequential serving: look 2 recorded; phase done" in out
    runs = _runs(run_dir)
    keys = [(r.label, r.repeat, r.rate.index) for r in runs]
    assert len(set(keys)) == len(keys) == (3 * 5 + 3) * len(RATES)
    assert sorted({(r.label, r.repeat) for r in runs}) == sorted(
        [(lb, rep) for lb in ("baseline", "baseline_twin", SWING) for rep in range(5)] + [(BIG, rep) for rep in range(3)])
    assert [x.label for x in lines[1].labels] == list(lines[0].still_open)
    for r in runs:  # the decided blocks keep the rate rotation of their repeat (runners.launching.serving_case)
        assert r.load.request_rates_rps == (RATES if r.repeat % 2 == 0 else RATES[::-1])
    assert validate_run(run_dir).valid
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is True, summary["errors"]
    rows = [v for v in summary["baseline_verdicts"] if v["label"] == SWING]
    assert len(rows) == 8 and all(v["blocks"] == 5 and "at look 2 of 2" in v["verdict_text"] for v in rows)


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
                            f"give: look 2: {line['labels'][0]['label']} at {cell['rate_rps']} req/s, {cell['metric']}: "
                            f"recorded {cell['verdict']}") for e in
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
