"""Claims about summary/report.html: self-contained, verdict first, and drawn by a real browser."""

from __future__ import annotations

import json
import re
import shutil
import stat

import pytest

from analysis.report.html_figures import latency_figure, pareto_figure, retention_figure
from analysis.report.summary import write_summary
from results_schema.codec.io import read_json
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


SERVING = FIXTURES / "serving_run"


def _serving_copy(tmp_path, **updates):
    """A copy of the serving fixture whose ``serving-summary.json`` carries ``updates``; its report re-rendered."""
    from analysis.report.html import write_report_html
    from results_schema.codec.io import write_json
    from results_schema.records.serving_summary import ServingSummary

    run = tmp_path / "serving"
    shutil.copytree(SERVING, run)
    path = run / "summary" / "serving-summary.json"
    s = read_json(path, ServingSummary)
    if updates:
        write_json(path, ServingSummary.model_validate({**s.model_dump(), **updates}))
    write_report_html(run)
    return run, read_json(path, ServingSummary)


def test_serving_run_report_has_verdicts_outputs_percentiles_and_order(tmp_path):
    run, s = _serving_copy(tmp_path)
    page = _page(run)
    assert page.index('id="verdict"') < page.index('id="serving"') < page.index('id="glossary"')
    assert "<title>VALID" in page and 'id="serving-failed"' not in page
    assert "No throughput case in this run (serving only" in page  # the fixture has no throughput phase
    verdicts = page.split('id="serving-verdicts"', 1)[1].split("</table>", 1)[0]
    assert verdicts.count("<tr>") == len(s.baseline_verdicts) + 1  # header + one row per verdict
    v = s.baseline_verdicts[0]
    assert f"{v.b_median_ms:,.2f} ({v.b_processes})" in verdicts and f"{v.a_median_ms:,.2f} ({v.a_processes})" in verdicts
    assert f"{v.delta_pct:+.1f}" in verdicts
    assert "inconclusive (no interval)" in verdicts  # one process per side: never a bare verdict
    outputs = page.split('id="serving-outputs"', 1)[1].split("</table>", 1)[0]
    assert outputs.count("identical") == len(s.outputs) and 'class="failure"' not in outputs
    pct = page.split('id="serving-percentiles"', 1)[1].split("</table>", 1)[0]
    extremes = [p for p in s.percentiles if p.kind == "max"]
    assert extremes and pct.count('<span class="pct-extreme">max</span>') == len(extremes)
    p50 = next(p for p in s.percentiles if p.percentile == 50 and p.kind == "percentile")
    assert f"{p50.value_ms:,.2f} [{p50.ci_low_ms:,.2f} .. {p50.ci_high_ms:,.2f}] (n {p50.n})" in pct
    assert 'id="serving-order-none"' in page  # one repeat: no position to compare
    for term in ("serving verdict", "output comparison", "percentile n", "order effect"):
        assert f"<dt>{term}</dt>" in page
    assert "serving-summary.md" in page.split('id="raw-files"', 1)[1]
    assert not re.search(r"""(src|href)=["']?(https?:)?//""",
                         re.sub(r"<script type=\"text/javascript\">.*?</script>", "", page, count=1, flags=re.S))


def test_serving_output_mismatch_is_a_failure_row_and_withholds_the_verdict(tmp_path):
    from results_schema.records.serving_summary import ServingSummary

    s = read_json(SERVING / "summary" / "serving-summary.json", ServingSummary)
    bad = s.outputs[3].model_copy(update={"status": "differs", "mismatched": tuple(range(12))})
    outputs = [o.model_dump() for o in s.outputs[:3]] + [bad.model_dump()]
    err = f"serving/{bad.label}-r0 rate 16: outputs differ from the baseline on requests 0..11"
    run, s2 = _serving_copy(tmp_path, outputs=outputs, valid=False, errors=[err])
    page = _page(run)
    assert "<title>INVALID" in page and 'id="serving-failed"' in page
    assert page.index('id="serving-failed"') < page.index('id="verdict"')
    assert err in page and 'id="serving-outputs-failed"' in page
    rows = page.split('id="serving-outputs"', 1)[1].split("</table>", 1)[0].split("<tr")
    failed = [r for r in rows if 'class="failure"' in r]
    assert len(failed) == 1 and "differs" in failed[0] and ">12<" in failed[0]
    assert "0, 1, 2, 3, 4, 5, 6, 7, … (+4)" in failed[0]  # the first request indices and how many more
    verdicts = page.split('id="serving-verdicts"', 1)[1].split("</table>", 1)[0].split("<tr")
    withheld = [r for r in verdicts if 'class="withheld"' in r]
    assert len(withheld) == sum(v.rate_rps == bad.rate_rps and v.label == bad.label for v in s2.baseline_verdicts) > 0
    assert all("withheld: outputs differ" in r for r in withheld)
    assert json.loads(re.search(r'id="report-data">(.*?)</script>', page).group(1))["valid"] is False


def test_unreadable_serving_summary_is_an_invalid_section_not_a_missing_one(tmp_path):
    from analysis.report.html import write_report_html

    run = tmp_path / "serving"
    shutil.copytree(SERVING, run)
    (run / "summary" / "serving-summary.json").write_text('{"schema_version": 1}')
    write_report_html(run)
    page = _page(run)
    assert "<title>INVALID" in page and 'id="serving-verdict"' in page and "does not validate" in page


def test_serving_summary_rerenders_the_report_with_its_section(tmp_path):
    from analysis.serving.summary import write_serving_summary

    run = tmp_path / "serving"
    shutil.copytree(SERVING, run)
    assert not (run / "summary" / "report.html").exists()
    write_serving_summary(run)
    assert 'id="serving-outputs"' in _page(run)
