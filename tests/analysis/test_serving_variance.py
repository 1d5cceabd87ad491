"""Claims about the serving summary's between-process variance (the process is the only level in serving)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.comparison.variance import between_only, chi2_quantile
from analysis.serving.summary import load_serving, write_serving_summary
from results_schema.records.serving import LATENCY_METRICS
from analysis.serving.stats import process_variance, variance_lines
from results_schema.codec.io import read_json
from results_schema.records.serving_summary import ServingSummary, ServingVarianceRow

SERVING_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "serving_run"


def test_between_only_is_the_sample_variance_of_the_logs_with_a_chi_square_interval():
    var, lo, hi, df = between_only([100.0, 110.0, 121.0])
    assert df == 2 and var == pytest.approx(np.var(np.log([100.0, 110.0, 121.0]), ddof=1))
    assert lo == pytest.approx(2 * var / chi2_quantile(0.975, 2)) and hi == pytest.approx(2 * var / chi2_quantile(0.025, 2))
    with pytest.raises(ValueError, match=">= 2 positive finite values"):
        between_only([100.0])


def test_between_only_interval_covers_at_its_confidence():
    rng = np.random.default_rng(4)
    hits = sum(lo <= 0.04 ** 2 <= hi for lo, hi in
               (between_only(list(np.exp(0.04 * rng.standard_normal(4))))[1:3] for _ in range(3000)))
    assert abs(hits / 3000 - 0.95) < 0.015


def _twice(runs):
    """Each serving line again as repeat 1 with every P50 10% higher (two processes per label and rate)."""
    out = []
    for r in runs:
        rate = r.rate.model_copy(update={m: getattr(r.rate, m).model_copy(update={"p50_ms": getattr(r.rate, m).p50_ms * 1.1})
                                         for m in LATENCY_METRICS})
        out.append(r.model_copy(update={"repeat": 1, "rate": rate}))
    return list(runs) + out


def test_each_label_rate_and_metric_with_two_processes_gets_a_row_and_one_process_none(tmp_path):
    runs = load_serving(SERVING_RUN).runs
    assert process_variance(runs) == []  # one process per label: no between-process variance to state
    rows = [ServingVarianceRow.model_validate(r) for r in process_variance(_twice(runs))]
    keys = {(r.phase, r.label, r.rate_rps, r.metric) for r in rows}
    assert len(keys) == len(rows) == len({(r.phase, r.label, r.rate_rps) for r in rows}) * len(LATENCY_METRICS)
    assert all(r.processes == 2 and r.df == 1 and r.between_var == pytest.approx(math.log(1.1) ** 2 / 2) for r in rows)
    lines = variance_lines(process_variance(_twice(runs)))
    assert all(" P50: between processes SD " in ln and "(1 df)" in ln for ln in lines)


def test_the_serving_summary_document_holds_the_rows(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SERVING_RUN, run)
    shutil.rmtree(run / "summary", ignore_errors=True)
    write_serving_summary(run)
    cs = read_json(run / "summary" / "serving-summary.json", ServingSummary)
    assert cs.process_variance == ()  # the fixture runs one process per label
