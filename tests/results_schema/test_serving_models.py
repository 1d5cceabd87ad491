"""Strict serving records: derived fields must agree, percentiles ordered, no fault means a full sweep."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from results_schema.records.dispatch import kind_for
from results_schema.records.serving import LatencyStats, RateResult, ServingFault

LAT = dict(mean_ms=10.0, p50_ms=9.0, p90_ms=12.0, p99_ms=15.0)


def rate(**overrides) -> RateResult:
    base = dict(index=0, request_rate_rps=4.0, max_concurrency=None, num_prompts=10, completed=10, failed=0,
                duration_s=2.0, started_at_unix_s=1.0, request_throughput_req_s=5.0, output_throughput_tok_s=80.0,
                total_token_throughput_tok_s=240.0, total_input_tokens=320, total_output_tokens=160,
                prompt_tokens_min=32, prompt_tokens_max=32, output_tokens_min=16, output_tokens_max=16,
                ttft=LAT, tpot=LAT, itl=LAT, e2el=LAT, goodput_req_s=4.0, good_requests=8, slo_attainment=0.8,
                peak_concurrent_requests=3, distinct_prompts=10, requests_path="records/s/x/rate-0.requests.json",
                requests_sha256="0" * 64)
    base.update(overrides)
    return RateResult(**base)


def test_consistent_rate_result_validates():
    assert rate().good_requests == 8


def test_rejects_throughput_that_is_not_completed_over_window():
    with pytest.raises(ValidationError, match="request_throughput_req_s"):
        rate(request_throughput_req_s=6.0)


def test_rejects_goodput_that_disagrees_with_good_requests():
    with pytest.raises(ValidationError, match="good_requests"):
        rate(good_requests=9, slo_attainment=0.9)


def test_rejects_completed_plus_failed_not_equal_to_prompts():
    with pytest.raises(ValidationError, match="num_prompts"):
        rate(failed=1)


def test_rejects_unordered_percentiles():
    with pytest.raises(ValidationError, match="ordered"):
        LatencyStats(mean_ms=1.0, p50_ms=5.0, p90_ms=4.0, p99_ms=6.0)


def test_rejects_non_finite_and_unknown_fields():
    with pytest.raises(ValidationError):
        rate(duration_s=float("inf"))
    with pytest.raises(ValidationError):
        RateResult(**{**rate().model_dump(), "extra": 1})


def test_fault_cause_is_a_closed_set():
    with pytest.raises(ValidationError):
        ServingFault(cause="oops", message="x")


def test_serving_files_dispatch_to_serving_models_not_bench_record():
    assert kind_for("run/records/serving/baseline-r0.serving.json").model.endswith(":ServingCaseResult")
    assert kind_for("run/records/serving/baseline-r0/rate-0.requests.json").model.endswith(":ServingRequests")
    assert kind_for("run/serving-serving.jsonl").model.endswith(":ServingRun")
    assert kind_for("run/cases/serving/baseline-r0.serving-case.json").model.endswith(":ServingCaseSpec")
    assert kind_for("run/records/same_runtime/baseline-r0.json").model.endswith(":BenchRecord")
