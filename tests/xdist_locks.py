"""Which tests of different pytest-xdist workers may run at the same time (``tests/conftest.py``).

Every run's start ends the case processes of dead runners on the whole machine
(``runners.incase.case_processes.end_orphaned_cases``), as it must in production; a test that kills a
runner and then checks what its own resume (or its own call) ends would lose that race to another
worker's run. Such a test is marked ``exclusive`` and runs alone. Tests marked ``serial(name)`` with
the same name (the Ray clusters) never overlap, but may run beside any other test.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path


@contextmanager
def hold_test_slot(shared_dir: Path, *, exclusive: bool, serial: Iterable[str] = ()) -> Iterator[None]:
    """Hold the locks of one test for the ``with`` body; blocks until they are free.

    Every test holds ``exclusive.lock`` shared, an exclusive test holds it exclusively; the gate
    ``exclusive.gate``, taken first, lets no new test start while an exclusive one waits. Then one
    exclusive ``serial-<name>.lock`` per name, in sorted order (no lock-order deadlock). ``flock``
    locks belong to the open file, so threads of one process exclude each other too.
    """
    with ExitStack() as held:
        gate = held.enter_context(open(shared_dir / "exclusive.gate", "a"))
        lock = held.enter_context(open(shared_dir / "exclusive.lock", "a"))
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        held.callback(fcntl.flock, lock, fcntl.LOCK_UN)
        for name in sorted(set(serial)):
            fh = held.enter_context(open(shared_dir / f"serial-{name}.lock", "a"))
            fcntl.flock(fh, fcntl.LOCK_EX)
            held.callback(fcntl.flock, fh, fcntl.LOCK_UN)  # unlocked even if a fork still holds the file open
        yield


def serial_names(item_markers: Iterable[object]) -> list[str]:
    """The names of a test's ``serial`` markers; raises ``ValueError`` for a marker that is not
    ``serial("<name>")`` (one non-empty string), naming what was given."""
    names = []
    for m in item_markers:
        args = getattr(m, "args", ())
        if len(args) != 1 or not isinstance(args[0], str) or not args[0] or getattr(m, "kwargs", {}):
            raise ValueError(f"@pytest.mark.serial needs exactly one name, e.g. serial(\"ray\"); got args={args!r}")
        names.append(args[0])
    return names
