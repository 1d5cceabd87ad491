"""A sequential throughput phase end to end with the fake bench (``runners.orchestration.sequential``).

The fake's round time is set per process (``FAKE_SLOW``, ``label-rN:factor``): ``current_g1_n1`` is twice as slow as
the baseline in every process (stopped ``slower`` at look 1), ``current_g2_n1`` swings 0.8-1.25x from process to
process (open at every look, ``inconclusive`` at the budget with its MDE). The design is the default's: looks after
3, 4 and 6 blocks, Pocock-type spending, target 5%.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from analysis.validation.validate import validate_run
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.plan import RunPlan
from results_schema.records.sequential import FILE_NAME, read_looks, with_looks
from runners.errors import EXIT_INTERRUPTED, EXIT_OK
from runners.orchestration.sequential import block_items
from tests.runners.helpers import FAKE_BENCH, compose_cfg
from tests.shared_runs import run_matrix

REPO_ROOT = Path(__file__).resolve().parents[2]
SWING = {0: 1.0, 1: 1.25, 2: 0.8, 3: 1.2, 4: 0.85, 5: 1.1}
SLOW = ",".join(["current_g1_n1:2", *(f"current_g2_n1-r{r}:{f}" for r, f in SWING.items())])


def _overrides(root: Path, *extra: str, analyze: bool = True) -> list[str]:
    return ["model=tiny", "matrix@phases.same_runtime=same_runtime_cpu", f"results_root={root}", "run_id=t",
            f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", f"analyze={str(analyze).lower()}",
            "phases.same_runtime.sequential.looks=[3,4,6]", "phases.same_runtime.measured_rounds=2", "phases.same_runtime.min_measured_s=0.5",
            f'+phases.same_runtime.runtime.env.FAKE_SLOW="{SLOW}"', *extra]


def _runs(run_dir: Path) -> list[CaseRun]:
    return read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[int, Path]:
    root = tmp_path_factory.mktemp("seq")
    ov = _overrides(root)
    return run_matrix(compose_cfg(*ov), ov), root / "default" / "t"


@pytest.mark.heavy  # one fake-bench run of 15 processes with analysis, shared below (about 25 s)
def test_a_label_stops_when_it_is_known_and_the_open_one_gets_the_next_blocks_until_the_budget(run) -> None:
    code, run_dir = run
    assert code == EXIT_OK
    lines = read_looks(run_dir)
    got = [(d.look, d.blocks, [(x.label, x.verdict) for x in d.labels], d.next_blocks) for d in lines]
    assert got == [(1, 3, [("current_g2_n1", "open"), ("current_g1_n1", "slower")], 1),
                   (2, 4, [("current_g2_n1", "open")], 2),
                   (3, 6, [("current_g2_n1", "inconclusive")], 0)]
    assert lines[0].labels[1].ci_high_pct is not None and lines[0].labels[1].ci_high_pct < -40
    assert lines[-1].labels[0].mde_pct is not None and lines[-1].labels[0].mde_pct > 5
    assert "inconclusive at the budget" in lines[-1].labels[0].reason
    counts = Counter(r.record.label for r in _runs(run_dir))
    assert counts == Counter({"baseline": 6, "current_g1_n1": 3, "current_g2_n1": 6})
    assert with_looks(read_json(run_dir / "plan.json", RunPlan), lines).processes == 15


@pytest.mark.heavy  # shares the run above
def test_the_blocks_ran_in_abba_order_and_validate_recomputes_every_look(run, tmp_path: Path) -> None:
    _, run_dir = run
    cfg = compose_cfg(*_overrides(tmp_path))
    planned = [(sc.case.label, sc.repeat) for sc in block_items(cfg, "same_runtime", read_looks(run_dir), 0)]
    assert [(r.record.label, r.record.repeat) for r in _runs(run_dir)] == planned
    assert planned[:6] == [("baseline", 0), ("current_g2_n1", 0), ("current_g1_n1", 0),
                           ("current_g1_n1", 1), ("current_g2_n1", 1), ("baseline", 1)]
    report = validate_run(run_dir)
    assert report.valid, [i.message for i in report.issues if i.severity == "error"]
    assert next(c for c in report.checks if c.name == "sequential").passed
    md = (run_dir / "summary" / "comparison-summary.md").read_text()
    assert "## Sequential looks" in md and "| same_runtime | current_g2_n1 | 3 | 6 | 6 vs 6 |" in md
    assert "| inconclusive |" in md and "| slower |" in md
    assert (run_dir / "summary" / "sequential.png").stat().st_size > 0
    html = (run_dir / "summary" / "report.html").read_text()
    assert '<table id="looks">' in html and "current_g2_n1" in html.split('<table id="looks">')[1].split("</table>")[0]
    # a recorded decision that its processes do not give is an error
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    text = (copy / FILE_NAME).read_text().splitlines()
    text[0] = text[0].replace('"verdict":"slower"', '"verdict":"equivalent"')
    (copy / FILE_NAME).write_text("\n".join(text) + "\n")
    bad = validate_run(copy)
    msgs = [i.message for i in bad.issues if i.severity == "error"]
    assert not bad.valid and any("recorded equivalent" in m and "recomputed slower" in m for m in msgs), msgs


@pytest.mark.heavy  # a runner process stopped after its first look, then resumed in-process (about 25 s)
def test_a_resume_after_a_look_keeps_every_recorded_line_and_takes_the_next_look(tmp_path: Path, run) -> None:
    ov = _overrides(tmp_path, analyze=False)
    run_dir = tmp_path / "default" / "t"
    proc = subprocess.Popen([sys.executable, "-m", "runners.matrix", *ov], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    block4 = run_dir / "logs" / "same_runtime" / "current_g2_n1-r3.log"  # the first process the first look added
    while proc.poll() is None and time.monotonic() < deadline and not block4.is_file():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == EXIT_INTERRUPTED, out[-3000:]
    before = (run_dir / FILE_NAME).read_bytes()
    assert len(before.splitlines()) == 1 and ("current_g2_n1", 3) not in {(r.record.label, r.record.repeat)
                                                                           for r in _runs(run_dir)}
    resume = [f"resume={run_dir}", "progress=false", "analyze=false"]
    assert run_matrix(compose_cfg(*resume), resume) == EXIT_OK
    after = (run_dir / FILE_NAME).read_bytes()
    assert after.startswith(before) and len(after.splitlines()) == 3
    assert [[(x.label, x.verdict) for x in d.labels] for d in read_looks(run_dir)] == [
        [(x.label, x.verdict) for x in d.labels] for d in read_looks(run[1])]
    keys = [(r.record.label, r.record.repeat) for r in _runs(run_dir)]
    assert len(set(keys)) == len(keys) == 15
