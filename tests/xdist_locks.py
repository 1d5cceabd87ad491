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
            fcntl.flock(held.enter_context(open(shared_dir / f"serial-{name}.lock", "a")), fcntl.LOCK_EX)
        yield
