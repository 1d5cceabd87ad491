"""``AccuracyCaseRun``: the typed completion line of an accuracy case (``<phase>-accuracy-cases.jsonl``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from results_schema.records.accuracy import AccuracyCaseRun, AccuracyTaskOutcome
from results_schema.cli import check_paths
from results_schema.records.dispatch import kind_for
from results_schema.codec.io import dumps_model
from results_schema.records.identity import OffloadSetting

SHA = "a" * 64


def outcome(task: str = "gsm8k", **kw) -> AccuracyTaskOutcome:
    base = dict(task=task, mode="limited", protocol_name="qwen-chat-v1", protocol_sha256=SHA, result_path=f"records/accuracy/baseline-r0/baseline.{task}.result.json",
                result_sha256=SHA, examples_sha256=SHA, num_examples=8, correct=2, unparsable=1, accuracy=0.25)
    base.update(kw)
    return AccuracyTaskOutcome(**base)


def line(**kw) -> AccuracyCaseRun:
    base = dict(phase="accuracy", label="baseline", implementation="baseline", repeat=0,
                offload=OffloadSetting(offload_group_size=0, offload_num_in_group=0), tasks=("gsm8k", "gpqa"),
                results=(outcome("gsm8k"), outcome("gpqa")), limit=None, dataset_manifest_path="/m/manifest.json",
                dataset_manifest_sha256=SHA, process_wall_s=1.5, log_path="logs/accuracy/baseline-r0.log",
                evidence_path="evidence/accuracy/baseline-r0.json", command=("python", "-m", "runners.incase.accuracy"))
    base.update(kw)
    return AccuracyCaseRun(**base)


def test_round_trip_is_strict_and_frozen() -> None:
    x = line()
    assert AccuracyCaseRun.model_validate_json(dumps_model(x)) == x
    with pytest.raises(ValidationError):
        AccuracyCaseRun.model_validate({**x.model_dump(mode="json"), "extra": 1})
    with pytest.raises(ValidationError):
        AccuracyCaseRun.model_validate({**x.model_dump(mode="json"), "schema_version": 1})
    with pytest.raises(ValidationError):
        x.label = "other"  # type: ignore[misc]


@pytest.mark.parametrize("kw, msg", [
    (dict(results=(outcome("gpqa"), outcome("gsm8k"))), "results are for tasks"),
    (dict(tasks=("gsm8k", "gsm8k"), results=(outcome(), outcome())), "duplicate task"),
    (dict(tasks=(), results=()), "no task"),
    (dict(implementation="current"), "requires an enabled offload"),
    (dict(offload=OffloadSetting(offload_group_size=4, offload_num_in_group=1)), "must not request offload"),
])
def test_inconsistent_lines_are_rejected(kw, msg) -> None:
    with pytest.raises(ValidationError, match=msg):
        line(**kw)


def test_outcome_counts_are_checked() -> None:
    with pytest.raises(ValidationError, match="accuracy"):
        outcome(accuracy=0.5)
    with pytest.raises(ValidationError, match="unparsable"):
        outcome(correct=8, unparsable=1, accuracy=1.0)


def test_dispatch_and_check(tmp_path: Path, capsys) -> None:
    assert kind_for("run/accuracy-accuracy-cases.jsonl").load_model() is AccuracyCaseRun
    assert kind_for("run/same_runtime-runs.jsonl").load_model().__name__ == "CaseRun"
    good = tmp_path / "accuracy-accuracy-cases.jsonl"
    good.write_text(dumps_model(line()) + "\n")
    assert check_paths([good]) == 0
    bad = tmp_path / "other-accuracy-cases.jsonl"
    bad.write_text(dumps_model(line()).replace('"repeat":0', '"repeat":-1') + "\n")
    assert check_paths([bad]) == 1
    assert "repeat" in capsys.readouterr().out
