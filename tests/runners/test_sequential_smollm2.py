"""``+experiment=smollm2``'s throughput phase is sequential like the default's (``conf/matrix/same_runtime_smollm2.yaml``):
its plan holds the first look's ABBA blocks of four arms, and a fake-bench run of that config looks after 3 blocks and
stops every label that is known (``runners.orchestration.sequential``). The model is swapped for the tiny one (the fake
bench loads none; the smollm2 checkpoint would be built at the identity gate), the matrix is the experiment's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.sequential import read_looks
from runners.errors import EXIT_OK
from runners.orchestration.sequential import block_items, plan_lines
from runners.planning.plan import plan
from tests.runners.helpers import FAKE_BENCH, compose_cfg, compose_real
from tests.shared_runs import run_matrix

ARMS = ["baseline", "current_g2_n1", "current_g1_n1", "sync_g1_n1"]
SLOW = "current_g2_n1:1.3,current_g1_n1:1.6,sync_g1_n1:2"
"""Every offload label clearly slower than the baseline (round time x1.3 .. x2): each stops ``slower`` at look 1."""


def test_smollm2_plans_the_first_looks_three_abba_blocks_of_its_four_arms_with_a_budget_of_five() -> None:
    cfg = compose_real("+experiment=smollm2")
    seq = cfg.phases["same_runtime"].sequential
    assert (list(seq.looks), seq.target_pct, seq.alpha, seq.spending) == ([3, 4, 5], 5.0, 0.05, "pocock")
    items = plan(cfg)
    assert [(sc.case.label, sc.repeat) for sc in items] == (
        [(a, 0) for a in ARMS] + [(a, 1) for a in reversed(ARMS)] + [(a, 2) for a in ARMS])
    assert cfg.model.source == "smollm2" and {sc.case.runtime_name for sc in items} == {"cpu"}
    (line,) = plan_lines(cfg)
    assert "12 processes planned (3 blocks of 4 arms)" in line and "at most 8 more processes (budget 5 per arm)" in line


@pytest.mark.heavy  # one fake-bench run of 12 processes, no analysis (about 15 s)
def test_a_smollm2_run_looks_after_three_blocks_and_stops_every_known_label(tmp_path: Path) -> None:
    ov = ["+experiment=smollm2", "model=tiny", f"results_root={tmp_path}", "run_id=t",
          f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", "analyze=false",
          "phases.same_runtime.measured_rounds=2", "phases.same_runtime.min_measured_s=0.5",
          f'+phases.same_runtime.runtime.env.FAKE_SLOW="{SLOW}"']
    cfg = compose_cfg(*ov)
    assert run_matrix(cfg, ov) == EXIT_OK
    run_dir = tmp_path / "smollm2" / "t"
    (line,) = read_looks(run_dir)
    assert (line.look, line.blocks, line.looks, line.target_pct, line.next_blocks) == (1, 3, (3, 4, 5), 5.0, 0)
    assert [(x.label, x.verdict) for x in line.labels] == [(a, "slower") for a in ARMS[1:]]
    ran = [(r.record.label, r.record.repeat) for r in read_jsonl(run_dir / "same_runtime-runs.jsonl", CaseRun)]
    assert ran == [(sc.case.label, sc.repeat) for sc in block_items(cfg, "same_runtime", [line], 0)]
    assert ran == [(a, 0) for a in ARMS] + [(a, 1) for a in reversed(ARMS)] + [(a, 2) for a in ARMS]
