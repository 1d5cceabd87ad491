"""The msgspec decoders derived from the models agree with pydantic's strict reading, field for field.

A differential check: every line of every fixture file, and every one-field mutation of a record line
(wrong type, out of range, null, missing, unknown, repeated key), is read by the one-pass path
(``results_schema.codec.fast_json.fast_parse``) and by the full hook-based path alone. The one-pass path may
decline a line (None: the full path decides), but it must never accept a line the full path refuses, and
what it accepts must equal the full path's model (fields set included).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

import results_schema
import results_schema.codec.fast_structs as fs
import results_schema.codec.io as rio
from results_schema.records.dispatch import kind_for
from results_schema.codec.fast_json import fast_parse
from results_schema.records.base import StrictModel
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _full_path(raw: bytes, cls: type[BaseModel], monkeypatch: pytest.MonkeyPatch) -> BaseModel | None:
    """The hook-based path alone (the one-pass path switched off); None when it refuses the line."""
    with monkeypatch.context() as m:
        m.setattr(rio, "fast_parse", lambda _raw, _cls: None)
        try:
            return rio.parse_line(raw, cls)
        except rio.RecordError:
            return None


def disagreements(lines: list[bytes], cls: type[BaseModel], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Lines on which the one-pass path accepts what the full path refuses, or gives another model."""
    out = []
    for raw in lines:
        fast = fast_parse(raw, cls)
        if fast is None:
            continue
        full = _full_path(raw, cls, monkeypatch)
        if full is None:
            out.append(f"one-pass accepts, full path refuses: {raw[:160]!r}")
        elif full != fast or full.model_fields_set != fast.model_fields_set:
            out.append(f"different models: {raw[:160]!r}")
    return out


def _dumps(value: Any, dup_at: tuple | None, path: tuple = ()) -> str:
    """JSON text of ``value``; the object at ``dup_at`` repeats its first key (with its value)."""
    if isinstance(value, dict):
        items = [f"{json.dumps(k)}:{_dumps(v, dup_at, path + (k,))}" for k, v in value.items()]
        if path == dup_at and items:
            items.append(items[0])
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dumps(v, dup_at, path + (i,)) for i, v in enumerate(value)) + "]"
    return json.dumps(value, allow_nan=False)


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(value, dict):
        return [path] + [p for k, v in value.items() for p in _leaves(v, path + (k,))]
    if isinstance(value, list):
        return [path] + [p for i, v in enumerate(value[:2]) for p in _leaves(v, path + (i,))]
    return [path]


_REPLACEMENTS: tuple[Any, ...] = ("1", True, 1.5, 2.0, -1, 0, None, [], {}, "x" * 3, 10**30, 1e308)
_DROP = object()


def _set(obj: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    obj = json.loads(json.dumps(obj))
    parent = obj
    for p in path[:-1]:
        parent = parent[p]
    if new is _DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return obj


def mutations(line: bytes) -> list[bytes]:
    """Every leaf replaced by each of ``_REPLACEMENTS``, every key dropped, an unknown key and a repeated key
    added to every object, and a trailing newline inside every string."""
    obj = json.loads(line)
    out = []
    for path in _leaves(obj):
        if not path:
            continue
        parent_value = obj
        for p in path:
            parent_value = parent_value[p]
        for new in _REPLACEMENTS:
            out.append(_dumps(_set(obj, path, new), None).encode())
        if isinstance(path[-1], str):
            out.append(_dumps(_set(obj, path, _DROP), None).encode())
        if isinstance(parent_value, str):
            out.append(_dumps(_set(obj, path, parent_value + "\n"), None).encode())
        if isinstance(parent_value, dict):
            out.append(_dumps(_set(obj, path + ("unknown_field",), 1), None).encode())
            out.append(_dumps(obj, path).encode())
    out.append(_dumps(obj, ()).encode())
    return out


def _fixture_lines() -> dict[type[BaseModel], list[bytes]]:
    by_model: dict[type[BaseModel], list[bytes]] = {}
    for p in sorted(FIXTURES.rglob("*.json*")):
        kind = kind_for(p.relative_to(FIXTURES))
        if kind is None:
            continue
        lines = p.read_bytes().splitlines() if kind.jsonl else [p.read_bytes()]
        by_model.setdefault(kind.load_model(), []).extend(line for line in lines if line.strip())
    return by_model


def test_every_fixture_line_reads_the_same_on_both_paths(monkeypatch):
    by_model = _fixture_lines()
    assert CaseRun in by_model and CaseFailure in by_model
    for cls, lines in by_model.items():
        assert disagreements(lines, cls, monkeypatch) == [], cls.__name__
        accepted = sum(fast_parse(line, cls) is not None for line in lines)
        if cls in (CaseRun, CaseFailure):
            assert accepted == len(lines), f"{cls.__name__}: the one-pass path declined a valid fixture line"


@pytest.mark.parametrize("cls", [CaseRun, CaseFailure])
def test_no_one_field_mutation_is_accepted_by_the_one_pass_path_alone(cls, monkeypatch):
    line = _fixture_lines()[cls][0]
    muts = mutations(line)
    assert len(muts) > 100
    assert disagreements(muts, cls, monkeypatch) == []
    refused_by_full = [m for m in muts if _full_path(m, cls, monkeypatch) is None]
    assert refused_by_full and all(fast_parse(m, cls) is None for m in refused_by_full)


def test_a_decoder_that_disagrees_with_the_model_is_caught(monkeypatch):
    """Map one integer field to float in the derived struct: the differential check names the lines."""
    plan = fs.plan_for(CaseFailure)
    spec = [(f.name, float | msgspec.UnsetType if f.name == "repeat" else f.type, f.default)
            for f in msgspec.structs.fields(plan.struct)]
    wrong = msgspec.defstruct("WrongCaseFailure", spec, kw_only=True, forbid_unknown_fields=True)
    monkeypatch.setitem(fs._PLANS, CaseFailure, fs.ModelPlan(
        model=CaseFailure, struct=wrong, decoder=msgspec.json.Decoder(wrong), convert=plan.convert, fields={},
        rebuild=plan.rebuild))
    line = _fixture_lines()[CaseFailure][0]
    found = disagreements(mutations(line), CaseFailure, monkeypatch)
    assert found and any('"repeat":1.5' in f for f in found)


def _results_schema_models() -> list[type[BaseModel]]:
    out = []
    for m in pkgutil.walk_packages(results_schema.__path__, prefix="results_schema."):
        if m.ispkg or m.name.endswith("__main__"):
            continue
        mod = importlib.import_module(m.name)
        out += [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, BaseModel)
                and v.__module__ == mod.__name__ and v is not StrictModel and v not in out]
    return out


def test_every_strict_model_has_a_derived_decoder_with_its_fields_in_order():
    unsupported = {}
    for cls in _results_schema_models():
        try:
            plan = fs.plan_for(cls)
        except fs.Unsupported as exc:
            unsupported[cls.__name__] = str(exc)
            continue
        assert plan.struct.__struct_fields__ == tuple(cls.model_fields), cls.__name__
        defaults = {f.name: f.default for f in msgspec.structs.fields(plan.struct)}
        optional = {n for n, f in cls.model_fields.items() if not f.is_required()}
        assert {n for n, d in defaults.items() if d is msgspec.UNSET} == optional, cls.__name__
    # the only models read by pydantic alone: the ones that keep unknown fields (a fitted model's parameters)
    assert set(unsupported) == {"ModelFit", "ComparisonSummary"}, unsupported
    assert all("extra='allow'" in why for why in unsupported.values())


def test_a_digest_with_a_trailing_newline_is_refused_on_both_paths(monkeypatch):
    line = _fixture_lines()[CaseRun][0]
    obj = json.loads(line)
    obj["record"]["token_digest"] += "\n"
    raw = json.dumps(obj).encode()
    assert fast_parse(raw, CaseRun) is None and _full_path(raw, CaseRun, monkeypatch) is None
