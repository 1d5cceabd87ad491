"""Shared fixtures and the test tiers. Markers are registered in pyproject.toml (``--strict-markers``).

Tiers (README "Tests"): ``make test`` runs every test but ``full_grid``/``gpu``/``npu`` (opt-in:
they run only when ``-m`` names them);
``make test-fast`` also leaves out ``slow`` and ``engine`` tests (no vLLM engine, Ray cluster or
browser start). ``tests/tier_guard.py`` fails any test without one of those markers that starts
an engine anyway, so nothing heavy can sit silently in the fast tier.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.shared_runs import share_host_measurements  # noqa: F401  (autouse, session)
from tests.tier_guard import PLUGIN_NAME, TierGuard, install

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"


OPT_IN_MARKERS = ("full_grid", "gpu", "npu")
"""Markers whose tests run only when the ``-m`` expression names them (as pyproject's default does)."""


def pytest_configure(config: pytest.Config) -> None:
    install(config)


ENGINE_TESTS = {
    "tests/accuracy/test_case.py::test_matrix_turns_crashing_cases_into_typed_failures":
        "two real `runners.accuracy run` case processes (vLLM import and engine construction on a broken model)",
    "tests/analysis/test_html_report.py::test_browser_renders_the_valid_report": "headless Chromium",
    "tests/analysis/test_html_report.py::test_browser_renders_the_invalid_report_verdict_first": "headless Chromium",
    "tests/analysis/test_html_report.py::test_browser_renders_the_real_tiny_run": "headless Chromium",
}
"""Tests (``file::name``, every parametrization) that start an engine but are not ``slow``: marked ``engine`` here.

Kept in one place (no edits to those test files); ``tests/tier_guard.py`` fails an engine start in a
test missing from this list, and a listed test that no longer exists is reported as a warning.
"""


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark :data:`ENGINE_TESTS` ``engine``; deselect opt-in tests (:data:`OPT_IN_MARKERS`) ``-m`` does not name.

    ``-m 'not slow'`` replaces pyproject's ``-m 'not full_grid and not gpu and not npu'``; without
    the second step it would start the full offload grid over real vLLM (about 20 minutes).
    """
    _mark_engine_tests(items)
    _deselect_opt_in(config, items)


def _mark_engine_tests(items: list[pytest.Item]) -> None:
    found = set()
    for item in items:
        key = item.nodeid.split("[", 1)[0]
        if key in ENGINE_TESTS:
            item.add_marker(pytest.mark.engine)
            found.add(key)
    files = {item.nodeid.split("::", 1)[0] for item in items}
    for key in sorted(set(ENGINE_TESTS) - found):
        if key.split("::", 1)[0] in files:
            warnings.warn(f"tests/conftest.py ENGINE_TESTS names {key}, which no longer exists", stacklevel=1)


def _deselect_opt_in(config: pytest.Config, items: list[pytest.Item]) -> None:
    expr = config.getoption("markexpr") or ""
    skipped = [m for m in OPT_IN_MARKERS if m not in expr]
    if not skipped:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in skipped) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def tier_guard(request: pytest.FixtureRequest) -> TierGuard:
    """The session's fast-tier guard (its own tests read and clear its detections)."""
    guard = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(guard, TierGuard)
    return guard


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The default 8-layer tiny Qwen2 model, built once into ``.cache/models`` and verified."""
    from runners.tiny_model import ensure_tiny_model

    return ensure_tiny_model(MODEL_CACHE)
