"""A sequential phase declared paired (``sequential.pairing: block``) end to end with the fake bench.

The fake's round time is set per process (``FAKE_SLOW``, ``label-rN:factor``) so that every process of block ``N``
shares the block's speed factor (1.0, 1.3, 0.8: the host's episodes, docs/measurements/noise-source-2026-12-05.md),
and each offload label is a fixed factor slower than its block's baseline: ``current_g2_n1`` x1.15, ``current_g1_n1``
x2. Unpaired, the blocks' shared factor is noise that hides ``current_g2_n1``'s cost at look 1; paired by block it
cancels, and every label stops ``slower`` at look 1 with the paired t interval, which the record names and
``analysis validate`` recomputes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.comparison.sequential import SequentialDesign, look_values, look_verdict
from analysis.comparison.verdict_rule import PAIRED, decide_paired
from analysis.validation.validate import validate_run
from results_schema.codec.io import dumps_model, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.sequential import FILE_NAME, read_looks
from runners.errors import EXIT_OK
from runners.orchestration.rundir import write_sha256sums
from runners.orchestration.sequential import look_on, phase_values
from tests.runners.helpers import compose_cfg, fake_blocks_overrides
from tests.shared_runs import run_matrix

BLOCK = {0: 1.0, 1: 1.3, 2: 0.8}
SLOW = ",".join([*(f"baseline-r{r}:{f}" for r, f in BLOCK.items()),
                 *(f"current_g2_n1-r{r}:{1.15 * f}" for r, f in BLOCK.items()),
                 *(f"current_g1_n1-r{r}:{2 * f}" for r, f in BLOCK.items()),
                 *(f"control_delay_2_6ms-r{r}:{f}" for r, f in BLOCK.items())])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> Path:
    root = tmp_path_factory.mktemp("paired")
    ov = fake_blocks_overrides(root, SLOW, "model=tiny", "matrix@phases.same_runtime=same_runtime_cpu",
                               "phases.same_runtime.sequential.looks=[3,4,6]",
                               "phases.same_runtime.sequential.pairing=block")
    assert run_matrix(compose_cfg(*ov), ov) == EXIT_OK
    return root / "default" / "t"


def _values(run_dir: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun):
        out.setdefault(r.record.label, {})[r.record.repeat] = r.record.throughput_tok_s
    return out


@pytest.mark.heavy(seconds=10)  # one fake-bench run of 12 processes with analysis (about 20 s)
def test_a_paired_design_records_and_decides_each_look_with_the_paired_t_over_blocks(run: Path) -> None:
    (line,) = read_looks(run)
    assert line.pairing == "block" and line.look == 1 and line.next_blocks == 0
    assert [(x.label, x.verdict, x.method) for x in line.labels] == [
        ("current_g2_n1", "slower", PAIRED), ("current_g1_n1", "slower", PAIRED), ("control_delay_2_6ms", "slower", PAIRED)]
    vals = _values(run)
    design = SequentialDesign((3, 4, 6), pairing="block")
    for x in line.labels:
        a, b = look_values(vals[x.label], vals["baseline"], design, 0)
        d = decide_paired(a, b, margin_pct=5.0, confidence=1 - line.look_alpha)
        assert (x.ci_low_pct, x.ci_high_pct, x.processes) == (d.ci_low_pct, d.ci_high_pct, 3)
        assert "paired by block" in x.reason and "CI96.9 paired t" in x.reason
    # the same processes judged unpaired: the blocks' shared speed hides current_g2_n1's 13% cost at look 1
    unpaired = SequentialDesign((3, 4, 6))
    assert look_verdict(*look_values(vals["current_g2_n1"], vals["baseline"], unpaired, 0), unpaired, 0).verdict == "open"
    assert "pairing: block" in (run / "config.yaml").read_text()


@pytest.mark.heavy  # shares the run above
def test_validate_recomputes_the_paired_looks_and_refuses_a_recorded_interval_of_another_method(run: Path,
                                                                                                tmp_path: Path) -> None:
    report = validate_run(run)
    assert report.valid, [i.message for i in report.issues if i.severity == "error"]
    assert next(c for c in report.checks if c.name == "sequential").passed
    md = (run / "summary" / "comparison-summary.md").read_text()
    assert "CI96.9 paired t" in md and "paired by block" in md
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    text = (copy / FILE_NAME).read_text().replace('"method":"paired t"', '"method":"Welch t"', 1)
    (copy / FILE_NAME).write_text(text)
    bad = validate_run(copy)
    msgs = [i.message for i in bad.issues if i.severity == "error"]
    assert not bad.valid and any("recorded slower (Welch t" in m and "recomputed slower (paired t" in m
                                 for m in msgs), msgs


@pytest.mark.heavy  # shares the run above
def test_validate_refuses_a_look_under_looks_the_config_did_not_declare(run: Path, tmp_path: Path) -> None:
    (line,) = read_looks(run)
    # the same look re-made by the runner's look_on under looks [3, 4, 5]: it spends another alpha at 3 blocks, and
    # stops every label as the recorded one did, so it agrees with itself and with every count
    other = SequentialDesign((3, 4, 5), pairing="block")
    remade = look_on("same_runtime", other, "baseline", [x.label for x in line.labels], [],
                     phase_values(run, "same_runtime"))
    assert remade is not None and remade.look_alpha != line.look_alpha and (remade.still_open, remade.next_blocks) == (
        (), 0)
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / FILE_NAME).write_text(dumps_model(remade) + "\n")
    write_sha256sums(copy)  # as a hand that edits the lines would
    errors = [(i.code, i.message) for i in validate_run(copy).issues if i.severity == "error"]
    assert errors == [("sequential_design", "same_runtime: the recorded design is not what the run declared: looks "
                       "[3, 4, 5] recorded (look 1); declared [3, 4, 6] (phases.same_runtime.sequential.looks)")]
