"""The shared value sets (the ``StrEnum`` types of ``results_schema.records.value_sets``, re-exported by
``results_schema.records.base``) are read the same by both readers.

Each enum-typed field of a fixture ``CaseRun`` line is set to every allowed value and to values outside
the set (another case, empty, unknown, a number, null, a boolean). The full reader
(``results_schema.codec.io.parse_line`` with the one-pass path switched off) and the one-pass msgspec path
(``results_schema.codec.fast_json.fast_parse``) must accept and refuse the same lines, and an accepted value
must be the enum member in both, serialised as its string value (the fixture line keeps its exact bytes).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

import results_schema.codec.io as rio
from results_schema.records.base import Implementation, OffloadBackend, PromptMode
from results_schema.codec.fast_json import fast_parse
from results_schema.records.models import CaseRun
from tests.results_schema.test_fast_structs import _full_path

LINE = (Path(__file__).resolve().parents[1] / "fixtures" / "synthetic_run" / "same_runtime-runs.jsonl") \
    .read_bytes().splitlines()[0]

FIELDS: list[tuple[tuple[str, ...], type[StrEnum]]] = [
    (("record", "implementation"), Implementation),
    (("evidence", "implementation"), Implementation),
    (("record", "offload", "offload_backend"), OffloadBackend),
    (("record", "workload", "prompt_mode"), PromptMode),
]
OUTSIDE: tuple[Any, ...] = ("", "unknown", 1, None, True)


def _with(path: tuple[str, ...], value: Any) -> bytes:
    doc = json.loads(LINE)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(doc, separators=(",", ":")).encode()


def _get(model: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        model = getattr(model, key)
    return model


_ABSENT = object()


def _written(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if key not in doc:
            return _ABSENT
        doc = doc[key]
    return doc


def _full(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> CaseRun | None:
    """The full pydantic reader alone (``tests.results_schema.test_fast_structs._full_path``)."""
    model = _full_path(raw, CaseRun, monkeypatch)
    assert model is None or isinstance(model, CaseRun)
    return model


@pytest.mark.parametrize(("path", "enum_type"), FIELDS, ids=lambda x: ".".join(x) if isinstance(x, tuple) else "")
def test_both_readers_accept_and_refuse_the_same_values(path: tuple[str, ...], enum_type: type[StrEnum],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    accepted = 0
    for value in [m.value for m in enum_type]:
        raw = _with(path, value)
        full, fast = _full(raw, monkeypatch), fast_parse(raw, CaseRun)
        assert (full is None) == (fast is None), (path, value)  # a cross-field rule may refuse a value: both do
        if full is not None and fast is not None:
            accepted += 1
            for got in (_get(full, path), _get(fast, path)):
                assert type(got) is enum_type and got.value == value
            text = rio.dumps_model(full)
            assert text == rio.dumps_model(fast)
            written = _written(json.loads(text), path)  # a published option at its default is left out
            assert written == value or (written is _ABSENT and type(_get(full, path[:-1])).model_fields[path[-1]].default == value)
    assert accepted >= 1  # the fixture's own value at least
    assert rio.dumps_model(rio.parse_line(LINE, CaseRun)).encode() == LINE  # the fixture line's exact bytes
    for value in (*OUTSIDE, str(enum_type.__members__[next(iter(enum_type.__members__))].value).upper()):
        raw = _with(path, value)
        assert _full(raw, monkeypatch) is None, (path, value)
        assert fast_parse(raw, CaseRun) is None, (path, value)

