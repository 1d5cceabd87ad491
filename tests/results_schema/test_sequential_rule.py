"""The sequential design's allowed values are stated once (``results_schema.rules.sequential_rule``): the config's
range table (``conf.ranges``) and the design check the planner and the analysis call refuse the same values."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import BaseModel

from analysis.comparison.sequential import SequentialDesign
from conf.ranges import field_range
from results_schema.codec.io import RecordError, parse_line
from results_schema.records.choice import VerifyDesign
from results_schema.records.sequential import LookDecision
from results_schema.rules.sequential_rule import SPENDING, check_design

GOOD = {"looks": [3, 4, 6], "target_pct": 5.0, "alpha": 0.05}
"""A design every check allows; each case below changes one value."""


@pytest.mark.parametrize(("field", "values"), [
    ("target_pct", [5.0, 0.1, 100.0, 0.0, -1.0, math.nan, math.inf]),
    ("alpha", [0.05, 0.5, 0.999, 0.0, 1.0, 1.5, -0.1, math.nan, math.inf]),
    ("looks", [2, 3, 1, 0, -2]),
])
def test_the_config_range_table_and_the_design_check_allow_the_same_values(field: str, values: list[float]) -> None:
    rng = field_range("SequentialConfig", field)
    for v in values:
        design = dict(GOOD, **({field: v} if field != "looks" else {"looks": [v, 10]}))
        why = check_design(design["looks"], design["target_pct"], design["alpha"], "pocock")
        assert rng.contains(v) == (why is None), (field, v, why)
        if why is not None:
            assert f"sequential {field}" in why and rng.allowed(integer=field == "looks") in why
            with pytest.raises(ValueError, match=f"sequential {field}"):
                SequentialDesign(tuple(design["looks"]), design["target_pct"], design["alpha"])


@pytest.mark.parametrize(("looks", "spending", "named"), [
    ([4, 3], "pocock", "strictly increasing"), ([3, 3], "pocock", "strictly increasing"),
    ([], "pocock", "non-empty"), ([3, 4], "linear", "allowed values are pocock, obrien_fleming"),
])
def test_a_design_refused_across_values_names_them(looks: list[int], spending: str, named: str) -> None:
    why = check_design(looks, 5.0, 0.05, spending)
    assert why is not None and named in why


def _spending_records() -> list[BaseModel]:
    look = LookDecision(phase="p", look=1, blocks=3, looks=(3, 4), target_pct=5.0, alpha=0.05, spending="pocock",
                        look_alpha=0.01, baseline="baseline", labels=(), next_blocks=1)
    verify = VerifyDesign(looks=(3, 4, 6), target_pct=5.0, floor_pct=5.0, predicted_gap_pct=None, best=None,
                          runner_up=None, alpha=0.05, spending="pocock", first_block=0)
    return [look, verify]


@pytest.mark.parametrize("record", _spending_records(), ids=lambda r: type(r).__name__)
def test_a_record_names_only_a_spending_the_rule_knows(record: BaseModel) -> None:
    """A look line's and a verify design's ``spending`` is the rule's set: the exported JSON Schema lists exactly
    ``SPENDING``, the reader takes each of them and refuses any other name."""
    cls = type(record)
    assert cls.model_json_schema()["properties"]["spending"]["enum"] == list(SPENDING)
    doc = record.model_dump(mode="json")
    for name in SPENDING:
        assert getattr(parse_line(json.dumps(dict(doc, spending=name)), cls), "spending") == name
    with pytest.raises(RecordError, match="spending"):
        parse_line(json.dumps(dict(doc, spending="linear")), cls)
