"""Claims about summary/report.html: self-contained, verdict first, and drawn by a real browser."""

from __future__ import annotations

import json
import re
import shutil
import stat

import pytest

from analysis.report.html_figures import latency_figure, pareto_figure, retention_figure
from analysis.report.summary import write_summary
from results_schema.records.io import read_json
from results_schema.records.summary import ComparisonSummary

from . import browser
from .conftest import FIXTURES, make_fixtures

REAL = FIXTURES / "real_tiny_run"


@pytest.fixture(scope="module")
def valid_report(tmp_path_factory):
    run = make_fixtures.valid_run(tmp_path_factory.mktemp("html") / "valid")
    write_summary(run)
    return run


@pytest.fixture(scope="module")
def invalid_report(tmp_path_factory):
    src = make_fixtures.valid_run(tmp_path_factory.mktemp("html-src") / "src")
    run = make_fixtures.build_edge(src, tmp_path_factory.mktemp("html-bad") / "bad", "edge_wrong_class")
    write_summary(run)
    return run


def _page(run):
    return (run / "summary" / "report.html").read_text(encoding="utf-8")


def test_report_is_self_contained_with_plotly_inlined_once(valid_report):
    page = _page(valid_report)
    assert page.count("<script") == page.count("</script>")
    assert not re.search(r"""<script[^>]*\ssrc=""", page), "a script is loaded from a URL"
    # outside the inlined library (whose source mentions URLs in strings), no element points outside
    markup = re.sub(r"<script type=\"text/javascript\">.*?</script>", "", page, count=1, flags=re.S)
    assert len(markup) < 200_000 < len(page)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup), "an outside link or resource"
    # plotly.js's own bundle banner appears once: the library is inlined once, figures without it
    assert len(re.findall(r"plotly\.js v\d+\.\d+\.\d+", page)) == 1
    assert page.count('class="plotly-graph-div"') == 3  # pareto, retention, latency
    cs = read_json(valid_report / "summary" / "comparison-summary.json", ComparisonSummary)
    figs = [pareto_figure(cs.decision), retention_figure(cs.decision), latency_figure(cs.rows)]
    assert {t.type for f in figs for t in f.data} <= {"scatter", "bar"}  # SVG, never WebGL (scattergl)
    mode = stat.S_IMODE((valid_report / "summary" / "report.html").stat().st_mode)
    assert mode == 0o644


def test_summary_json_follows_its_schema_and_has_provenance_and_decision(valid_report):
    cs = read_json(valid_report / "summary" / "comparison-summary.json", ComparisonSummary)
    assert len(cs.decision) == len(cs.rows) == 9
    assert {r.verdict for r in cs.decision} <= {"baseline", "slower", "faster", "equivalent", "inconclusive"}
    base = next(r for r in cs.decision if r.label == "baseline")
    assert base.verdict == "baseline" and base.retention == 1.0
    g41 = next(r for r in cs.decision if r.label == "current_g4_n1")
    assert g41.retention_ci_low < g41.retention < g41.retention_ci_high  # three processes: an interval
    assert cs.provenance.run_id == "valid"
    for p in (valid_report / "summary").iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


def test_invalid_report_shows_the_verdict_and_every_error_first(invalid_report):
    page = _page(invalid_report)
    body = page.split("<body>", 1)[1]
    assert body.index("INVALID") < body.index("Provenance") < body.index("Decision table")
    val = json.loads((invalid_report / "summary" / "validation.json").read_text())
    errors = [i for i in val["issues"] if i["severity"] == "error"]
    assert errors
    for i in errors:
        assert i["code"] in body
    for c in val["checks"]:
        if not c["passed"]:
            assert f"<code>{c['name']}</code>" in body
    cs = read_json(invalid_report / "summary" / "comparison-summary.json", ComparisonSummary)
    bad = [r for r in cs.decision if not r.valid]
    assert bad and all(r.verdict == "INVALID" for r in bad)
    assert "INVALID (validation error): crossed out" in page


def _render(run, name):
    reason = browser.skip_reason()
    if reason:
        pytest.skip(reason)
    cs = read_json(run / "summary" / "comparison-summary.json", ComparisonSummary)
    shot = browser.screenshot_dir() / f"{name}.png"
    got = browser.render(run / "summary" / "report.html", expected_points=len(cs.decision), screenshot=shot)
    print(f"screenshot of {name}: {shot}")
    return cs, got


def _check_page(cs, got):
    assert got.console_errors == [] and got.page_errors == []
    assert got.outside_requests == []
    assert got.points == len(cs.decision) > 0
    assert got.svg_count >= 1
    assert got.verdict_top < got.provenance_top
    assert cs.provenance.run_id in got.text
    for r in cs.decision:
        assert r.label in got.text
        assert f"{r.throughput_median_tok_s:,.2f}" in got.text
        if r.retention is not None:
            assert f"{r.retention:,.4f}" in got.text
    assert got.screenshot.stat().st_size > 10_000
    # hover on each drawn point shows its label, layers, released bytes and retention
    assert len(got.hovers) == len(cs.decision)
    for r in cs.decision:
        hit = [h for h in got.hovers if h.startswith(r.implementation) and r.label in h]
        assert hit, (r.label, got.hovers)
        assert f"layers: {r.selected_layers or 'none'}" in hit[0] and f"released bytes: {r.released_bytes:,}" in hit[0]
        assert "retention: " in hit[0]


@pytest.mark.engine  # headless Chromium
def test_browser_renders_the_valid_report(valid_report):
    cs, got = _render(valid_report, "report-valid-synthetic")
    _check_page(cs, got)
    assert got.first_heading.startswith("VALID")


@pytest.mark.engine  # headless Chromium
def test_browser_renders_the_invalid_report_verdict_first(invalid_report):
    cs, got = _render(invalid_report, "report-invalid-synthetic")
    _check_page(cs, got)
    assert got.first_heading.startswith("INVALID")
    assert got.text.lstrip().startswith("INVALID")


@pytest.mark.engine  # headless Chromium
@pytest.mark.skipif(not REAL.is_dir(), reason="no real run fixture")
def test_browser_renders_the_real_tiny_run(tmp_path, request):
    from .conftest import model_dir_for

    run = tmp_path / "real"
    shutil.copytree(REAL, run, ignore=shutil.ignore_patterns("summary"))
    write_summary(run, model_dir=model_dir_for(REAL, request))
    cs, got = _render(run, "report-real-tiny-run")
    _check_page(cs, got)
    assert "tiny-qwen2-l8" in got.text and "0.32.0" in got.text and "20261130T070339Z-448df2" in got.text


def test_browser_test_says_why_it_is_skipped_without_chromium(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium on PATH
    reason = browser.skip_reason()
    assert reason and "chromium" in reason and "apt-get install -y chromium" in reason
