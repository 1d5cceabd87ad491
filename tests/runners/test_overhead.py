"""The orchestration-overhead benchmark runs the matrix and accounts for every case."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runners.orchestration.overhead import measure
from tests.runners.helpers import FAKE_BENCH, TINY_DEFAULT


@pytest.mark.heavy  # 3 s CPU
def test_overhead_is_runner_wall_minus_case_walls_per_case(tmp_path: Path) -> None:
    m = measure(tmp_path, [*TINY_DEFAULT, f"bench_command=[{sys.executable},{FAKE_BENCH}]", "analyze=false"])
    assert m["cases"] == 5 and m["runner_exit"] == 0
    assert m["copy_bench_s"] == 0.0  # analyze=false: no copy bench
    assert abs(m["overhead_s"] - (m["runner_wall_s"] - m["case_wall_sum_s"] - m["cooldown_s"])) < 1e-9
    assert m["overhead_per_case_s"] == m["overhead_s"] / 5
    assert m["startup_s"] is not None and 0 < m["startup_s"] < m["runner_wall_s"]
    assert "spawn+reap" in m["runner_summary"]
    assert "copy bench 0.0 s" in m["runner_summary"] and " s/case (identity" in m["runner_summary"]
