"""The order of a sequential throughput phase: blocks of fresh processes, ABBA across blocks.

What is modelled: block ``b`` (1-based) runs one process of every label still open plus one of the baseline.
Odd blocks run the baseline first and the open labels in config order; even blocks run the same list reversed
(the labels in reverse order, the baseline last): A B | B A. Over every pair of blocks each arm's mean
schedule position is the same, so a host speed that drifts linearly through the run moves every arm alike
(``tests/analysis/test_sequential_coverage.py`` simulates the drift with these positions).

What is deliberately not modelled: which labels are open (``runners.orchestration.sequential`` decides it from
the recorded looks), statistics (``analysis.comparison.sequential``).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

T = TypeVar("T")


def block_order(baseline: T, labels: Sequence[T], block: int) -> list[T]:
    """The arms of block ``block`` (1-based) in run order: ``[baseline, *labels]`` when odd, reversed when even.

    Raises:
        ValueError: ``block`` < 1.
    """
    if block < 1:
        raise ValueError(f"block {block}: blocks are numbered from 1")
    arms = [baseline, *labels]
    return arms if block % 2 == 1 else arms[::-1]


def block_positions(labels: int, blocks: int) -> list[list[int]]:
    """Schedule positions (0-based, over the whole run) of each arm when ``labels`` labels stay open for ``blocks``
    blocks: ``out[0]`` the baseline's, ``out[j]`` label ``j``'s (``block_order``), each ``blocks`` long."""
    out: list[list[int]] = [[] for _ in range(labels + 1)]
    for b in range(1, blocks + 1):
        for i, arm in enumerate(block_order(0, list(range(1, labels + 1)), b)):
            out[arm].append((b - 1) * (labels + 1) + i)
    return out
