"""Where the test stage's CPU goes: per test, the pytest process's own CPU and its waited-for children's.

Two parts in one file:

* a pytest plugin. Loaded into every pytest process of a stage (xdist workers included, which inherit the
  environment)::

      PYTHONPATH=scripts PYTEST_ADDOPTS="-p cpu_by_test" CPU_BY_TEST_OUT=/tmp/cpu make test

  each process appends JSON lines to ``$CPU_BY_TEST_OUT/<pid>.jsonl``: one ``collection`` line (the process's CPU-s
  when collection ended), one ``test`` line per test (``self``: the process's user + sys CPU-s over the test's
  setup, call and teardown; ``children``: the CPU-s of the child processes it waited for meanwhile, from
  ``getrusage(RUSAGE_CHILDREN)``, so a case process's own children are in it once the case process waited for
  them; ``wall``: seconds), one ``end`` line. A child that is never waited for (a daemon left to the session's
  end) is counted where it is reaped; module and session fixtures count in the test that set them up.
* ``python scripts/cpu_by_test.py DIR [N]``: the totals, the N (default 30) costliest tests and modules.

Without ``CPU_BY_TEST_OUT`` the plugin writes nothing. Used for ``docs/measurements/test-stage-cpu-2026-12-06.md``.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_OUT = os.environ.get("CPU_BY_TEST_OUT")


def _usage() -> tuple[float, float]:
    """(this process's user + sys CPU-s, its waited-for children's)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _write(line: dict[str, Any]) -> None:
    if _OUT:
        line["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "")
        with open(Path(_OUT) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    own, kids = _usage()
    _write({"phase": "collection", "self": own, "children": kids})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    (own0, kids0), t0 = _usage(), time.monotonic()
    yield
    (own1, kids1), t1 = _usage(), time.monotonic()
    _write({"phase": "test", "id": item.nodeid, "self": own1 - own0, "children": kids1 - kids0, "wall": t1 - t0})


def pytest_sessionfinish(session: pytest.Session) -> None:
    own, kids = _usage()
    _write({"phase": "end", "self": own, "children": kids})


def report(out_dir: Path, most: int = 30) -> str:
    """The totals, the ``most`` costliest tests and modules (self + children CPU-s) of the lines in ``out_dir``.

    Raises:
        FileNotFoundError: ``out_dir`` holds no ``*.jsonl`` file.
    """
    files = sorted(out_dir.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{out_dir}: no *.jsonl file (was CPU_BY_TEST_OUT set for the run?)")
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines() if x.strip()]
    tests = [x for x in lines if x["phase"] == "test"]
    coll = [x["self"] for x in lines if x["phase"] == "collection"]
    out = [f"{len(files)} pytest processes; collection {sum(coll):.0f} CPU-s ({', '.join(f'{c:.1f}' for c in coll)})",
           f"{len(tests)} tests: self {sum(x['self'] for x in tests):.0f} CPU-s, children "
           f"{sum(x['children'] for x in tests):.0f} CPU-s", "", "self  children  wall  test"]
    for x in sorted(tests, key=lambda x: -(x["self"] + x["children"]))[:most]:
        out.append(f"{x['self']:6.1f} {x['children']:7.1f} {x['wall']:6.1f}  {x['id']}")
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for x in tests:
        m = by[x["id"].split("::")[0]]
        m[0] += 1
        m[1] += x["self"]
        m[2] += x["children"]
    out += ["", "self  children  tests  module"]
    for name, (n, own, kids) in sorted(by.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:most]:
        out.append(f"{own:6.1f} {kids:7.1f} {int(n):5d}  {name}")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python scripts/cpu_by_test.py DIR [N]")
    print(report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 30))
