"""The runner prints the run's expected duration before the first case."""

from __future__ import annotations

from types import SimpleNamespace

from conf.schema_matrix import MatrixConfig
from conf.typed import validate_as
from runners.orchestration.progress import expected_duration_line
from tests.runners.helpers import compose_real


def _items(n: int, phase: str = "same_runtime") -> list[SimpleNamespace]:
    return [SimpleNamespace(case=SimpleNamespace(phase=phase)) for _ in range(n)]


def test_expected_duration_is_processes_times_expected_case_seconds_plus_cooldowns():
    line = expected_duration_line(_items(10), {"same_runtime": validate_as(MatrixConfig, {"expected_case_s": 30,
                                                                                              "cooldown_s": 2})})
    assert line.startswith("expected duration: ~5.3 min (10 processes x ~30 s in same_runtime)")  # 300 + 9 x 2 s


def test_a_phase_without_expected_case_seconds_says_the_eta_is_the_estimate():
    line = expected_duration_line(_items(3), {"same_runtime": validate_as(MatrixConfig, {"expected_case_s": None})})
    assert "unknown (no expected_case_s for phase(s) same_runtime)" in line


def test_the_embedded_default_states_its_expected_case_seconds():
    cfg = compose_real()
    assert cfg.phases["same_runtime"].expected_case_s == 30.0
