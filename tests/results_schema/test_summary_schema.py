"""Claims about the schema of summary/comparison-summary.json (results_schema.records.summary)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from analysis.aggregate import SUMMARY_COLUMNS
from analysis.comparison.compare import VS_BASELINE_COLUMNS
from analysis.comparison.decision import DECISION_COLUMNS
from analysis.report.summary import write_summary
from results_schema.cli import export_schemas
from results_schema.codec.io import read_json
from results_schema.records.summary import ComparisonSummary, DecisionRow, SummaryRow
from tests.analysis.conftest import make_fixtures


def test_row_models_name_exactly_the_columns_analysis_writes():
    assert list(SummaryRow.model_fields) == SUMMARY_COLUMNS + VS_BASELINE_COLUMNS + ["tokens"]
    assert list(DecisionRow.model_fields) == DECISION_COLUMNS


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    run = make_fixtures.valid_run(tmp_path_factory.mktemp("schema") / "run")
    write_summary(run)
    return run / "summary" / "comparison-summary.json"


def test_written_summary_validates_and_rejects_nan_and_unknown_keys(written):
    cs = read_json(written, ComparisonSummary)
    assert cs.valid and len(cs.rows) == len(cs.decision) == 9
    doc = json.loads(written.read_text())
    bad = json.loads(json.dumps(doc))
    bad["rows"][0]["retention"] = float("nan")
    with pytest.raises(ValidationError):
        ComparisonSummary.model_validate(bad)
    bad = json.loads(json.dumps(doc))
    bad["decision"][0]["surprise"] = 1
    with pytest.raises(ValidationError):
        ComparisonSummary.model_validate(bad)
    bad = json.loads(json.dumps(doc))
    bad["decision"][1]["verdict"] = "ok"
    with pytest.raises(ValidationError):
        ComparisonSummary.model_validate(bad)


def test_json_schema_is_exported(tmp_path):
    names = {p.name for p in export_schemas(tmp_path)}
    assert "ComparisonSummary.schema.json" in names
    schema = json.loads((tmp_path / "ComparisonSummary.schema.json").read_text())
    assert {"rows", "decision", "provenance", "valid"} <= set(schema["required"])
