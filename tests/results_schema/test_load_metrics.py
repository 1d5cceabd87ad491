"""BenchRecord's published per-process fields: each rule fails when violated; old records keep their bytes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from results_schema.codec.io import dumps_model
from results_schema.records.load_metrics import percentile_linear
from results_schema.records.models import BenchRecord

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORD = FIXTURES / "real_tiny_run" / "records" / "same_runtime" / "current_g4_n1-r0.json"
NEW_FIELDS = ("requests", "requests_per_s", "round_latency_p50_s", "round_latency_p95_s", "rss_before_load_bytes",
              "rss_peak_load_bytes", "rss_after_load_bytes", "device_memory_before_load_bytes",
              "device_memory_peak_load_bytes", "device_memory_after_load_bytes", "device_memory_source",
              "device_memory_device", "device_memory_error")


def _old() -> dict:
    return json.loads(RECORD.read_text())


def _with_metrics(**over) -> dict:
    """The fixture record with every new field filled consistently, then ``over`` applied (None deletes)."""
    d = _old()
    elapsed = [r["elapsed_s"] for r in d["rounds"]]
    n = d["workload"]["num_prompts"] * len(elapsed)
    d.update(requests=n, requests_per_s=n / d["elapsed_s"],
             round_latency_p50_s=float(np.percentile(elapsed, 50)), round_latency_p95_s=float(np.percentile(elapsed, 95)),
             rss_before_load_bytes=500_000_000, rss_peak_load_bytes=900_000_000, rss_after_load_bytes=800_000_000,
             device_memory_before_load_bytes=3_000 * 2**20, device_memory_peak_load_bytes=60_000 * 2**20,
             device_memory_after_load_bytes=59_000 * 2**20, device_memory_source="npu-smi",
             device_memory_device="npu 1 chip 1")
    d["peak_rss_bytes"] = max(d["peak_rss_bytes"], 900_000_000)
    for k, v in over.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def test_records_without_the_fields_validate_and_keep_their_bytes() -> None:
    for path in sorted((FIXTURES / "real_tiny_run" / "records").rglob("*.json")):
        text = path.read_text()
        rec = BenchRecord.model_validate_json(text)
        assert all(getattr(rec, f) is None for f in NEW_FIELDS)
        assert json.loads(dumps_model(rec)) == json.loads(text)
        assert not set(NEW_FIELDS) & set(json.loads(dumps_model(rec)))


def test_a_consistent_record_validates_and_round_trips() -> None:
    rec = BenchRecord.model_validate(_with_metrics())
    assert rec.requests == rec.workload.num_prompts * len(rec.rounds)
    assert BenchRecord.model_validate_json(dumps_model(rec)) == rec
    # a failed device read: null values, the reason kept, the source tried may stay
    bad = _with_metrics(device_memory_before_load_bytes=None, device_memory_peak_load_bytes=None,
                        device_memory_after_load_bytes=None, device_memory_error="npu-smi is not on PATH")
    assert BenchRecord.model_validate(bad).device_memory_error == "npu-smi is not on PATH"


@pytest.mark.parametrize("over, message", [
    (dict(requests=1), "requests (1) != workload.num_prompts"),
    (dict(requests_per_s=1.0), "requests_per_s (1.0) != requests / elapsed_s"),
    (dict(requests_per_s=None), "requests (12) and requests_per_s (None) are set together"),
    (dict(round_latency_p50_s=0.001), "round_latency_p50_s (0.001) != the linear-interpolation P50"),
    (dict(round_latency_p95_s=0.0), "round_latency_p50_s"),  # P50 > P95
    (dict(round_latency_p95_s=None), "are set together or not at all"),
    (dict(rss_peak_load_bytes=700_000_000), "RSS peak during load (700000000) is below"),
    (dict(rss_after_load_bytes=None), "RSS before / peak / after load (500000000 / 900000000 / None)"),
    (dict(peak_rss_bytes=850_000_000), "peak_rss_bytes (850000000) < rss_peak_load_bytes (900000000)"),
    (dict(device_memory_peak_load_bytes=1), "device memory peak during load (1) is below"),
    (dict(device_memory_source=None), "need device_memory_source"),
    (dict(device_memory_error="npu-smi exited 1"), "device_memory_error ('npu-smi exited 1') together with"),
    (dict(device_memory_source="rocm-smi"), "device_memory_source"),
])
def test_each_rule_fails_when_violated(over, message) -> None:
    with pytest.raises(ValidationError) as exc:
        BenchRecord.model_validate(_with_metrics(**over))
    assert message in str(exc.value), str(exc.value)


def test_a_source_without_values_needs_the_reason() -> None:
    d = _with_metrics(device_memory_before_load_bytes=None, device_memory_peak_load_bytes=None,
                      device_memory_after_load_bytes=None)
    with pytest.raises(ValidationError, match="without device memory values nor device_memory_error"):
        BenchRecord.model_validate(d)


def test_percentile_is_numpys_linear_interpolation() -> None:
    rng = random.Random(0)
    for n in (1, 2, 3, 5, 12):
        xs = [rng.uniform(0.1, 2.0) for _ in range(n)]
        for q in (0, 50, 95, 100):
            assert percentile_linear(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    with pytest.raises(ValueError, match="no values"):
        percentile_linear([], 50)
    with pytest.raises(ValueError, match="within"):
        percentile_linear([1.0], 101)
