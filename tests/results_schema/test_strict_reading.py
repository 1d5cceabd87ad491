"""Strict reading: the reader never coerces JSON types, rejects duplicate keys, and
accepts or rejects every mutated fixture line exactly as the exported JSON Schema does
(cross-field invariants, which JSON Schema cannot state, are the reader's alone)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from results_schema.cli import check_paths
from results_schema.records.dispatch import kind_for
from results_schema.codec.io import RecordError, parse_line, strict_json_loads
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun, WorkloadSpec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run"


def _first_doc(path: Path) -> str:
    text = path.read_text()
    return text.splitlines()[0] if path.suffix == ".jsonl" else text


def _fixture_docs() -> list[tuple[Path, type]]:
    out = []
    for path in sorted(FIXTURE.rglob("*.json*")):
        kind = kind_for(path)
        if kind is not None:
            out.append((path, kind.load_model()))
    return out


def _leaves(obj, loc=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, loc + (k,))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            yield from _leaves(v, loc + (i,))
    else:
        yield loc, obj


def _objects(obj, loc=()):
    if isinstance(obj, dict):
        yield loc, obj
        for k, v in obj.items():
            yield from _objects(v, loc + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _objects(v, loc + (i,))


def _set(doc, loc, value):
    node = doc
    for part in loc[:-1]:
        node = node[part]
    node[loc[-1]] = value


def _other_type_values(value) -> list:
    """Values of another JSON type than ``value`` (the wrong-type mutations)."""
    if isinstance(value, bool):
        return ["NO", "true", 0, 1, None]
    if isinstance(value, int):
        return [str(value), float(value) + 0.5, True, None, [value]]
    if isinstance(value, float):
        return [str(value), True, None]
    if isinstance(value, str):
        return [16, 1.5, True, None, [value], {}]
    if value is None:
        return [[], {}]
    if isinstance(value, list):
        return ["[]", {}, 0]
    return ["x"]


def _out_of_range(value) -> list:
    """Boundary values a field with a numeric range may refuse (ranges live in the schema)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    return [-1, 0, 1.5, 2**70]


def _mutations(doc: dict):
    for loc, value in _leaves(doc):
        if not loc:
            continue
        for new in _other_type_values(value):
            yield "type", loc, new
        for new in _out_of_range(value):
            yield "range", loc, new
    for loc, obj in _objects(doc):
        yield "extra", loc + ("unexpected_field",), 1
        for key in list(obj):
            yield "missing", loc + (key,), _DELETE


_DELETE = object()


def _apply(doc: dict, loc, new) -> dict:
    out = copy.deepcopy(doc)
    if new is _DELETE:
        node = out
        for part in loc[:-1]:
            node = node[part]
        del node[loc[-1]]
    else:
        _set(out, loc, new)
    return out


def _is_cross_field(exc: RecordError, model_cls) -> bool:
    """A rejection by a model validator (``model_validator``), not by a field constraint."""
    return exc.message.startswith("Value error") and not exc.message.startswith("Value error, non-finite")


@pytest.mark.parametrize("path,model_cls", _fixture_docs(), ids=lambda v: getattr(v, "name", getattr(v, "__name__", "")))
@pytest.mark.heavy  # measured 5.5 s over 10 cases in the fast tier (its budget is 2 minutes)
def test_reader_and_exported_schema_agree_on_every_mutated_line(path, model_cls):
    validator = jsonschema.Draft202012Validator(model_cls.model_json_schema())
    doc = json.loads(_first_doc(path))
    parse_line(json.dumps(doc), model_cls)  # the fixture itself is valid
    assert validator.is_valid(doc)
    counts = {"type": 0, "range": 0, "extra": 0, "missing": 0}
    both_reject = both_accept = cross_field = 0
    disagreements = []
    for kind, loc, new in _mutations(doc):
        mutated = _apply(doc, loc, new)
        line = json.dumps(mutated)
        schema_ok = validator.is_valid(json.loads(line))
        try:
            parse_line(line, model_cls)
            reader_ok, err = True, None
        except RecordError as exc:
            reader_ok, err = False, exc
        counts[kind] += 1
        if schema_ok == reader_ok:
            both_accept += reader_ok
            both_reject += not reader_ok
        elif schema_ok and err is not None and _is_cross_field(err, model_cls):
            cross_field += 1
        else:
            disagreements.append((kind, ".".join(map(str, loc)), new if new is not _DELETE else "<deleted>",
                                  f"schema={'accepts' if schema_ok else 'rejects'}",
                                  f"reader={'accepts' if reader_ok else err}"))
    assert not disagreements, "\n".join(map(str, disagreements[:20]))
    assert all(counts.values()), counts
    assert both_reject > 0


WORKLOAD = {"num_prompts": 4, "input_len": 32, "max_tokens": 16, "max_model_len": 256, "seed": 0,
            "dtype": "bfloat16", "enforce_eager": True, "gpu_memory_utilization": 0.5, "warmup_rounds": 1,
            "measured_rounds": 3, "enable_prefix_caching": False, "prompts_vary_per_round": True}


@pytest.mark.parametrize("field,value,valid", [
    ("enforce_eager", "NO", False),       # coerced to False before
    ("max_tokens", "16", False),          # coerced to 16 before
    ("enforce_eager", 0, False),
    ("enforce_eager", "false", False),
    ("num_prompts", 4.5, False),
    ("num_prompts", True, False),
    ("gpu_memory_utilization", "0.5", False),
    ("num_prompts", 4.0, True),           # the JSON number 4.0 is the integer 4 (JSON Schema 'integer')
    ("gpu_memory_utilization", 1, True),  # an integer is a number
])
def test_reader_never_coerces_json_types(field, value, valid):
    doc = dict(WORKLOAD, **{field: value})
    schema_ok = jsonschema.Draft202012Validator(WorkloadSpec.model_json_schema()).is_valid(doc)
    assert schema_ok is valid
    if valid:
        assert getattr(parse_line(json.dumps(doc), WorkloadSpec), field) == value
    else:
        with pytest.raises(RecordError) as info:
            parse_line(json.dumps(doc), WorkloadSpec, path="p-runs.jsonl", line=7)
        assert info.value.field == field and info.value.line == 7


def test_check_cli_rejects_the_coerced_line(tmp_path, capsys):
    line = json.loads(_first_doc(FIXTURE / "same_runtime-runs.jsonl"))
    line["record"]["workload"]["enforce_eager"] = "NO"
    good = _first_doc(FIXTURE / "same_runtime-runs.jsonl")
    path = tmp_path / "same_runtime-runs.jsonl"
    path.write_text(good + "\n" + json.dumps(line) + "\n")
    assert check_paths([path]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: record.workload.enforce_eager:" in out


def test_duplicate_key_is_rejected_naming_key_and_line(tmp_path, capsys):
    good = _first_doc(FIXTURE / "same_runtime-runs.jsonl")
    dup = good.replace('"process_wall_s":', '"process_wall_s":1.0,"process_wall_s":', 1)
    assert dup != good
    path = tmp_path / "same_runtime-runs.jsonl"
    path.write_text(good + "\n" + good + "\n" + dup + "\n")
    with pytest.raises(RecordError) as info:
        parse_line(dup, CaseRun, path=path, line=3)
    assert info.value.field == "process_wall_s" and info.value.line == 3
    assert "duplicate key 'process_wall_s'" in str(info.value)
    assert check_paths([path]) == 1
    assert f"{path}:3: process_wall_s: duplicate key 'process_wall_s'" in capsys.readouterr().out


def test_nested_duplicate_key_and_strict_loads():
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        strict_json_loads('{"x": {"a": 1, "a": 2}}')
    line = ('{"phase":"p","label":"l","implementation":"current","repeat":0,"failure_type":"timeout",'
            '"exit_code":null,"exit_code":1,"error_message":"m","log_tail":[],"log_path":"x","duration_s":1}')
    with pytest.raises(RecordError, match="exit_code: duplicate key 'exit_code'"):
        parse_line(line, CaseFailure)


def test_number_overflowing_to_infinity_is_rejected():
    doc = dict(WORKLOAD, gpu_memory_utilization="__X__")
    line = json.dumps(doc).replace('"__X__"', "1e400")
    with pytest.raises(RecordError, match="out of range"):
        parse_line(line, WorkloadSpec)
