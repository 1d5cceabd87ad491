"""The xdist test slots (``tests/xdist_locks.py``): which tests may overlap, shown with threads.

``flock`` locks belong to an open file, so two threads that each open the lock files exclude each
other as two xdist worker processes do."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from tests.xdist_locks import hold_test_slot, serial_names


def _second_enters_while_first_holds(tmp_path: Path, first: dict, second: dict, expect_overlap: bool) -> bool:
    """Hold ``first``'s slot; report whether a thread asking for ``second``'s slot got it meanwhile
    (waiting 5 s when an overlap is expected, 0.5 s when not). The first slot is released either way,
    and the second thread must then get its slot."""
    entered, release = threading.Event(), threading.Event()
    release.set()  # the second thread leaves its slot as soon as it has it
    with hold_test_slot(tmp_path, **first):
        t = _hold(tmp_path, entered, release, **second)
        overlapped = entered.wait(5.0 if expect_overlap else 0.5)  # returns at once when granted
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
    assert _second_enters_while_first_holds(tmp_path, first, second, overlap) is overlap


def _hold(tmp_path: Path, entered: threading.Event, release: threading.Event, **slot: object) -> threading.Thread:
    def run() -> None:
        with hold_test_slot(tmp_path, **slot):  # type: ignore[arg-type]
            entered.set()
            release.wait(10)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_waiting_exclusive_test_keeps_new_tests_out(tmp_path: Path) -> None:
    """The gate: while an exclusive test waits for a running test, no new test starts before it."""
    a_in, a_go, e_in, e_go, b_in, b_go = (threading.Event() for _ in range(6))
    a = _hold(tmp_path, a_in, a_go, exclusive=False)
    assert a_in.wait(5)
    e = _hold(tmp_path, e_in, e_go, exclusive=True)
    time.sleep(0.3)  # the exclusive test now waits for the lock, holding the gate
    b = _hold(tmp_path, b_in, b_go, exclusive=False)
    assert not b_in.wait(0.5) and not e_in.is_set()
    a_go.set()
    assert e_in.wait(5) and not b_in.is_set()  # the exclusive test went first, alone
    e_go.set()
    assert b_in.wait(5)
    b_go.set()
    for t in (a, e, b):
        t.join(5)


def test_serial_locks_are_taken_in_sorted_order(tmp_path: Path) -> None:
    """Two tests naming the same locks in other orders cannot deadlock: while "b" is busy, a test
    naming ["b", "a"] already holds "a" (it takes "a" first)."""
    with open(tmp_path / "serial-b.lock", "a") as busy:
        fcntl.flock(busy, fcntl.LOCK_EX)
        entered, release = threading.Event(), threading.Event()
        t = _hold(tmp_path, entered, release, exclusive=False, serial=["b", "a"])
        time.sleep(0.3)
        with open(tmp_path / "serial-a.lock", "a") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                a_free = True
            except BlockingIOError:
                a_free = False
        assert not a_free and not entered.is_set()
        fcntl.flock(busy, fcntl.LOCK_UN)
    assert entered.wait(5)
    release.set()
    t.join(5)


class _Marker:
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args, self.kwargs = args, kwargs


def test_serial_marker_needs_one_name() -> None:
    assert serial_names([_Marker("ray"), _Marker("browser")]) == ["ray", "browser"]
    for bad in (_Marker(), _Marker(""), _Marker(3), _Marker("a", "b"), _Marker("a", x=1)):
        with pytest.raises(ValueError, match=r"serial needs exactly one name"):
            serial_names([bad])
