"""Claims about what the reports show of a choose-then-confirm run: the HTML section and its figure (every predicted
setting a point, verified settings marked at their measured retention, the recommended one highlighted, misses and
an untrusted model marked), ``summary/choice.png``, the catalog's ``choices`` / ``choice_predictions`` tables, and
``recommend`` printing the run's measured decision first (measured settings only).

The run (``choose_synth``): one ``predict`` decision by the runner's rule; its verify phase measures the first
chosen setting at its prediction and the last one 30% slower (outside its interval: MISSED)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from analysis.catalog.store import build, query
from analysis.cli import main
from analysis.report.choice_view import GIB, choice_view
from analysis.report.html_choice import PLOT_ID, SECTION_ID, choice_figure, choice_section
from analysis.report.summary import write_summary
from results_schema.records.choice import SUMMARY_FILE, ChoiceDecision, ChoiceSummary, Recommended
from results_schema.codec.io import read_json

from .choose_synth import write_choose_run


@pytest.fixture(scope="module")
def choose_run(tmp_path_factory):
    run, d = write_choose_run(tmp_path_factory.mktemp("choose") / "run", slow_last=0.7)
    write_summary(run)
    return run, d, read_json(run / "summary" / SUMMARY_FILE, ChoiceSummary)


def _figure(page: str, div_id: str) -> list[dict]:
    """The traces plotly draws into ``div_id`` (the JSON array passed to ``Plotly.newPlot``)."""
    m = re.search(r'Plotly\.newPlot\(\s*"' + re.escape(div_id) + r'",\s*', page)
    assert m, f"no figure {div_id!r} in the page"
    traces, _end = json.JSONDecoder().raw_decode(page, m.end())
    return traces


def _trace(traces: list[dict], meta: str) -> dict:
    (t,) = [t for t in traces if t.get("meta") == meta]
    return t


def test_the_run_has_a_recommendation_and_a_miss(choose_run):
    _run, d, cs = choose_run
    assert len(d.chosen) == 2 and cs.recommended is not None and cs.recommended.label == d.chosen[0].label
    assert [v.within_interval for v in cs.verified] == [True, False]


def test_html_has_the_section_with_lines_recommended_first_and_misses_marked(choose_run):
    run, d, cs = choose_run
    page = (run / "summary" / "report.html").read_text(encoding="utf-8")
    body = page.split("<body>", 1)[1]
    assert f'<h2 id="{SECTION_ID}">Choose, then confirm</h2>' in body
    assert body.index("Decision table") < body.index("Choose, then confirm") < body.index("Capacity vs throughput")
    section = body.split(f'id="{SECTION_ID}"', 1)[1].split("<h2>", 1)[0]
    items = re.findall(r'<li( class="[^"]*")?>(.*?)</li>', section)
    assert items[0][0] == ' class="choice-recommended"' and items[0][1].startswith("recommended: " + d.chosen[0].label)
    assert len(items) == len(cs.lines)
    missed = [text for cls, text in items if "MISSED" in text]
    assert missed and all(cls == ' class="choice-bad"' for cls, text in items if "MISSED" in text)
    assert f"1 verified setting(s) MISSED their predicted interval: {d.chosen[1].label}" in section
    assert '<table id="choice-verified">' in section and section.count("<tr") == 3  # header + two verified
    assert page.count('class="plotly-graph-div"') == 4  # pareto, retention, latency and the choice figure
    markup = re.sub(r"<script type=\"text/javascript\">.*?</script>", "", page, count=1, flags=re.S)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup), "an outside link or resource"


def test_html_figure_has_every_prediction_the_verified_marks_and_the_recommended_one(choose_run):
    run, d, cs = choose_run
    traces = _figure((run / "summary" / "report.html").read_text(encoding="utf-8"), PLOT_ID)
    pred = _trace(traces, "prediction")
    assert len(pred["x"]) == len(pred["y"]) == len(d.predictions) == len(pred["error_y"]["array"])
    assert pred["x"] == pytest.approx([p.released_bytes / GIB for p in d.predictions])
    assert pred["y"] == pytest.approx([p.retention for p in d.predictions])
    assert [c[:4] for c in pred["customdata"]] == [[p.group_size, p.num_in_group, p.prefetch_step, p.class_id]
                                                   for p in d.predictions]
    assert "prefetch_step" in pred["hovertemplate"] and "class" in pred["hovertemplate"]
    ver = _trace(traces, "verified")
    assert ver["marker"]["symbol"] == "diamond" != pred["marker"]["symbol"]
    assert ver["text"] == [v.label for v in cs.verified]
    assert ver["y"] == pytest.approx([v.measured_retention for v in cs.verified])
    released = {(p.group_size, p.num_in_group, p.prefetch_step): p.released_bytes / GIB for p in d.predictions}
    assert ver["x"] == pytest.approx([released[(c.group_size, c.num_in_group, c.prefetch_step)] for c in d.chosen])
    assert ver["marker"]["color"][0] != ver["marker"]["color"][1]  # inside vs MISSED
    rec = _trace(traces, "recommended")
    assert rec["name"] == f"recommended: {cs.recommended.label}"
    assert rec["x"] == pytest.approx(ver["x"][:1]) and rec["y"] == pytest.approx(ver["y"][:1])
    assert rec["marker"]["size"] > ver["marker"]["size"]
    assert (run / "summary" / "choice.png").stat().st_size > 10_000


def test_section_marks_an_untrusted_model_and_no_recommendation(choose_run):
    _run, d, cs = choose_run
    lines = ("choose (front): the predicted front is measured instead", "recommended: NONE: no valid measured "
             "setting meets the need", "model: NOT TRUSTED on this host (a verified point still missed after the refit)")
    summary = cs.model_copy(update={"recommended": None, "trusted": False, "lines": lines})
    view = choice_view([d], summary)
    html = choice_section(view, None)
    assert html.count('<li class="choice-bad">') == 2 and html.index("recommended: NONE") < html.index("choose (front)")
    assert "model NOT TRUSTED on this host" in html and "NONE recommended" in html
    fig = choice_figure(view)
    assert fig is not None and "recommended" not in {t.meta for t in fig.data}
    assert len(next(t for t in fig.data if t.meta == "prediction").x) == len(d.predictions)


def test_a_need_of_zero_has_no_figure_and_says_why():
    d = ChoiceDecision(
        stage="unnecessary", need_bytes=0, need_source="need_gib=0", implementation="current", num_layers=2,
        num_prompts=4, layer_bytes=(10, 10), layer_bytes_source="synthetic", slot_bytes=4, baseline_phase="probe",
        baseline_tok_s=(100.0,), noise_pct=0.0, copy_bench_bandwidth_bytes_s=None, points=(), fits=(), form=None,
        form_reason="need 0", half_width_pct=0.0, predictions=(), checked=(), budget=0, chosen=(),
        decided_phase=None, trusted=True, note="offload unnecessary", processes_every_candidate=0)
    s = ChoiceSummary(recommended=Recommended(label="baseline", group_size=0, num_in_group=0, prefetch_step=1,
                                              reason="offload unnecessary"), verified=(), processes_run=2,
                      processes_every_candidate=0, trusted=True,
                      lines=("choose (unnecessary): offload unnecessary",
                             "recommended: baseline (offload unnecessary: the need is 0 bytes)"))
    view = choice_view([d], s)
    assert choice_figure(view) is None
    html = choice_section(view, None)
    assert "No decision has predictions" in html and html.index("recommended: baseline") < html.index("unnecessary)")


def test_catalog_fills_choices_and_choice_predictions(choose_run, tmp_path):
    run, d, _cs = choose_run
    db = tmp_path / "c.duckdb"
    build(run, db)
    c = query(db, "SELECT * FROM choices").to_dict("records")
    assert len(c) == 1
    (row,) = c
    assert (row["line"], row["stage"], row["form"], row["need_bytes"], row["trusted"]) == (
        1, "predict", d.form, d.need_bytes, True)
    assert row["half_width_pct"] == pytest.approx(d.half_width_pct) and row["noise_pct"] == pytest.approx(d.noise_pct)
    assert list(row["chosen_labels"]) == [x.label for x in d.chosen]
    assert row["processes_every_candidate"] == d.processes_every_candidate
    assert row["predicted_settings"] == len(d.predictions) and row["decided_phase_name"] == "verify"
    p = query(db, "SELECT count(*) AS n, sum(chosen::INT) AS chosen, sum(meets_need::INT) AS meets, "
                  "min(stage) AS stage FROM choice_predictions").iloc[0]
    assert (p["n"], p["chosen"], p["stage"]) == (len(d.predictions), 2, "predict")
    assert p["meets"] == sum(x.released_bytes >= d.need_bytes for x in d.predictions)


def _need_gib(d: ChoiceDecision) -> str:
    assert d.need_source.startswith("need_gib=")
    return d.need_source.split("=", 1)[1]


def test_recommend_prints_the_choose_decision_first_and_recommends_a_measured_setting(choose_run, capsys):
    run, d, cs = choose_run
    assert main(["recommend", str(run), "--need-gib", _need_gib(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("choose run: choose, then confirm") and "summary/choice.json" in out[0]
    assert out[1:1 + len(cs.lines)] == [f"  {x}" for x in cs.lines]
    assert out[1 + len(cs.lines)] == f"note: the asked need is this run's own ({d.need_source})"
    assert "phase 'verify'" in "\n".join(out)
    (last,) = [x for x in out if x.startswith("recommendation:")]
    assert last.startswith(f"recommendation: {cs.recommended.label} ")  # a measured setting, the run's decision


def test_recommend_on_another_need_says_so_and_computes_a_missing_decision(choose_run, capsys, tmp_path):
    run, _d, cs = choose_run
    bare = tmp_path / "bare"
    shutil.copytree(run, bare, ignore=shutil.ignore_patterns("summary"))
    rc = main(["recommend", str(bare), "--need-gib", "1"])
    out = capsys.readouterr().out.splitlines()
    assert "computed now from its measurements" in out[0]
    assert out[1:1 + len(cs.lines)] == [f"  {x}" for x in cs.lines]  # the same rule as summary/choice.json
    assert out[1 + len(cs.lines)].startswith("note: asked need_gib=1 (1,073,741,824 B) differs from this run's need")
    assert rc == 1 and not any(x.startswith("recommendation:") for x in out)  # nothing measured meets 1 GiB
