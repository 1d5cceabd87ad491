"""The worksteal order of the collected tests (``tests/xdist_order.py``): the longest modules at the chunks' heads,
every test once, modules kept whole, the same order for the same input, and a malformed ``heavy`` refused."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.xdist_order import LIGHT_S, chunk_sizes, expected_seconds, worksteal_order


@dataclass(frozen=True)
class _Mark:
    kwargs: dict[str, object] = field(default_factory=dict)


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
