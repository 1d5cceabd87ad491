"""results_schema.records.accuracy: strict, frozen, finite, self-consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from results_schema.records.accuracy import (
    AccuracyExample,
    AccuracyResult,
    AccuracyVerification,
    DatasetManifest,
)
from results_schema.codec.io import dumps_model, read_json

from .conftest import make_run


@pytest.fixture
def result_path(tmp_path: Path, tiny_model_dir: Path) -> Path:
    make_run(tmp_path / "r", tiny_model_dir, datasets=("gpqa",), cases=(("baseline", __import__(
        "tests.accuracy.conftest", fromlist=["offload"]).offload()),))
    return tmp_path / "r" / "cases" / "baseline.gpqa.result.json"


def _data(path: Path) -> dict:
    return json.loads(path.read_text())


def test_result_round_trips_strictly(result_path: Path) -> None:
    r = read_json(result_path, AccuracyResult)
    assert AccuracyResult.model_validate_json(dumps_model(r)) == r
    with pytest.raises(ValidationError):
        r.accuracy = 1.0  # type: ignore[misc]  # frozen


@pytest.mark.parametrize(
    ("update", "match"),
    [
        ({"unexpected": 1}, "Extra inputs are not permitted"),
        ({"accuracy": float("nan")}, "finite number"),
        ({"accuracy": 0.5}, "accuracy 0.5 != correct/num_examples"),
        ({"schema_version": 1}, "Input should be 2"),
        ({"protocol_sha256": "a" * 64}, "does not match the protocol"),
        ({"num_examples": 5, "correct": 0, "unparsable": 0, "accuracy": 0.0, "parsed": 5, "length_limited": 0,
          "finish_reasons": {"stop": 5}}, "num_examples \\(5\\) != expected 12"),
        ({"parsed": 0}, "parsed \\(0\\) != num_examples - unparsable"),
        ({"finish_reasons": {"stop": 1}}, "do not add up to num_examples"),
        ({"length_limited": 3}, "length_limited \\(3\\) != finish_reasons"),
        ({"protocol_name": "boxed-chat-v1"}, "protocol_name 'boxed-chat-v1' != protocol.name 'qwen-chat-v1'"),
        ({"protocol_name": "Qwen Chat"}, "String should match pattern"),
        ({"mode": "formal"}, "mode 'formal' inconsistent"),
        ({"implementation": "current"}, "requires an enabled offload setting"),
    ],
)
def test_result_rejects_inconsistent_or_unknown_fields(result_path: Path, update: dict, match: str) -> None:
    data = _data(result_path)
    data.update(update)
    if "accuracy" in update and update["accuracy"] == 0.5:
        data["correct"] = 0
    with pytest.raises(ValidationError, match=match):
        AccuracyResult.model_validate(data)


def test_example_rejects_wrong_gold_position_and_parsed_flag_mismatch() -> None:
    base = dict(index=0, example_id="r0", row={"Question": "q"}, prompt_sha256="0" * 64, prompt_tokens=3, gold="B",
                option_order=(1, 0, 2, 3), parsed="B", correct=True, unparsable=False, output_tokens=1,
                output_token_sha256="0" * 64, finish_reason="stop", output_text="B")
    AccuracyExample(**base)
    with pytest.raises(ValidationError, match="gold 'C' but correct option sits at B"):
        AccuracyExample(**{**base, "gold": "C", "parsed": "C"})
    with pytest.raises(ValidationError, match="unparsable"):
        AccuracyExample(**{**base, "unparsable": True})
    with pytest.raises(ValidationError, match="correct=True but parsed"):
        AccuracyExample(**{**base, "parsed": "A"})


def test_manifest_rejects_duplicates_and_escaping_paths() -> None:
    entry = {"name": "g", "task": "gsm8k", "kind": "fixture", "source": "fixture", "revision": "v1",
             "split": "test", "path": "g.jsonl", "rows": 1, "sha256": "0" * 64}
    with pytest.raises(ValidationError, match="duplicate dataset names"):
        DatasetManifest.model_validate({"datasets": [entry, entry]})
    with pytest.raises(ValidationError, match="must be relative"):
        DatasetManifest.model_validate({"datasets": [{**entry, "path": "../g.jsonl"}]})
    with pytest.raises(ValidationError, match="pattern"):
        DatasetManifest.model_validate({"datasets": [{**entry, "sha256": "XYZ"}]})


@pytest.mark.parametrize("model", [AccuracyResult, AccuracyExample, DatasetManifest, AccuracyVerification])
def test_json_schema_exports_with_descriptions(model: type) -> None:
    schema = model.model_json_schema()
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    described = [k for k, v in props.items() if "description" in v or "$ref" in v or "allOf" in v]
    assert len(described) >= len(props) - 3  # nested model refs carry their own descriptions
