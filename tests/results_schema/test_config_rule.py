"""The config hash rule (``results_schema.rules.config_rule``): the manifest's text for a non-finite float reads
back to the data that was hashed, a string that is itself such a text included."""

from __future__ import annotations

import math

from results_schema.rules.config_rule import (canonical_sha256, config_matches, non_finite_as_text,
                                             non_finite_from_text)


def test_non_finite_text_reads_back_to_the_floats() -> None:
    plain = {"a": [1.0, math.inf, -math.inf], "b": [2, "x"], "c": None, "d": {"e": math.inf}}
    text = non_finite_as_text(plain)
    assert text == {"a": [1.0, "inf", "-inf"], "b": [2, "x"], "c": None, "d": {"e": "inf"}}
    assert non_finite_from_text(text) == plain
    back = non_finite_from_text(non_finite_as_text({"n": math.nan}))["n"]
    assert isinstance(back, float) and math.isnan(back)


def test_canonical_sha256_is_over_sorted_keys_without_spaces() -> None:
    assert canonical_sha256({"b": 1, "a": [1.5, None]}) == canonical_sha256({"a": [1.5, None], "b": 1})
    assert canonical_sha256({"a": 1}) != canonical_sha256({"a": 1.0})


def test_a_string_that_is_itself_inf_still_matches_and_a_changed_value_does_not() -> None:
    plain = {"label": "inf", "rates": [4.0, math.inf], "nan": "nan"}
    text = non_finite_as_text(plain)
    assert text == {"label": "inf", "rates": [4.0, "inf"], "nan": "nan"}
    sha = canonical_sha256(plain)
    assert canonical_sha256(non_finite_from_text(text)) != sha  # the all-float reading is not it here
    assert config_matches(text, sha)
    assert not config_matches({**text, "rates": [4.0, "-inf"]}, sha)
    assert not config_matches({**text, "label": "x"}, sha)
