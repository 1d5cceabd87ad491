"""``+experiment=aa_paired`` end to end with the fake bench: it plans 6 ABBA blocks of its 5 arms, runs them in that
order, takes its one look paired by block, and prints paired A/A and control lines and the A/A call count.

The fake's round time is set per process (``FAKE_SLOW``, ``label-rN:factor``): every process of block ``N`` shares
the block's speed factor (1.0, 1.3, 0.8, 1.1, 0.9, 1.2: the host's episodes), the twins differ from their arm by at most 2%
per block, ``current_g2_n1`` and its twin are 15% slower than the block's baseline, and the control adds its
2.6 ms per step (the fake adds ``max_tokens * step_delay_ms`` to each round).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from analysis.comparison.verdict_rule import decide_paired
from analysis.report.console import print_summary
from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.sequential import read_looks
from runners.errors import EXIT_OK
from runners.planning.blocks import block_order
from tests.runners.helpers import compose_real, fake_blocks_overrides
from tests.shared_runs import run_matrix

BLOCK = {0: 1.0, 1: 1.3, 2: 0.8, 3: 1.1, 4: 0.9, 5: 1.2}
TWIN = {0: 1.01, 1: 0.99, 2: 1.02, 3: 0.98, 4: 1.01, 5: 0.99}
N = len(BLOCK)  # the experiment's blocks (conf/matrix/same_runtime_aa_paired_cpu.yaml: looks [6])
CONTROL = "control_delay_2_6ms"
ARMS = ["baseline", CONTROL, "baseline_twin", "current_g2_n1", "current_g2_n1_twin"]  # the matrix's order
SLOW = ",".join([*(f"baseline-r{r}:{f}" for r, f in BLOCK.items()),
                 *(f"baseline_twin-r{r}:{f * TWIN[r]}" for r, f in BLOCK.items()),
                 *(f"current_g2_n1-r{r}:{1.15 * f}" for r, f in BLOCK.items()),
                 *(f"current_g2_n1_twin-r{r}:{1.15 * f * TWIN[N - 1 - r]}" for r, f in BLOCK.items()),
                 *(f"{CONTROL}-r{r}:{f}" for r, f in BLOCK.items())])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> Path:
    root = tmp_path_factory.mktemp("aa_paired")
    ov = fake_blocks_overrides(root, SLOW, "+experiment=aa_paired", "model=tiny")
    assert run_matrix(compose_real(*ov), ov) == EXIT_OK
    return root / "aa_paired" / "t"


def _values(run_dir: Path) -> tuple[list[tuple[str, int]], dict[str, dict[int, float]]]:
    order, vals = [], {}
    for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun):
        order.append((r.record.label, r.record.repeat))
        vals.setdefault(r.record.label, {})[r.record.repeat] = r.record.throughput_tok_s
    return order, vals


@pytest.mark.heavy(seconds=16)  # one fake-bench run of 30 processes with analysis (about 60 s)
def test_aa_paired_runs_six_abba_blocks_and_takes_one_paired_look(run: Path) -> None:
    order, _ = _values(run)
    assert order == [(arm, b - 1) for b in range(1, N + 1) for arm in block_order(ARMS[0], ARMS[1:], b)]
    (line,) = read_looks(run)
    assert (line.pairing, line.looks, line.look, line.look_alpha, line.next_blocks) == ("block", (N,), 1, 0.05, 0)
    assert [x.label for x in line.labels] == ARMS[1:] and all(x.processes == N for x in line.labels)


@pytest.mark.heavy  # shares the run above
def test_aa_paired_prints_paired_aa_and_control_lines_and_counts_the_calls(run: Path) -> None:
    _, vals = _values(run)
    cs = json.loads((run / "summary" / "comparison-summary.json").read_text())
    rows = {(r["a_label"], r["b_label"]): r for r in cs["aa_comparisons"]}
    assert list(rows) == [("baseline_twin", "baseline"), ("current_g2_n1_twin", "current_g2_n1"),
                          (CONTROL, "baseline"), (CONTROL, "baseline_twin")]
    for (a, b), r in rows.items():
        d = decide_paired([vals[a][k] for k in range(N)], [vals[b][k] for k in range(N)], margin_pct=5.0,
                          confidence=0.95)
        assert (r["verdict"], r["ci_low_pct"], r["ci_high_pct"], r["method"]) == (
            d.verdict, pytest.approx(d.ci_low_pct), pytest.approx(d.ci_high_pct), "paired t, 6 blocks")
        assert r["verdict"] == ("slower" if a == CONTROL else "equivalent")
    effects = {e["label"]: e for e in cs["detectable_effects"]}
    assert set(effects) == {"current_g2_n1", "current_g2_n1_twin", CONTROL}
    assert all(e["method"] == "paired t, 6 blocks vs baseline" and e["df"] == 5 for e in effects.values())
    buf = io.StringIO()
    print_summary(run / "summary", console=Console(file=buf, width=400, color_system=None))
    out = buf.getvalue()
    assert "A/A same_runtime: baseline_twin vs baseline: equivalent (" in out
    assert "paired t, 6 blocks); expected no call" in out
    assert f"speed control (2.6 ms per step) same_runtime: {CONTROL} vs baseline_twin: slower (CI95% " in out
    assert "A/A calls: 0 of 2" in out
    assert f"resolving power same_runtime/{CONTROL}: slower; this run could resolve" in out
    assert "80% power, paired t, 6 blocks vs baseline; range from the SD of the per-block log ratio, 5 df" in out
