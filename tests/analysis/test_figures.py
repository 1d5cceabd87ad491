"""Claims about every figure kind of the report, rendered from the fixtures and read back through matplotlib's
renderer (``tests.support.figure_checks``): no text on text, no legend on a data point, each verdict's interval
drawn with the table's numbers, a percentile its n cannot resolve named as the maximum, the CPU named once.

Figures: ``pareto.png`` and ``retention.png`` of ``synthetic_run`` (3 processes per label: intervals) and
``real_tiny_run`` (1 process: none), ``choice.png`` of the synthetic choose run (``choose_synth``),
``serving-latency.png`` and ``serving-front.png`` of ``serving_run`` (6 requests per label and rate).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis.comparison.decision import decision_table
from analysis.report.choice_view import read_choice_view
from analysis.report.html_figures import pareto_figure, retention_figure
from analysis.report.plots import ci_gid, plot_choice, plot_pareto, plot_retention, verified_gid
from analysis.report.provenance import one_line, provenance
from analysis.report.summary import summary_document, write_summary
from analysis.report.tables import build, display_columns
from analysis.serving.report import pct_gid, plot_front, plot_latency
from analysis.serving.stats import percentile_rows
from analysis.serving.summary import load_serving, rate_table, slo_rates
from results_schema.records.choice import SUMMARY_FILE, ChoiceSummary
from results_schema.codec.io import read_json
from tests.support.figure_checks import drawn_intervals, legend_covered_points, overlapping_texts, same_4_digits

from .choose_synth import write_choose_run
from .conftest import FIXTURES

NOTE = ("run 20261205T000000Z-abcdef | model tiny-qwen2-l8-h128-s0 | cpu: AMD EPYC 7B13 64-Core Processor x2 (x86_64) "
        "| vllm 0.32.0 | torch 2.13.0+cpu | config 0123456789ab")
"""A footer as long as a real run's."""


@pytest.fixture(scope="module")
def tables() -> dict[str, dict]:
    return {run: build(FIXTURES / run) for run in ("synthetic_run", "real_tiny_run")}


@pytest.fixture(scope="module")
def serving() -> tuple[pd.DataFrame, pd.DataFrame]:
    data = load_serving(FIXTURES / "serving_run")
    return rate_table(data.frame), pd.DataFrame(percentile_rows(data.run_dir, data.runs))


@pytest.fixture(scope="module")
def choose(tmp_path_factory):
    run, _d = write_choose_run(tmp_path_factory.mktemp("choose") / "run", slow_last=0.7)
    write_summary(run)
    return read_choice_view(run, run / "summary"), read_json(run / "summary" / SUMMARY_FILE, ChoiceSummary)


def _render(kind: str, tables, serving, choose):
    if kind.startswith(("pareto", "retention")):
        plot, run = kind.split(":")
        return {"pareto": plot_pareto, "retention": plot_retention}[plot](tables[run]["summary"], note=NOTE)
    if kind == "choice":
        return plot_choice(choose[0], note=NOTE)
    if kind == "serving-latency":
        return plot_latency(*serving)
    return plot_front(slo_rates(serving[0]))


@pytest.fixture(scope="module")
def figure(tables, serving, choose):
    """``figure(kind)``: the figure of ``kind`` as its writer saves it, rendered once per module."""
    done: dict[str, Figure] = {}

    def get(kind: str) -> Figure:
        if kind not in done:
            done[kind] = _render(kind, tables, serving, choose)
        return done[kind]

    yield get
    for fig in done.values():
        plt.close(fig)


KINDS = ["pareto:synthetic_run", "retention:synthetic_run", "pareto:real_tiny_run", "retention:real_tiny_run",
         "choice", "serving-latency", "serving-front"]


@pytest.mark.parametrize("kind", KINDS)
def test_no_text_overlaps_text_and_no_legend_covers_a_point(kind, figure):
    fig = figure(kind)
    assert overlapping_texts(fig) == []
    assert legend_covered_points(fig) == []


def _verdict_rows(t: dict) -> pd.DataFrame:
    """The decision table's rows with an interval (what the HTML / console tables print as ``retention 95% CI``)."""
    d = decision_table(t["data"], t["summary"], t["validation"], margin_pct=t["margin_pct"])
    return d[d["retention_ci_low"].notna() & d["retention_ci_high"].notna()]


def test_retention_draws_each_verdict_s_interval_with_the_tables_numbers(tables, figure):
    t = tables["synthetic_run"]
    rows = _verdict_rows(t)
    assert len(rows) == 8  # every offload label of the fixture (3 processes each)
    fig = figure("retention:synthetic_run")
    drawn = drawn_intervals(fig)
    legend = " ".join(" ".join(x.get_text().split()) for x in fig.axes[0].get_legend().get_texts())
    assert set(drawn) == {ci_gid(p, lb) for p, lb in zip(rows["phase"], rows["label"], strict=True)}
    printed = dict(zip(display_columns(t["summary"])["label"], display_columns(t["summary"])["vs_baseline"],
                       strict=True))
    for _i, r in rows.iterrows():
        lo, hi = drawn[ci_gid(r["phase"], r["label"])]
        assert same_4_digits(lo, r["retention_ci_low"]) and same_4_digits(hi, r["retention_ci_high"]), r["label"]
        assert f"CI95 {(lo - 1) * 100:+.1f}%..{(hi - 1) * 100:+.1f}%" in printed[r["label"]]
    assert "retention 95% CI" in legend and "process min..max" in legend


def test_pareto_draws_each_verdict_s_interval_times_the_baseline_median(tables, figure):
    t = tables["synthetic_run"]
    rows = _verdict_rows(t)
    fig = figure("pareto:synthetic_run")
    drawn = drawn_intervals(fig)
    legend = " ".join(" ".join(x.get_text().split()) for x in fig.axes[0].get_legend().get_texts())
    assert set(drawn) == {ci_gid(p, lb) for p, lb in zip(rows["phase"], rows["label"], strict=True)}
    for _i, r in rows.iterrows():
        lo, hi = drawn[ci_gid(r["phase"], r["label"])]
        base = r["baseline_throughput_median_tok_s"]
        assert same_4_digits(lo / base, r["retention_ci_low"]) and same_4_digits(hi / base, r["retention_ci_high"])
    assert "retention 95% CI" in legend


def test_one_process_per_label_draws_no_interval_and_says_so(figure):
    fig = figure("retention:real_tiny_run")
    legend = [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    assert drawn_intervals(fig) == {}
    assert "1 process per label: no interval, no spread" in legend


def test_html_figures_draw_the_same_intervals(tables):
    t = tables["synthetic_run"]
    cs = summary_document(FIXTURES / "synthetic_run", t, provenance(FIXTURES / "synthetic_run", t["data"]), cpu=True)
    rows = [r for r in cs.decision if r.retention_ci_low is not None]
    summary = {(r["phase"], r["label"]): r for r in t["summary"].to_dict(orient="records")}
    ret = [tr for tr in retention_figure(cs.decision).data if tr.meta == "case"]
    par = [tr for tr in pareto_figure(cs.decision).data if tr.meta == "case"]
    seen = 0
    for tr_r, tr_p in zip(ret, par, strict=True):
        for k, label in enumerate(tr_r.customdata):
            r = next((x for x in rows if x.label == label[0]), None)
            if r is None:
                continue
            seen += 1
            s = summary[(r.phase, r.label)]
            assert same_4_digits(tr_r.y[k] + tr_r.error_y.array[k], 1 + s["vs_baseline_ci_high_pct"] / 100)
            assert same_4_digits(tr_r.y[k] - tr_r.error_y.arrayminus[k], 1 + s["vs_baseline_ci_low_pct"] / 100)
            assert same_4_digits((tr_p.y[k] + tr_p.error_y.array[k]) / r.baseline_throughput_median_tok_s,
                                 r.retention_ci_high)
    assert seen == len(rows) == 8


def test_choice_draws_each_verified_setting_s_predicted_interval(choose, figure):
    _view, cs = choose
    fig = figure("choice")
    drawn = drawn_intervals(fig, "verified:")
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text()]
    assert set(drawn) == {verified_gid(v.label) for v in cs.verified}
    for v in cs.verified:
        lo, hi = drawn[verified_gid(v.label)]
        assert same_4_digits(lo, v.retention_low) and same_4_digits(hi, v.retention_high)
    assert sorted(labels) == sorted(v.label for v in cs.verified)


def test_a_p99_of_fewer_than_100_requests_is_drawn_and_named_as_the_maximum(serving, figure):
    _table, pct = serving
    p99 = pct[pct["percentile"] == 99]
    assert (p99["n"] < 100).all() and set(p99["kind"]) == {"max"}  # the fixture: 6 requests per label and rate
    fig = figure("serving-latency")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    curves = {(ax.get_ylabel(), ln.get_label()): ln.get_ydata() for ax in fig.axes for ln in ax.lines}
    drawn = drawn_intervals(fig)
    assert not any("P99" in x for x in legend)
    for label in dict.fromkeys(pct["label"]):
        # TTFT and TPOT have one value per request (n 6); ITL pools chunk gaps (its own n), so the entry names both
        entries = [x for x in legend if x.startswith(f"{label}: ")]
        assert any(x.startswith(f"{label}: TTFT/TPOT max (n 6); ITL max (n ") for x in entries), entries
        assert any(x.startswith(f"{label}: TTFT/TPOT P50 (n 6); ITL P50 (n ") for x in entries), entries
        got = p99[(p99["label"] == label) & (p99["metric"] == "tpot")].sort_values("rate_rps")["value_ms"]
        assert all(same_4_digits(a, b) for a, b in zip(curves[("TPOT (ms)", f"{label}: max (n 6)")], got, strict=True))
    resolved = pct[(pct["kind"] == "percentile") & pct["metric"].isin(["ttft", "tpot", "itl"])
                   & pct["percentile"].isin([50, 99])]
    assert len(drawn) == len(resolved) > 0
    for _i, r in resolved.iterrows():
        lo, hi = drawn[pct_gid(r["phase"], r["label"], r["metric"], r["percentile"], r["rate_rps"])]
        assert same_4_digits(lo, r["ci_low_ms"]) and same_4_digits(hi, r["ci_high_ms"])


def test_a_resolved_p99_keeps_its_name(serving):
    table, pct = serving
    resolved = pct.assign(n=120, kind="percentile")  # as ``percentile_rows`` names 120 requests' P99
    fig = plot_latency(table, resolved)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
    assert "baseline: P99 (n 120)" in legend and not any("max" in x.split(":")[-1][:5] for x in legend)


def test_the_shared_legend_names_each_panel_s_statistic_where_the_panels_differ(serving):
    # ITL pools every chunk gap, so its P99 can be resolved where TTFT's and TPOT's (one value per request) is not
    table, pct = serving
    itl = pct["metric"] == "itl"
    mixed = pct.assign(n=pct["n"].where(~itl, 3000), kind=pct["kind"].where(~itl, "percentile"))
    fig = plot_latency(table, mixed)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    panels = {ax.get_ylabel(): {ln.get_label() for ln in ax.lines if (ln.get_gid() or "").startswith("curve:")}
              for ax in fig.axes}
    plt.close(fig)
    assert "baseline: TTFT/TPOT max (n 6); ITL P99 (n 3000)" in legend
    assert "baseline: P99 (n 3000)" in panels["ITL (ms)"] and "baseline: max (n 6)" in panels["TTFT (ms)"]
    assert not any(x.startswith("baseline: max") for x in legend)


def test_the_footer_names_a_device_shared_by_two_runtimes_once(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "real_tiny_run", run, ignore=shutil.ignore_patterns("logs", "evidence", "summary"))
    m = json.loads((run / "environment-manifest.json").read_text())
    m["devices"] = m["devices"] * 2  # the device of each runtime used: two runtimes on one CPU
    (run / "environment-manifest.json").write_text(json.dumps(m))
    line = one_line(provenance(Path(run)))
    (device,) = {f"{d['kind']}: {d['name']} x{d['count']}" for d in m["devices"]}
    assert line.count(device) == 1
