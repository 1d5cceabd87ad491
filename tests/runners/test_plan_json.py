"""``plan.json``: the runner's expanded plan, read by analysis instead of re-expanding ``config.yaml``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from results_schema.codec.io import read_json
from results_schema.records.plan import RunPlan
from runners.planning.plan import plan
from runners.orchestration.rundir import write_plan
from tests.runners.helpers import compose_cfg


def test_plan_json_counts_every_scheduled_process(tmp_path: Path) -> None:
    cfg = compose_cfg("+experiment=smoke", "run_id=r1")
    doc = read_json(write_plan(tmp_path, cfg), RunPlan)
    assert doc.processes == len(plan(cfg))
    cases = {c.label: c for ph in doc.phases for c in ph.cases}
    failing = [c for c in cases.values() if c.expect_error is not None]
    assert failing and all(c.expected_runs == 0 and c.expected_failures == c.repeats for c in failing)
    assert cases["baseline"].expected_runs == cases["baseline"].repeats and cases["baseline"].offload_group_size == 0


def test_plan_json_refuses_counts_that_do_not_follow_repeats(tmp_path: Path) -> None:
    cfg = compose_cfg("run_id=r1")
    raw = write_plan(tmp_path, cfg).read_text()
    bad = raw.replace('"expected_runs": 1', '"expected_runs": 2', 1)
    assert bad != raw
    with pytest.raises(ValidationError, match="do not follow repeats"):
        RunPlan.model_validate_json(bad)
