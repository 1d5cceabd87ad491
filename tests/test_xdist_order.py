"""The worksteal order of the collected tests (``tests/xdist_order.py``): the longest modules at the chunks' heads,
every test once, modules kept whole, the same order for the same input, and a malformed ``heavy`` refused."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.xdist_order import LIGHT_S, chunk_sizes, expected_seconds, worksteal_order

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class _Mark:
    kwargs: dict[str, object] = field(default_factory=dict)
    args: tuple[object, ...] = ()


@dataclass(frozen=True)
class _Item:
    """What the order reads of a ``pytest.Item``: its node id and its closest ``heavy`` marker."""

    nodeid: str
    heavy: _Mark | None = None

    def get_closest_marker(self, name: str) -> _Mark | None:
        return self.heavy if name == "heavy" else None


def _items() -> list[_Item]:
    light = [_Item(f"tests/test_l{m}.py::t{k}") for m in range(6) for k in range(20)]
    heavy = [_Item("tests/test_a.py::t0", _Mark({"seconds": 30})), _Item("tests/test_a.py::t1", _Mark({"seconds": 30})),
             _Item("tests/test_b.py::t0", _Mark({"seconds": 100})),
             _Item("tests/test_c.py::t0", _Mark({"seconds": 50})), _Item("tests/test_c.py::t1", _Mark()),
             _Item("tests/test_d.py::t0", _Mark({"seconds": 40}))]
    return light[:50] + heavy[:2] + light[50:] + heavy[2:]


def _chunks(order: list, workers: int) -> list[list]:
    out, start = [], 0
    for size in chunk_sizes(len(order), workers):
        out.append(order[start:start + size])
        start += size
    return out


def test_chunk_sizes_are_worksteals_first_split() -> None:
    assert chunk_sizes(10, 3) == [3, 3, 4] and chunk_sizes(3186, 3) == [1062, 1062, 1062]
    assert sum(chunk_sizes(3187, 4)) == 3187


def test_the_longest_modules_lead_the_chunks_longest_first_to_the_lightest_head() -> None:
    items = _items()
    order = worksteal_order(items, 3)
    assert sorted(order, key=id) == sorted(items, key=id) and len(order) == len(items)
    heads = [[i.nodeid.split("::")[0] for i in chunk[:2]] for chunk in _chunks(order, 3)]
    # LPT: b (100 s) to chunk 0, a (60 s) to chunk 1, c (52 s) to chunk 2, then d (40 s) to the lightest head, c's
    assert heads == [["tests/test_b.py", "tests/test_l0.py"], ["tests/test_a.py", "tests/test_a.py"],
                     ["tests/test_c.py", "tests/test_c.py"]]
    assert [i.nodeid for i in _chunks(order, 3)[2][:3]] == ["tests/test_c.py::t0", "tests/test_c.py::t1",
                                                           "tests/test_d.py::t0"]
    light = [i for i in order if i.heavy is None]
    assert light == [i for i in items if i.heavy is None]  # the rest keep collection order
    assert worksteal_order(items, 3) == order  # every worker computes the same order


def test_one_worker_or_no_long_module_keeps_collection_order() -> None:
    items = _items()
    assert worksteal_order(items, 1) == items
    light = [i for i in items if i.heavy is None]
    assert worksteal_order(light, 3) == light and expected_seconds(light[0]) == LIGHT_S


@pytest.mark.parametrize("seconds", [0, -1, "80", True])
def test_a_heavy_marker_with_seconds_that_are_not_positive_numbers_is_a_usage_error(seconds: object) -> None:
    with pytest.raises(pytest.UsageError, match=rf"heavy\(seconds={seconds!r}\)"):
        expected_seconds(_Item("tests/test_x.py::t", _Mark({"seconds": seconds})))  # type: ignore[arg-type]


@pytest.mark.parametrize("mark", [_Mark({}, (180,)), _Mark({"secs": 180})])
def test_a_heavy_marker_with_a_positional_or_another_keyword_argument_is_a_usage_error(mark: _Mark) -> None:
    with pytest.raises(pytest.UsageError, match=r"takes only seconds=N"):
        expected_seconds(_Item("tests/test_x.py::t", mark))  # type: ignore[arg-type]


@pytest.mark.heavy  # a pytest run with 2 xdist workers that load this suite's conftest
def test_the_worksteal_workers_of_this_suite_run_the_order(tmp_path: Path) -> None:
    """Through pytest-xdist itself (2 worksteal workers, this suite's conftest as the plugin): each worker learns the
    mode from the controller and orders its collection, so the long module, collected last, runs first on its worker
    (in collection order it would be the last test of the last chunk)."""
    (tmp_path / "test_a_light.py").write_text("".join(f"def test_l{k}():\n    pass\n\n\n" for k in range(8)))
    (tmp_path / "test_z_long.py").write_text("import pytest\n\n\n@pytest.mark.heavy(seconds=60)\n"
                                             "def test_long():\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-p", "tests.conftest", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "worksteal", "-v", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "9 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [(line.split("]", 1)[0].lstrip("["), line) for line in proc.stdout.splitlines()
            if line.startswith("[gw") and "PASSED" in line]
    (worker,) = {w for w, line in runs if "test_long" in line}
    assert "test_long" in [line for w, line in runs if w == worker][0], proc.stdout
