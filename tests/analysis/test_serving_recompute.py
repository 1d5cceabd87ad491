"""Serving numbers recompute from the per-request file with vLLM's rules (goodput, percentiles, units)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.serving.summary import load_serving, validate_serving
from analysis.serving.recompute import compare_rate, good_requests, recompute_rate
from results_schema.codec.files import file_sha256
from results_schema.records.serving import RequestOutcome
from results_schema.records.serving_spec import ServingSLO

from .conftest import FIXTURES

SERVING_RUN = FIXTURES / "serving_run"
SLO = ServingSLO(ttft_ms=200.0, tpot_ms=50.0, attainment=0.9)


def _req(ttft: float, e2e: float, tokens: int, *, ok: bool = True, itl: tuple[float, ...] = ()) -> RequestOutcome:
    return RequestOutcome(success=ok, prompt_tokens=8, dataset_prompt_tokens=8, output_tokens=tokens if ok else 0,
                          ttft_s=ttft if ok else 0.0, latency_s=e2e if ok else 0.0, itl_s=itl if ok else (),
                          error="" if ok else "boom", output_token_ids_sha256="0" * 64 if ok else None)


def test_limits_are_inclusive_and_compared_in_seconds_as_vllm_does():
    # TTFT exactly 200 ms and TPOT exactly 50 ms: good (vLLM: slo_ms / 1000 >= value_s)
    exact = _req(0.2, 0.2 + 0.05 * 4, 5)
    assert good_requests([exact], SLO) == 1
    assert good_requests([_req(0.2000001, 0.4, 5)], SLO) == 0       # TTFT just above the limit
    assert good_requests([_req(0.1, 0.1 + 0.0500001 * 4, 5)], SLO) == 0  # TPOT just above the limit


def test_one_token_request_has_tpot_zero_for_goodput_but_no_tpot_sample():
    one = _req(0.1, 9.0, 1)  # E2E far beyond any TPOT limit; one token -> TPOT 0 (vLLM's all_tpots)
    assert good_requests([one], SLO) == 1
    got = recompute_rate([one, _req(0.1, 0.5, 5)], SLO, duration_s=2.0)
    assert got["mean TPOT ms"] == pytest.approx(100.0)  # only the 5-token request: (0.5 - 0.1) / 4
    assert got["good requests"] == 1 and got["goodput req/s"] == 0.5 and got["SLO attainment"] == 0.5


def test_failed_requests_count_nowhere():
    got = recompute_rate([_req(0.1, 0.2, 3), _req(0, 0, 0, ok=False)], SLO, duration_s=4.0)
    assert got["completed"] == 1 and got["good requests"] == 1 and got["goodput req/s"] == 0.25
    assert got["SLO attainment"] == 1.0 and got["total output tokens"] == 3


def test_percentiles_are_numpy_linear_defaults_in_ms_over_the_right_samples():
    reqs = [_req(t, t + 0.3, 4, itl=(0.1, 0.1, 0.1)) for t in (0.01, 0.02, 0.03, 0.5)]
    got = recompute_rate(reqs, SLO, duration_s=1.0)
    ttfts = [0.01, 0.02, 0.03, 0.5]
    for p in (50, 90, 99):
        assert got[f"P{p} TTFT ms"] == float(np.percentile(ttfts, p)) * 1000
        assert got[f"P{p} E2E ms"] == float(np.percentile([t + 0.3 for t in ttfts], p)) * 1000
    assert got["P99 ITL ms"] == pytest.approx(100.0) and got["mean TPOT ms"] == pytest.approx(100.0)
    assert got["good requests"] == 0  # TPOT 100 ms > 50 ms for every request


def test_empty_samples_give_zero_like_vllm():
    got = recompute_rate([_req(0, 0, 0, ok=False)], SLO, duration_s=1.0)
    assert got["P99 TTFT ms"] == 0.0 and got["mean ITL ms"] == 0.0 and got["SLO attainment"] == 0.0
    with pytest.raises(ValueError, match=r"duration_s \(0.0\) must be a positive"):
        recompute_rate([], SLO, duration_s=0.0)


def test_compare_names_every_metric_that_differs_and_counts_must_be_equal():
    got = {"completed": 3, "P99 TTFT ms": 10.0, "goodput req/s": 1.0}
    rec = {"completed": 3, "P99 TTFT ms": 10.0000000001, "goodput req/s": 1.5}
    assert compare_rate(got, rec) == [("goodput req/s", 1.0, 1.5)]
    assert compare_rate({"good requests": 2}, {"good requests": 3}) == [("good requests", 2, 3)]


def test_recorded_serving_fixture_recomputes_exactly():
    val = validate_serving(load_serving(SERVING_RUN))
    assert val.errors == []


def _edit_ttft(run: Path, ttft_s: float) -> None:
    """Set the last request's TTFT (and E2E, by the same shift) in baseline r0 rate 0; re-seal its SHA-256."""
    line_path = run / "serving-serving.jsonl"
    lines = [json.loads(x) for x in line_path.read_text().splitlines()]
    target = next(x for x in lines if x["label"] == "baseline" and x["rate"]["index"] == 0)
    req_path = run / target["rate"]["requests_path"]
    doc = json.loads(req_path.read_text())
    last = doc["requests"][-1]
    shift = ttft_s - last["ttft_s"]
    last["ttft_s"], last["latency_s"] = ttft_s, last["latency_s"] + shift
    req_path.write_text(json.dumps(doc) + "\n")
    target["rate"]["requests_sha256"] = file_sha256(req_path)
    line_path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))


def test_editing_one_ttft_beyond_the_slo_fails_validation_naming_goodput_and_the_p99(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SERVING_RUN, run)
    _edit_ttft(run, 1.5)  # the SLO's TTFT limit is 1000 ms
    errors = validate_serving(load_serving(run)).errors
    text = "\n".join(errors)
    assert "serving/baseline-r0 rate 0 (4 req/s): goodput req/s recomputed" in text
    assert "P99 TTFT ms recomputed" in text and "good requests recomputed" in text
    assert all("the record says" in e for e in errors)


def test_editing_one_ttft_within_the_slo_names_the_percentile_not_goodput(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SERVING_RUN, run)
    _edit_ttft(run, 0.3)
    text = "\n".join(validate_serving(load_serving(run)).errors)
    assert "rate 0 (4 req/s): P99 TTFT ms recomputed" in text
    assert "goodput" not in text
