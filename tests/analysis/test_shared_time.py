"""Claims about the shared-in-time analysis (``analysis.comparison.shared_time``): how much of a throughput phase's
process-level noise is a level shift shared by the arms of one block of time, and what pairing by block buys.

Every claim calls the production functions on simulated phases with fixed seeds: a known block shift is found
(its share near the truth, the F test significant in most runs, pairing cutting the log-ratio SD as the model
says) and, with no shift, the F test calls at its nominal 5% (the rate is printed: ``pytest -s``).
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from analysis.comparison.shared_time import block_anova, paired_gain, shared_in_time, shared_lines
from analysis.comparison.verdict_rule import f_sf
from analysis.report.console import print_summary
from analysis.report.summary import write_summary
from results_schema.codec.io import read_json
from results_schema.records.summary import ComparisonSummary, SharedInTimeRow
from tests.analysis.conftest import make_fixtures

LABEL_EFFECTS = np.log([1.0, 0.93, 0.88, 1.0, 0.95])
"""Label effects (log): a baseline, an offload cost of 7%, a control of 12%, a twin, another label."""


def _table(rng: np.random.Generator, sd_block: float, sd_own: float, labels: int, blocks: int) -> np.ndarray:
    """Log throughputs (labels, blocks): label effect + a shift shared by the block's processes + a process's own."""
    return (np.log(170.0) + LABEL_EFFECTS[:labels, None] + sd_block * rng.standard_normal(blocks)[None, :]
            + sd_own * rng.standard_normal((labels, blocks)))


def _runs(y: np.ndarray) -> pd.DataFrame:
    """A runs frame (``RunData.runs`` columns the function reads) of a labels x blocks table; label 0 the baseline."""
    rows = []
    for i in range(y.shape[0]):
        for j in range(y.shape[1]):
            rows.append({"phase": "same_runtime", "label": "baseline" if i == 0 else f"label{i}",
                         "implementation": "baseline" if i == 0 else "current", "repeat": j, "step_delay_ms": None,
                         "throughput_tok_s": float(np.exp(y[i, j]))})
    return pd.DataFrame(rows)


def test_the_f_tail_matches_the_published_table():
    assert f_sf(4.76, 3, 6) == pytest.approx(0.05, abs=1e-3)  # F_0.05(3, 6) = 4.76
    assert f_sf(4.10, 2, 10) == pytest.approx(0.05, abs=1e-3)  # F_0.05(2, 10) = 4.10
    assert f_sf(9.78, 3, 6) == pytest.approx(0.01, abs=2e-4)  # F_0.01(3, 6) = 9.78
    assert f_sf(0.0, 3, 6) == 1.0


def test_a_known_shared_block_shift_is_found():
    rng = np.random.default_rng(52)
    sd_block, sd_own, reps = 0.10, 0.03, 400
    truth = sd_block ** 2 / (sd_block ** 2 + sd_own ** 2)  # 0.917
    shares, calls, paired, unpaired = [], 0, [], []
    for _ in range(reps):
        y = _table(rng, sd_block, sd_own, labels=3, blocks=4)  # the default's first look: 3 labels x 4 blocks
        r = block_anova(y)
        shares.append(r.share)
        calls += r.p_block is not None and r.p_block < 0.05
        p, u = paired_gain(y[1], y[0])
        paired.append(p ** 2)
        unpaired.append(u ** 2)
    print(f"\nknown shift (block SD {sd_block}, own SD {sd_own}, true share {truth:.3f}): median share "
          f"{np.median(shares):.3f}, F called in {calls}/{reps}, paired/unpaired SD "
          f"{math.sqrt(np.mean(paired) / np.mean(unpaired)):.3f} (model {math.sqrt(1 - truth):.3f})")
    assert abs(float(np.median(shares)) - truth) < 0.08
    assert calls / reps >= 0.85
    assert math.sqrt(np.mean(paired) / np.mean(unpaired)) == pytest.approx(math.sqrt(1 - truth), abs=0.08)


@pytest.mark.heavy  # 0.7-1.0 s each here (4000 simulated phases)
@pytest.mark.parametrize(("labels", "blocks"), [(3, 4), (5, 4), (2, 8)])
def test_with_no_shared_shift_the_f_test_calls_at_its_nominal_rate(labels, blocks):
    rng = np.random.default_rng(1000 + 10 * labels + blocks)
    reps, paired, unpaired, calls = 4000, [], [], 0
    for _ in range(reps):
        y = _table(rng, 0.0, 0.03, labels, blocks)
        r = block_anova(y)
        calls += r.p_block is not None and r.p_block < 0.05
        p, u = paired_gain(y[1], y[0])
        paired.append(p ** 2)
        unpaired.append(u ** 2)
    rate, se = calls / reps, math.sqrt(0.05 * 0.95 / reps)
    print(f"\nno shift, {labels} labels x {blocks} blocks: F called in {calls}/{reps} = {rate:.2%} "
          f"(nominal 5%, 3 SE = {3 * se:.2%}); mean paired / unpaired variance {np.mean(paired) / np.mean(unpaired):.3f}")
    assert abs(rate - 0.05) <= 3 * se
    assert np.mean(paired) / np.mean(unpaired) == pytest.approx(1.0, abs=0.06)  # pairing buys nothing here


def test_the_runs_frame_uses_complete_blocks_only_and_pairs_every_shared_block():
    rng = np.random.default_rng(7)
    y = _table(rng, 0.05, 0.02, labels=3, blocks=5)
    runs = _runs(y)
    runs = runs[~((runs["label"] == "label2") & (runs["repeat"] == 4))]  # label2's last process failed
    (row,) = [SharedInTimeRow.model_validate(r) for r in shared_in_time(runs)]
    assert (row.labels, row.blocks, row.dropped_blocks) == (3, 4, (4,))
    assert row.f_block == pytest.approx(block_anova(y[:, :4]).f_block)
    pairs = {p.label: p for p in row.pairs}
    assert pairs["label1"].blocks == 5 and pairs["label2"].blocks == 4  # pairing uses every block both ran
    assert pairs["label1"].ratio == pytest.approx(paired_gain(y[1], y[0])[0] / paired_gain(y[1], y[0])[1])
    lines = shared_lines([row])
    assert lines[0].startswith("shared in time same_runtime: blocks of time carry ")
    assert "F(3, 6) = " in lines[0] and "incomplete blocks dropped (repeat 4)" in lines[0]
    assert lines[1].startswith("shared in time same_runtime/label1 vs baseline: log-ratio SD paired by block ")
    assert lines[-1].startswith("shared-in-time model: two-way additive ANOVA")
    one_block = runs[runs["repeat"] == 0]
    assert shared_in_time(one_block) == []  # fewer than 2 complete blocks: no line
    assert shared_in_time(runs[runs["label"] == "baseline"]) == []  # one label: no line
    with pytest.raises(ValueError, match="labels >= 2, blocks >= 2"):
        block_anova(np.zeros((1, 4)))


@pytest.mark.heavy  # 11 s here beside other work (write_summary: its plots and the HTML page)
def test_the_fixture_run_prints_its_shared_in_time_line_in_every_report(tmp_path):
    run = make_fixtures.valid_run(tmp_path / "run")
    write_summary(run)
    cs = read_json(run / "summary" / "comparison-summary.json", ComparisonSummary)
    (row,) = cs.shared_in_time
    assert (row.phase, row.labels, row.blocks, row.dropped_blocks) == ("same_runtime", 9, 3, ())
    assert {p.label for p in row.pairs} == {r.label for r in cs.rows} - {"baseline"}
    first = shared_lines(cs.shared_in_time)[0]
    assert first.startswith("shared in time same_runtime: blocks of time carry ")
    assert first in (run / "summary" / "comparison-summary.md").read_text()
    buf = io.StringIO()
    print_summary(run / "summary", console=Console(file=buf, width=400, color_system=None))
    assert first in buf.getvalue()
    html = (run / "summary" / "report.html").read_text()
    assert "shared in time same_runtime/current_g2_n1 vs baseline: log-ratio SD paired by block" in html
