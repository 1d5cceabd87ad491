"""Shared fixtures and the test tiers. Markers are registered in pyproject.toml (``--strict-markers``).

Tiers (README "Tests"): ``make test`` runs every test but ``full_grid``/``gpu``/``npu`` (opt-in:
they run only when ``-m`` names them);
``make test-fast`` also leaves out ``slow``, ``engine`` (a vLLM engine, Ray cluster or browser
start) and ``heavy`` tests (no engine, 0.6 s or more per test function). ``tests/tier_guard.py`` fails any
test without ``engine``/``slow`` that starts an engine anyway, so no engine hides in the fast tier.
"""

from __future__ import annotations

import gc
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import setuptools  # noqa: F401  (before any test imports the stdlib's distutils: torch.compile's inductor does, and
# setuptools' distutils shim, which vLLM's CPU model runner imports through torch.utils.cpp_extension, then
# asserts in whichever later test of the same worker imports it: an order dependency between test files)
from hypothesis import HealthCheck, settings

from results_schema.codec.io import gc_paused
from tests.shared_runs import share_host_measurements  # noqa: F401  (autouse, session)
from tests.tier_guard import PLUGIN_NAME, TierGuard, install
from tests.xdist_locks import hold_test_slot, serial_names
from tests.xdist_order import expected_seconds, worksteal_order

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"


settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
"""Hypothesis's two timing checks are off in every tier: on this 2-core machine with engine tests beside
them, input generation once took over a second (``FailedHealthCheck: Input generation is slow`` in
``tests/offload/test_matching.py``, 2026-12-03). They judge the machine's load, not the code; every
property still runs its examples and asserts on each."""


OPT_IN_MARKERS = ("full_grid", "gpu", "npu")
"""Markers whose tests run only when the ``-m`` expression names them (as pyproject's default does)."""


def pytest_configure(config: pytest.Config) -> None:
    install(config)
    config.pluginmanager.register(_WorkstealOrder(), "worksteal-order")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collect with the cyclic garbage collector paused, then freeze what collection built.

    Collection imports the suite's modules (torch, pandas, pydantic models, ...): with the collector on, Python
    ran about 1,400 young and 11 full collections over them, 1.4-2.4 of 6-11 CPU-s per collecting process
    (each xdist worker collects; 2026-12-05, ``docs/measurements/test-stage-speed-2026-12-05.md``). After
    collection one full collection frees what it left, and ``gc.freeze`` moves the survivors (modules, classes,
    test items: alive until the process ends) out of the collector's later passes. Objects the tests create
    are collected as before. ``pytest_unconfigure`` unfreezes them, so the interpreter's shutdown frees them
    as before (frozen, triton's nanobind objects were reported as leaked at exit).
    """
    with gc_paused():
        result = yield
    gc.collect()
    gc.freeze()
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    gc.unfreeze()  # see pytest_collection


@pytest.hookimpl(tryfirst=True)  # before ``-m`` / ``-k`` deselect: every collected test's markers are checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a malformed ``serial`` or ``heavy`` marker on any collected test, in every mode; deselect opt-in tests
    (:data:`OPT_IN_MARKERS`) that the ``-m`` expression does not name.

    ``-m 'not slow'`` replaces pyproject's ``-m 'not full_grid and not gpu and not npu'``; without
    this step it would start the full offload grid over real vLLM (about 20 minutes).
    """
    for item in items:
        try:
            serial_names(item.iter_markers("serial"))
        except ValueError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        expected_seconds(item)
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


class _WorkstealOrder:
    """Under ``pytest-xdist --dist worksteal``: the controller tells each worker the mode (a worker's own
    ``config.option.dist`` is ``"no"``: ``xdist.remote.setup_config``), and each worker orders what is left after every
    deselection (:func:`tests.xdist_order.worksteal_order`)."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:  # noqa: ANN001  (xdist's WorkerController)
        node.workerinput["dist"] = node.config.getoption("dist")

    @pytest.hookimpl(trylast=True)  # after ``-m`` / ``-k`` and the opt-in step: the order is of the tests that run
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and workerinput.get("dist") == "worksteal":
            items[:] = worksteal_order(items, int(workerinput["workercount"]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist, hold the test's slot (:func:`tests.xdist_locks.hold_test_slot`) through its
    set-up, call and tear-down: ``exclusive`` tests run alone, ``serial(name)`` tests one per name.
    Outside xdist (one process) this does nothing."""
    if getattr(item.config, "workerinput", None) is None:  # not an xdist worker
        return (yield)
    shared_dir = Path(item.config.option.basetemp).parent  # xdist: <the controller's basetemp>/popen-gw<N>
    with hold_test_slot(shared_dir, exclusive=item.get_closest_marker("exclusive") is not None,
                        serial=serial_names(item.iter_markers("serial"))):
        return (yield)


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
    from runners.models.tiny_model import ensure_tiny_model

    return ensure_tiny_model(MODEL_CACHE)
