"""Claims about results_schema.codec.io: strict, atomic, round-tripping JSONL."""

from __future__ import annotations

import json
import threading

import pytest

from results_schema.codec.io import (
    RecordError,
    append_jsonl,
    check_jsonl,
    read_json,
    read_jsonl,
    strict_json_loads,
    write_json,
)
from results_schema.records.case_outcome import KVCacheCapacity
from results_schema.records.identity import OffloadSetting


def test_append_then_read_returns_equal_models(tmp_path):
    path = tmp_path / "sub" / "p-runs.jsonl"
    models = [OffloadSetting(offload_group_size=4, offload_num_in_group=n) for n in (1, 2, 3)]
    for m in models:
        append_jsonl(path, m)
    assert read_jsonl(path, OffloadSetting) == models
    for line in path.read_text().splitlines():
        strict_json_loads(line)


def test_strict_loads_rejects_nan_and_infinity():
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}'):
        with pytest.raises(ValueError, match="non-finite"):
            strict_json_loads(text)


def test_read_reports_file_line_and_field(tmp_path):
    path = tmp_path / "x.jsonl"
    append_jsonl(path, KVCacheCapacity(kv_cache_tokens=5))
    with open(path, "a") as fh:
        fh.write(json.dumps({"kv_cache_tokens": -1}) + "\n")
    with pytest.raises(RecordError, match=r"x\.jsonl:2: kv_cache_tokens: ") as info:
        read_jsonl(path, KVCacheCapacity)
    assert info.value.line == 2 and info.value.field == "kv_cache_tokens"


def test_read_rejects_nan_line_with_line_number(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"kv_cache_gib": NaN}\n')
    with pytest.raises(RecordError, match=r"x\.jsonl:1: .*(non-finite|NaN)"):
        read_jsonl(path, KVCacheCapacity)


def test_append_refuses_torn_trailing_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"kv_cache_tokens": 1')
    with pytest.raises(ValueError, match="torn"):
        append_jsonl(path, KVCacheCapacity(kv_cache_tokens=2))
    assert path.read_text() == '{"kv_cache_tokens": 1'


def test_check_collects_every_bad_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"kv_cache_tokens": 1}\n{"bogus": 1}\n\n{"kv_cache_gib": Infinity}\n')
    ok, errors = check_jsonl(path, KVCacheCapacity)
    assert ok == 1
    assert [e.line for e in errors] == [2, 3, 4]
    assert errors[0].field == "bogus"


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "x.jsonl"

    def worker(k):
        for i in range(50):
            append_jsonl(path, KVCacheCapacity(kv_cache_tokens=k * 1000 + i, max_concurrency=1.5))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = read_jsonl(path, KVCacheCapacity)
    assert sorted(m.kv_cache_tokens for m in got) == sorted(k * 1000 + i for k in range(4) for i in range(50))


def test_write_json_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "d" / "m.json"
    m = KVCacheCapacity(kv_cache_gib=15.66)
    write_json(path, m)
    write_json(path, m)
    assert read_json(path, KVCacheCapacity) == m
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
