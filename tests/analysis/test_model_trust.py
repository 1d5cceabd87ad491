"""Claims about when the transfer-bound model is trusted: fit, every point, and the in-run copy bench."""

from __future__ import annotations

import json
import math

from analysis.aggregate import aggregate
from analysis.load import load_run
from analysis.model.fit import TransferModel, fit_model, recommend
from analysis.model.trust import untrusted_reason
from analysis.report.tables import model_fits
from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir

TRUE = TransferModel(100.0, 4, 8, 18_688.0, 5e6, "serial")


def _run(tmp_path, bench_bytes_s: float | None):
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.0)]
    for g, n in ((8, 1), (4, 1), (2, 1), (4, 3)):
        cases.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=TRUE.predict(g, n), sd_tok_s=0.0))
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    if bench_bytes_s is not None:
        (run / "copy-bench.json").write_text(json.dumps({"plain_copy_bandwidth_bytes_s": bench_bytes_s}))
    return run


def test_a_fit_within_two_x_of_the_copy_bench_is_trusted(tmp_path):
    run = _run(tmp_path, bench_bytes_s=4e6)  # fitted 5 MB/s: 1.25x the bench
    data = load_run(run)
    m = fit_model(aggregate(data), data.runs, "same_runtime", bench_bandwidth_bytes_s=4e6)
    assert m.max_point_error_pct < 1 and untrusted_reason(m) is None


def test_a_fit_more_than_two_x_from_the_copy_bench_is_untrusted_everywhere_with_no_prediction(tmp_path):
    run = _run(tmp_path, bench_bytes_s=5e8)  # the copy measured 100x faster than the fit says
    data = load_run(run)
    s = aggregate(data)
    m = fit_model(s, data.runs, "same_runtime", bench_bandwidth_bytes_s=5e8)
    reason = untrusted_reason(m)
    assert reason is not None and "0.01x the in-run copy bench" in reason and "not explained by the copies" in reason
    assert untrusted_reason(m) is not None
    models, table = model_fits(run, data, s)
    fit = models["same_runtime/current"]
    assert fit["trusted"] is False and fit["untrusted_reason"] == reason and math.isclose(fit["bench_ratio"], 0.01, rel_tol=0.01)
    assert table["predicted_tok_s"].isna().all() and table["error_pct"].isna().all()  # no prediction shown
    rec = recommend(s, data.runs, need_gib=0.0, bench_bandwidth_bytes_s=5e8)
    assert rec.predictions == [] and any("UNTRUSTED" in line and "not explained" in line for line in rec.lines)
    assert not any("predicted" in line for line in rec.lines if line.startswith("model fit"))


def test_a_point_off_by_more_than_ten_percent_makes_the_model_untrusted():
    m = TransferModel(100.0, 4, 8, 18_688.0, 5e6, "serial", bandwidth_source="fitted", fit_rms_error_pct=6.0,
                      fit_points=4, max_point_error_pct=11.0)
    assert "off by 11.0%" in (untrusted_reason(m) or "")
    assert untrusted_reason(TransferModel(100.0, 4, 8, 1.0, 1e13, "serial", bandwidth_source="grid edge (highest)",
                                          fit_rms_error_pct=0.0, fit_points=4, max_point_error_pct=0.0))
