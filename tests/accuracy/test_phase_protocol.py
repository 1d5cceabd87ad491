"""The project runner's accuracy phase selects a registered protocol (``accuracy_protocol=``), with the
fake engine of tests/runners (no vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_schema.records.accuracy import AccuracyVerification
from results_schema.codec.io import read_json
from results_schema.records.protocols import protocol_spec
from runners.errors import EXIT_CONFIG, EXIT_OK

from tests.runners.helpers import compose_cfg
from tests.runners.test_accuracy_phase import protocols_of, run_accuracy


def test_reproduce_defaults_to_the_published_protocol() -> None:
    cfg = compose_cfg("+experiment=reproduce")
    assert cfg.phases["accuracy"].accuracy_protocol == "qwen-chat-v1"


@pytest.mark.heavy  # an accuracy run of the runner with analysis (16 s CPU)
def test_phase_runs_under_another_registered_protocol(tmp_path: Path, capsys) -> None:
    """``accuracy_protocol=boxed-chat-v1`` reaches every case, result and the verifier. The default protocol's
    run is asserted in ``tests/runners/test_accuracy_phase.py`` (its limited-mode run)."""
    code, run = run_accuracy(tmp_path / "b", "phases.accuracy.accuracy_protocol=boxed-chat-v1", run_id="b")
    assert code == EXIT_OK, capsys.readouterr().out
    assert protocols_of(run) == {(t, "boxed-chat-v1", protocol_spec("boxed-chat-v1", t).sha256())
                                 for t in ("gsm8k", "gpqa")}
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert report.passed and {c.protocol_name for c in report.cases} == {"boxed-chat-v1"}


def test_unknown_protocol_stops_before_any_process(tmp_path: Path, capsys) -> None:
    code, run = run_accuracy(tmp_path, "phases.accuracy.accuracy_protocol=qwen-chat-v2")
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG
    assert ("accuracy_protocol: unknown accuracy protocol 'qwen-chat-v2'; registered: boxed-chat-v1, "
            "boxed-chat-v2, chat-addition-v1, qwen-chat-v1") in out
    assert not run.exists()
