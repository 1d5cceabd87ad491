"""The xdist test slots (``tests/xdist_locks.py``): which tests may overlap, shown with threads.

``flock`` locks belong to an open file, so two threads that each open the lock files exclude each
other as two xdist worker processes do."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.xdist_locks import hold_test_slot


def _second_enters_while_first_holds(tmp_path: Path, first: dict, second: dict) -> bool:
    """Hold ``first``'s slot; report whether a thread asking for ``second``'s slot got it within 0.5 s.
    The first slot is released either way, and the second thread must then get its slot."""
    entered = threading.Event()

    def take() -> None:
        with hold_test_slot(tmp_path, **second):
            entered.set()

    with hold_test_slot(tmp_path, **first):
        t = threading.Thread(target=take, daemon=True)
        t.start()
        overlapped = entered.wait(0.5)
    t.join(timeout=5)
    assert entered.is_set() and not t.is_alive(), "the second slot was never granted"
    return overlapped


@pytest.mark.parametrize(("first", "second", "overlap"), [
    ({"exclusive": False}, {"exclusive": False}, True),
    ({"exclusive": False, "serial": ["ray"]}, {"exclusive": False}, True),
    ({"exclusive": False, "serial": ["ray"]}, {"exclusive": False, "serial": ["browser"]}, True),
    ({"exclusive": False, "serial": ["ray"]}, {"exclusive": False, "serial": ["ray"]}, False),
    ({"exclusive": False, "serial": ["a", "ray"]}, {"exclusive": False, "serial": ["ray", "z"]}, False),
    ({"exclusive": True}, {"exclusive": False}, False),
    ({"exclusive": False}, {"exclusive": True}, False),
    ({"exclusive": False, "serial": ["ray"]}, {"exclusive": True}, False),
])
def test_which_slots_overlap(tmp_path: Path, first: dict, second: dict, overlap: bool) -> None:
    assert _second_enters_while_first_holds(tmp_path, first, second) is overlap
