"""The whole-file reader (``scan_table``) decides every line as ``scan_jsonl`` does, with the same errors.

Per ``CaseRun`` validator: a record that breaks it is refused by pydantic, and ``scan_table`` reports it
with pydantic's message and field, as ``scan_jsonl`` does. Every one-field mutation of a record line
(types, ranges, nulls, unknown and repeated keys) gets ``scan_jsonl``'s decision, error and model.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from results_schema.codec.fast_structs import plan_for
from results_schema.codec.io import check_jsonl, parse_line, scan_jsonl
from results_schema.records.models import CaseRun
from results_schema.reading.table_scan import scan_table
from tests.results_schema.test_fast_structs import mutations
from tests.support.synthetic import default_cases, make_case_run


def _base() -> dict[str, Any]:
    case = default_cases(implementations=("current",))[1]
    return make_case_run("same_runtime", case, 0, random.Random(0)).model_dump(mode="json")


def _with_window(d: dict[str, Any]) -> dict[str, Any]:
    r = d["record"]
    r["window"] = {"measured_s": r["elapsed_s"], "rounds": len(r["rounds"]), "min_measured_s": 0.0,
                   "min_rounds": r["workload"]["measured_rounds"], "reached": True}
    return d


def _with_device_memory(d: dict[str, Any]) -> dict[str, Any]:
    d["record"].update(device_memory_before_load_bytes=10, device_memory_peak_load_bytes=30,
                       device_memory_after_load_bytes=20, device_memory_source="nvidia-smi")
    return d


def _set(path: str, value: Any, prep: Callable[[dict], dict] = lambda d: d) -> Callable[[dict], dict]:
    def edit(d: dict) -> dict:
        d = prep(d)
        *parents, last = path.split(".")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return d
    return edit


def _drop_round(d: dict) -> dict:
    d["record"]["rounds"] = d["record"]["rounds"][:-1]
    return d


def _no_request_metrics(d: dict) -> dict:
    for name in ("requests", "requests_per_s", "round_latency_p50_s", "round_latency_p95_s"):
        del d["record"][name]
    return d


def _extra_round(d: dict) -> dict:
    """A fourth round (the published per-process metrics left out, so that only the round count is wrong)."""
    r = _no_request_metrics(d)["record"]
    r["rounds"].append({**r["rounds"][-1], "index": len(r["rounds"])})
    return d


def _valid_extra_round(d: dict) -> dict:
    """Four rounds where three were asked for, valid: the window before the last round missed min_measured_s."""
    r = _extra_round(d)["record"]
    r["output_tokens"] = sum(x["output_tokens"] for x in r["rounds"])
    r["elapsed_s"] = sum(x["elapsed_s"] for x in r["rounds"])
    r["throughput_tok_s"] = r["output_tokens"] / r["elapsed_s"]
    r["workload"]["min_measured_s"] = sum(x["elapsed_s"] for x in r["rounds"][:-1]) + 0.01
    return d


# (validator, edit of a valid record, what pydantic's message names)
VIOLATIONS: list[tuple[str, Callable[[dict], dict], str]] = [
    ("OffloadSetting._check_cross_fields", _set("record.offload.offload_num_in_group", 9),
     "offload_num_in_group (9) must be <= offload_group_size (8)"),
    ("RuntimeEvidence._check_counts", _set("evidence.wrapped_count", 2), "wrapped_count (2) != len(wrapped_layers) (1)"),
    ("RuntimeEvidence._check_counts", _set("evidence.wrapped_layers", [6]), "not a subset of selected_layers"),
    ("RuntimeEvidence._check_counts", _set("evidence.released_bytes", 1), "released_bytes (1) != offloaded_bytes"),
    ("RoundResult._check_throughput", _set("record.rounds.1.throughput_tok_s", 50.0),
     "throughput_tok_s (50.0) != output_tokens / elapsed_s"),
    ("MeasurementWindow._check_reached", _set("record.window.reached", False, _with_window),
     "reached (False) contradicts"),
    ("BenchRecord._check_published_metrics", _set("record.requests", 13), "requests (13) != workload.num_prompts (4)"),
    ("BenchRecord._check_published_metrics", _set("record.requests_per_s", None), "are set together or not at all"),
    ("BenchRecord._check_published_metrics", _set("record.requests_per_s", 6.2), "requests_per_s (6.2) != requests"),
    ("BenchRecord._check_published_metrics", _set("record.round_latency_p50_s", 0.64), "round_latency_p50_s (0.64)"),
    ("BenchRecord._check_published_metrics", _set("record.round_latency_p95_s", 0.65),
     "round_latency_p50_s (0.6576224025345179) > round_latency_p95_s (0.65)"),
    ("BenchRecord._check_published_metrics", _set("record.round_latency_p95_s", None), "round_latency_p95_s (None)"),
    ("BenchRecord._check_published_metrics", _set("record.rss_after_load_bytes", 970000000),
     "RSS peak during load (960000000) is below"),
    ("BenchRecord._check_published_metrics", _set("record.rss_before_load_bytes", None), "RSS before / peak / after"),
    ("BenchRecord._check_published_metrics", _set("record.peak_rss_bytes", 1000, ), "peak_rss_bytes (1000) < rss_peak"),
    ("BenchRecord._check_published_metrics", _set("record.device_memory_source", None, _with_device_memory),
     "need device_memory_source"),
    ("BenchRecord._check_published_metrics", _set("record.device_memory_error", "x", _with_device_memory),
     "device_memory_error ('x') together with device memory values"),
    ("BenchRecord._check_published_metrics", _set("record.device_memory_source", "npu-smi"),
     "without device memory values nor device_memory_error"),
    ("BenchRecord._check_published_metrics", _set("record.device_memory_peak_load_bytes", 15, _with_device_memory),
     "device memory peak during load (15)"),
    ("BenchRecord._check_totals", _set("record.workload.measured_rounds", 4), "rounds (3) < measured_rounds (4)"),
    ("BenchRecord._check_totals", _extra_round, "rounds (4) > measured_rounds (3)"),
    ("BenchRecord._check_totals", _set("record.workload.min_measured_s", 1.0, _valid_extra_round),
     "already reached min_measured_s (1.0)"),
    ("BenchRecord._check_totals", _set("record.output_tokens", 191), "output_tokens (191) != sum over rounds (192)"),
    ("BenchRecord._check_totals", _set("record.rounds.2.index", 5), "round indices [0, 1, 5]"),
    ("BenchRecord._check_totals", _set("record.elapsed_s", 1.9, _no_request_metrics), "elapsed_s (1.9) != sum of round elapsed_s"),
    ("BenchRecord._check_totals", _set("record.throughput_tok_s", 97.0), "throughput_tok_s (97.0) != output_tokens"),
    ("BenchRecord._check_totals", _set("record.window.min_rounds", 2, _with_window), "disagrees with the record"),
]


def _line(d: dict) -> bytes:
    return json.dumps(d, allow_nan=False, separators=(",", ":")).encode()


def _write(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "p-runs.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize("validator,edit,message", VIOLATIONS, ids=[f"{v}:{m[:40]}" for v, _e, m in VIOLATIONS])
def test_a_violation_is_refused_by_pydantic_and_by_scan_table_with_its_message(tmp_path, validator, edit, message):
    good = _line(_base())
    bad = _line(edit(_base()))
    with pytest.raises(ValidationError, match=_escape(message)):
        CaseRun.model_validate_json(bad, strict=True)
    path = _write(tmp_path, [good, bad, good])
    table, errors = scan_table(path, CaseRun)
    assert table.lines == [1, 3]
    assert [(e.line, message in e.message) for e in errors] == [(2, True)], errors
    assert errors == scan_jsonl(path, CaseRun)[1]


def _escape(text: str) -> str:
    import re
    return re.escape(text)


def test_valid_variants_are_accepted_and_kept_as_derived_structs(tmp_path):
    variants = [_base(), _with_window(_base()), _with_device_memory(_base()), _valid_extra_round(_base())]
    table, errors = scan_table(_write(tmp_path, [_line(v) for v in variants]), CaseRun)
    assert errors == [] and table.lines == [1, 2, 3, 4]
    assert all(type(x) is plan_for(CaseRun).struct for x in table.items)
    assert table.models() == [parse_line(_line(v), CaseRun) for v in variants]


def test_a_line_only_the_full_reader_accepts_is_kept_as_its_model(tmp_path):
    """An integral float for an integer field: refused by the derived struct, accepted by ``parse_line``."""
    good = _line(_base())
    floaty = good.replace(b'"num_prompts":4,', b'"num_prompts":4.0,')
    assert floaty != good
    table, errors = scan_table(_write(tmp_path, [good, floaty]), CaseRun)
    assert errors == []
    assert [type(x) for x in table.items] == [plan_for(CaseRun).struct, CaseRun]
    assert table.models() == [parse_line(good, CaseRun), parse_line(floaty, CaseRun)]


def test_every_one_field_mutation_gets_scan_jsonls_decision_and_model(tmp_path):
    """Types, ranges, nulls, unknown and repeated keys, strings with escapes: same errors, same models."""
    line = _line(_with_window(_with_device_memory(_base())))
    muts = [line, line.replace(b'"dtype":"bfloat16"', b'"dtype":"bf\\u0031 6"'), *mutations(line)]
    muts.append(line.replace(b'"pid":1000,', b'"pid":1000,"pid":1000,'))
    muts.append(line.replace(b'"load_seconds":', b'"load_seconds":NaN,"x":'))
    path = _write(tmp_path, muts)
    table, errors = scan_table(path, CaseRun)
    good, want_errors = scan_jsonl(path, CaseRun)
    assert errors == want_errors
    assert table.lines == [ln for ln, _m in good]
    models = table.models()
    assert models == [m for _ln, m in good]
    assert [m.model_fields_set for m in models] == [m.model_fields_set for _ln, m in good]
    assert any("duplicate key 'pid'" in e.message for e in errors)
    assert any("non-finite" in e.message for e in errors)


def test_line_rules_are_scan_jsonls(tmp_path):
    line = _line(_base())
    path = tmp_path / "p-runs.jsonl"
    path.write_bytes(line + b"\n\n  \n" + line + b"\n" + line[:50])
    table, errors = scan_table(path, CaseRun)
    assert (table.lines, errors) == ([1, 4], check_jsonl(path, CaseRun)[1])
    assert [e.message for e in errors] == ["blank line", "blank line", "last line is not newline-terminated (torn write)"]


def test_columns_read_defaults_for_fields_the_line_left_out(tmp_path):
    d = _base()
    del d["record"]["offload"]["offload_prefetch_step"]
    del d["kv_cache"]["kv_cache_gib"]
    table, errors = scan_table(_write(tmp_path, [_line(d)]), CaseRun)
    assert errors == []
    assert table.column("record.offload.offload_prefetch_step") == [1]
    assert table.column("kv_cache.kv_cache_gib") == [None]
    assert table.column("record.window.measured_s") == [None]
    assert table.models() == [parse_line(_line(d), CaseRun)]
