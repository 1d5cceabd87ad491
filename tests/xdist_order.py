"""The order of the collected tests under ``pytest-xdist --dist worksteal``: the longest modules first, spread
over the workers (``tests/conftest.py``, ``pytest_collection_modifyitems``).

worksteal (pytest-xdist 3.x, ``xdist/scheduler/worksteal.py``) hands each of the W workers one contiguous chunk of
the collected tests (the first ``n // W``, then ``(n - n // W) // (W - 1)``, ...) and, when a worker's queue runs
out, moves the last half of the longest queue to it. In collection order the longest tests (the serving matrices of
``tests/runners/test_serving*.py``) sat near the end of the last chunk, were stolen last and ran alone at the end
while the other workers idled: the engine-free pass measured 828 s of wall for 1838 s of test time on 3 workers
(2026-12-05, ``docs/test-suite.md``). Here every module whose tests add up to :data:`LEADING_S` or more
(:func:`expected_seconds`: declared seconds, else :data:`DEFAULT_HEAVY_S` per ``heavy`` test and :data:`LIGHT_S` per
other test) is dealt, longest first, to the chunk whose head is lightest (longest processing time first, LPT: Graham,
"Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969), at that chunk's head; every other test
keeps its collection order and fills the chunks behind them; stealing then moves only tails of short tests. A head
longer than its chunk moves the later chunks' boundaries (the heads here are a few tests each).

A module moves as one unit, so its module-scoped fixtures run on one worker as before. The order is a function of
the collected items and W alone: every worker computes the same one (xdist refuses a run whose workers collected
different orders).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

DEFAULT_HEAVY_S = 2.0
"""Seconds of a ``heavy`` test that declares none (the marker's floor is 0.6 s in the fast tier: pyproject.toml)."""
LIGHT_S = 0.1
"""Seconds of a test without ``heavy``."""
LEADING_S = 10.0
"""A module of at least this many seconds is dealt to a chunk's head; the rest keep collection order."""


def expected_seconds(item: pytest.Item) -> float:
    """The seconds a test is expected to take: its ``heavy`` marker's ``seconds`` (measured on this project's 2-core
    host in the engine-free pass), :data:`DEFAULT_HEAVY_S` for a ``heavy`` test without one, else :data:`LIGHT_S`.

    Raises:
        pytest.UsageError: ``seconds`` is not a positive number, or the marker has a positional or another keyword
            argument.
    """
    mark = item.get_closest_marker("heavy")
    if mark is None:
        return LIGHT_S
    if mark.args or set(mark.kwargs) - {"seconds"}:
        raise pytest.UsageError(f"{item.nodeid}: heavy{mark.args or ''}{dict(mark.kwargs) or ''}: the marker takes only "
                                "seconds=N (keyword)")
    seconds = mark.kwargs.get("seconds", DEFAULT_HEAVY_S)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise pytest.UsageError(f"{item.nodeid}: heavy(seconds={seconds!r}): seconds must be a positive number")
    return float(seconds)


def chunk_sizes(n: int, workers: int) -> list[int]:
    """The sizes of worksteal's first chunks for ``n`` tests on ``workers`` idle workers (``check_schedule``: each
    worker in turn takes ``len(pending) // workers_remaining``)."""
    sizes: list[int] = []
    for i in range(workers):
        sizes.append((n - sum(sizes)) // (workers - i))
    return sizes


def _module(item: pytest.Item) -> str:
    """The test module's path of ``item`` (its node id up to the first ``::``): the unit the order moves."""
    return item.nodeid.split("::", 1)[0]


def worksteal_order(items: Sequence[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered for ``workers`` worksteal workers (module docstring). Same items, each once.

    Raises:
        pytest.UsageError: a malformed ``heavy(seconds=...)`` (:func:`expected_seconds`).
    """
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    seconds = {name: sum(expected_seconds(i) for i in group) for name, group in modules.items()}
    leading = sorted((name for name in modules if seconds[name] >= LEADING_S), key=lambda m: (-seconds[m], m))
    if workers < 2 or not leading:
        return list(items)
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for name in leading:  # LPT: the next-longest module to the lightest head
        k = min(range(workers), key=lambda j: (load[j], j))
        heads[k] += modules[name]
        load[k] += seconds[name]
    lead = set(leading)
    rest = iter([i for i in items if _module(i) not in lead])
    out: list[pytest.Item] = []
    for head, size in zip(heads, chunk_sizes(len(items), workers), strict=True):
        out += head
        out += itertools.islice(rest, max(0, size - len(head)))
    out += list(rest)
    return out
