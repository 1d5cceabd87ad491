"""The published per-process record fields in analysis: published-summary medians, missing device memory."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.load import load_run
from analysis.published import published_summary
from analysis.validation.validate import validate_run

from .conftest import make_fixtures

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run"
MIB = 2**20


def _metrics(cr, *, hbm: tuple[int, int, int] | None, error: str | None = None) -> dict:
    r = cr.record
    elapsed = [x.elapsed_s for x in r.rounds]
    n = r.workload.num_prompts * len(elapsed)
    out = dict(requests=n, requests_per_s=n / r.elapsed_s, round_latency_p50_s=float(np.percentile(elapsed, 50)),
               round_latency_p95_s=float(np.percentile(elapsed, 95)), rss_before_load_bytes=1_000 * MIB,
               rss_peak_load_bytes=2_000 * MIB, rss_after_load_bytes=1_500 * MIB,
               peak_rss_bytes=max(r.peak_rss_bytes, 2_000 * MIB))
    if hbm is not None:
        out.update(device_memory_before_load_bytes=hbm[0] * MIB, device_memory_peak_load_bytes=hbm[1] * MIB,
                   device_memory_after_load_bytes=hbm[2] * MIB, device_memory_source="npu-smi",
                   device_memory_device="npu 0 chip 0")
    if error is not None:
        out.update(device_memory_source="npu-smi", device_memory_error=error)
    return out


@pytest.fixture()
def run(tmp_path) -> Path:
    """The real tiny run with baseline and current_g4_n1 carrying the fields, as NPU records would."""
    run = tmp_path / "run"
    shutil.copytree(REAL, run, ignore=shutil.ignore_patterns("summary", "SHA256SUMS"))
    crs = {cr.record.label: cr for _p, _l, cr in load_run(run).case_runs}
    make_fixtures.rewrite_case(run, ("same_runtime", "baseline", 0),
                               record=_metrics(crs["baseline"], hbm=(3_300, 40_000, 39_000)))
    make_fixtures.rewrite_case(run, ("same_runtime", "current_g4_n1", 0),
                               record=_metrics(crs["current_g4_n1"], hbm=None, error="npu-smi is not on PATH"),
                               evidence={"device": "npu"})
    return run


def test_published_summary_carries_the_record_fields(run) -> None:
    data = load_run(run)
    t = published_summary(data).set_index("label")
    base = t.loc["baseline"]
    rec = next(cr.record for _p, _l, cr in data.case_runs if cr.record.label == "baseline")
    assert base["requests_median"] == rec.requests == rec.workload.num_prompts * len(rec.rounds)
    assert base["requests_per_s_median"] == pytest.approx(rec.requests / rec.elapsed_s)
    assert base["round_latency_p50_median_s"] == pytest.approx(rec.round_latency_p50_s)
    assert base["round_latency_p95_median_s"] == pytest.approx(rec.round_latency_p95_s)
    assert (base["device_memory_before_load_bytes_median"], base["device_memory_peak_load_bytes_median"],
            base["device_memory_after_load_bytes_median"]) == (3_300 * MIB, 40_000 * MIB, 39_000 * MIB)
    assert base["rss_peak_load_bytes_median"] == 2_000 * MIB and base["device_memory_source"] == "npu-smi"
    # a failed device read and a record without the fields: missing (NaN), never 0
    g4 = t.loc["current_g4_n1"]
    assert np.isnan(g4["device_memory_peak_load_bytes_median"]) and g4["rss_before_load_bytes_median"] == 1_000 * MIB
    g8 = t.loc["current_g8_n1"]
    assert np.isnan(g8["requests_per_s_median"]) and np.isnan(g8["rss_peak_load_bytes_median"])
    assert g8["device_memory_source"] == ""
    # the P50 of a record without the field still comes from its rounds
    r = data.rounds[data.rounds["label"] == "current_g8_n1"]["elapsed_s"]
    assert g8["round_latency_p50_median_s"] == pytest.approx(float(np.percentile(r, 50)))


def test_record_p50_that_disagrees_with_its_rounds_is_refused(run) -> None:
    data = load_run(run)
    data.rounds.loc[data.rounds["label"] == "baseline", "elapsed_s"] *= 2  # a frame not read through the schema
    with pytest.raises(ValueError, match="round_latency_p50_s of a record disagrees"):
        published_summary(data)


def test_missing_device_memory_is_a_warning_naming_the_reason(run) -> None:
    rep = validate_run(run)
    missing = [i for i in rep.warnings if i.code == "missing_device_memory"]
    assert [(i.label, i.repeat) for i in missing] == [("current_g4_n1", 0)]
    assert "npu (npu-smi is not on PATH)" in missing[0].message
    check = next(c for c in rep.checks if c.name == "device_memory")
    assert check.passed and check.warnings == 1
