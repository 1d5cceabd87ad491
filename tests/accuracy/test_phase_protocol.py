"""The project runner's accuracy phase selects a registered protocol (``accuracy_protocol=``), with the
fake engine of tests/runners (no vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_schema.accuracy import AccuracyCaseRun, AccuracyResult, AccuracyVerification
from results_schema.case import CaseSpec
from results_schema.io import read_json, read_jsonl
from results_schema.protocols import protocol_spec
from runners.errors import EXIT_CONFIG, EXIT_OK

from tests.runners.helpers import compose_cfg
from tests.runners.test_accuracy_phase import run_accuracy


def test_reproduce_defaults_to_the_published_protocol() -> None:
    cfg = compose_cfg("+experiment=reproduce")
    assert cfg.phases["accuracy"].accuracy_protocol == "qwen-chat-v1"


def _protocols(run: Path) -> set[tuple[str, str, str]]:
    out = set()
    for line in read_jsonl(run / "accuracy-accuracy-cases.jsonl", AccuracyCaseRun):
        case = read_json(line.command[line.command.index("--case") + 1], CaseSpec)  # the case file it ran
        assert case.accuracy is not None and case.accuracy.protocol in ("qwen-chat-v1", "boxed-chat-v1")
        for o in line.results:
            r = read_json(run / o.result_path, AccuracyResult)
            assert (r.protocol_name, r.protocol_sha256) == (o.protocol_name, o.protocol_sha256)
            assert r.protocol == protocol_spec(r.protocol_name, r.task)
            out.add((o.task, o.protocol_name, o.protocol_sha256))
    return out


@pytest.mark.heavy  # two accuracy runs of the runner with analysis (32 s CPU)
def test_phase_runs_under_the_default_and_under_another_registered_protocol(tmp_path: Path, capsys) -> None:
    code, run = run_accuracy(tmp_path / "q", run_id="q")
    assert code == EXIT_OK, capsys.readouterr().out
    assert _protocols(run) == {(t, "qwen-chat-v1", protocol_spec("qwen-chat-v1", t).sha256())
                               for t in ("gsm8k", "gpqa")}
    code, run = run_accuracy(tmp_path / "b", "phases.accuracy.accuracy_protocol=boxed-chat-v1", run_id="b")
    assert code == EXIT_OK, capsys.readouterr().out
    assert _protocols(run) == {(t, "boxed-chat-v1", protocol_spec("boxed-chat-v1", t).sha256())
                               for t in ("gsm8k", "gpqa")}
    report = read_json(run / "summary" / "accuracy-verification.json", AccuracyVerification)
    assert report.passed and {c.protocol_name for c in report.cases} == {"boxed-chat-v1"}


def test_unknown_protocol_stops_before_any_process(tmp_path: Path, capsys) -> None:
    code, run = run_accuracy(tmp_path, "phases.accuracy.accuracy_protocol=qwen-chat-v2")
    out = capsys.readouterr().out
    assert code == EXIT_CONFIG
    assert "accuracy_protocol: unknown accuracy protocol 'qwen-chat-v2'; registered: boxed-chat-v1, qwen-chat-v1" in out
    assert not run.exists()
