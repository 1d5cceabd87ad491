"""The task ``addition`` and its protocol ``chat-addition-v1``: named as ours, rendered exactly as the research
probe rendered the set (qwen-chat-v1's GSM8K rendering), refused under any protocol that does not define it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results_schema.records.accuracy import DatasetEntry
from results_schema.records.protocols import (
    REGISTRY,
    UnknownProtocolError,
    default_protocol,
    protocol_spec,
    protocols_of,
)
from runners.errors import PlanError
from runners.incase.accuracy.cli import main
from runners.incase.accuracy.datasets import DatasetError, GSM8KRow, load_dataset, normalize_row
from runners.incase.accuracy.materialize import materialize
from runners.incase.accuracy.protocol import parse_reply, render_row
from runners.planning.plan import plan
from tests.runners.helpers import compose_real

REPO = Path(__file__).resolve().parents[2]
ADDITION_MANIFEST = REPO / "eval_datasets" / "addition" / "manifest.json"
ADDITION = "chat-addition-v1"


def test_committed_addition_set_is_task_addition_and_loads_as_question_answer_rows() -> None:
    entry, _, rows = load_dataset(ADDITION_MANIFEST, "addition")
    assert (entry.name, entry.task, entry.kind, entry.source, entry.config) == (
        "single-digit-addition", "addition", "fixture", "generated", None)
    assert len(rows) == 100 and all(isinstance(r, GSM8KRow) for r in rows)


def test_every_addition_prompt_is_the_qwen_chat_gsm8k_rendering_byte_for_byte() -> None:
    """The research probe's 88/100 was measured with qwen-chat-v1's GSM8K rendering of these rows."""
    ours, published = protocol_spec(ADDITION, "addition"), protocol_spec("qwen-chat-v1", "gsm8k")
    _, _, rows = load_dataset(ADDITION_MANIFEST, "addition")
    for row in rows:
        got = render_row(ours, row)
        want = render_row(published, normalize_row("gsm8k", row.index, dict(row.raw)))
        assert (got.system, got.user, got.gold, got.order) == (want.system, want.user, want.gold, want.order)
    first = render_row(ours, rows[0])
    assert first.user.endswith("\n\nQuestion:\nWhat is 7 + 1?") and first.gold == "8"
    assert (ours.sampling, ours.engine, ours.extraction_patterns) == (
        published.sampling, published.engine, published.extraction_patterns)


@pytest.mark.parametrize(("reply", "parsed"), [
    ("7 + 1 = 8\nThe answer is 8.", "8"), ("The sum is 13.", "13"), ("#### 1,0", "10"), ("eight", None)])
def test_addition_replies_parse_as_qwen_chat_gsm8k_replies(reply: str, parsed: str | None) -> None:
    assert parse_reply(protocol_spec(ADDITION, "addition"), reply) == parsed
    assert parse_reply(protocol_spec("qwen-chat-v1", "gsm8k"), reply) == parsed


@pytest.mark.parametrize(("reply", "parsed"), [
    ("#### 3\nthen #### 4", "4"),  # the text after the last ####
    ("1 then 2 then 3", "3"),  # the last number
    ("The answer is 1,234.", "1234"),  # commas dropped
    ("The answer is 12.50", "12.5"), ("The answer is 7.0", "7"),  # decimal normal form
    ("no number at all", None),  # unparsable
])
def test_addition_replies_parse_by_the_last_number_after_the_last_marker(reply: str, parsed: str | None) -> None:
    assert parse_reply(protocol_spec(ADDITION, "addition"), reply) == parsed


def test_the_protocol_is_its_own_spec_with_qwen_chat_gsm8k_texts_and_pins() -> None:
    """Only its names (and so its SHA-256) differ from qwen-chat-v1's GSM8K spec: greedy, 512 new tokens, eager,
    max_model_len 4096, memory utilisation 0.5, the same texts and pattern."""
    ours, published = protocol_spec(ADDITION, "addition"), protocol_spec("qwen-chat-v1", "gsm8k")
    assert {k for k, v in dict(ours).items() if v != dict(published)[k]} == {"name", "task", "answer_extraction"}
    assert ours.sha256() != published.sha256()
    assert (ours.sampling.temperature, ours.sampling.max_tokens) == (0.0, 512)
    assert (ours.engine.enforce_eager, ours.engine.max_model_len, ours.engine.gpu_memory_utilization) == (True, 4096, 0.5)


def test_each_protocol_defines_only_its_tasks_and_says_where_a_task_lives() -> None:
    assert set(REGISTRY[ADDITION]) == {"addition"} and protocols_of("addition") == (ADDITION,)
    assert "addition" not in REGISTRY["qwen-chat-v1"] and "addition" not in REGISTRY["boxed-chat-v1"]
    with pytest.raises(UnknownProtocolError, match=r"unknown task 'addition' for protocol 'qwen-chat-v1'; expected "
                                                   r"one of \['gpqa', 'gsm8k'\]; task 'addition' is defined by "
                                                   r"protocol chat-addition-v1"):
        protocol_spec("qwen-chat-v1", "addition")
    with pytest.raises(UnknownProtocolError, match=r"unknown task 'gsm8k' for protocol 'chat-addition-v1'; expected "
                                                   r"one of \['addition'\]; task 'gsm8k' is defined by protocol "
                                                   r"boxed-chat-v1, boxed-chat-v2, qwen-chat-v1"):
        protocol_spec(ADDITION, "gsm8k")
    assert (default_protocol("gsm8k"), default_protocol("addition")) == ("qwen-chat-v1", ADDITION)


@pytest.mark.parametrize(("overrides", "needle"), [
    (("phases.accuracy.accuracy_protocol=qwen-chat-v1",),
     "accuracy_tasks: unknown task 'addition' for protocol 'qwen-chat-v1'"),
    (("phases.accuracy.accuracy_tasks=[gsm8k]",), "accuracy_tasks: unknown task 'gsm8k' for protocol 'chat-addition-v1'"),
])
def test_smollm2_accuracy_refuses_a_pair_the_registry_does_not_define_at_planning(overrides: tuple[str, ...],
                                                                                  needle: str) -> None:
    with pytest.raises(PlanError, match="phase 'accuracy': " + needle):
        plan(compose_real("+experiment=smollm2_accuracy", *overrides))


@pytest.mark.parametrize("experiment", ["smollm2_accuracy", "smollm2_negative_control"])
def test_smollm2_accuracy_experiments_plan_task_addition_under_chat_addition_v1(experiment: str) -> None:
    cases = [sc.case for sc in plan(compose_real(f"+experiment={experiment}")) if sc.case.kind == "accuracy"]
    assert cases and {(tuple(c.accuracy_tasks), c.accuracy_protocol) for c in cases} == {(("addition",), ADDITION)}


def test_a_full_addition_split_or_one_from_the_hub_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="task addition has no published full split"):
        DatasetEntry(name="a", task="addition", kind="full", source="x", revision="r", split="test", path="a.jsonl",
                     rows=100, sha256="0" * 64)
    with pytest.raises(DatasetError, match="task 'addition' is generated by this project"):
        materialize("addition", tmp_path, revision="r", kind="fixture")


def test_cli_renders_an_addition_row_and_refuses_it_under_qwen_chat(capsys: pytest.CaptureFixture[str]) -> None:
    row = json.dumps({"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"})
    assert main(["render", "--protocol", ADDITION, "--task", "addition", "--row", row]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gold"] == "5" and out["user"].endswith("Question:\nWhat is 2 + 3?")
    assert main(["render", "--task", "addition", "--row", row]) == 2
    assert "unknown task 'addition' for protocol 'qwen-chat-v1'" in capsys.readouterr().err


def test_a_fake_engine_run_of_task_addition_reaches_results_csv_and_example_table(tmp_path: Path,
                                                                                 tiny_model_dir: Path) -> None:
    from analysis.accuracy.table import render_csv
    from analysis.accuracy.verifier import render_markdown, verify
    from results_schema.records.accuracy import AccuracyResult
    from results_schema.codec.io import read_json

    from .conftest import make_run, offload

    run = make_run(tmp_path / "r", tiny_model_dir, manifest=ADDITION_MANIFEST, datasets=("addition",),
                   cases=(("baseline", offload()), ("current", offload(2, 1))), limit=5, protocol=ADDITION)
    result = read_json(run / "cases" / "baseline.addition.result.json", AccuracyResult)
    assert (result.task, result.protocol_name, result.dataset.name) == ("addition", ADDITION, "single-digit-addition")
    report = verify(run, limit=5)
    assert report.passed and {(c.task, c.protocol_name) for c in report.cases} == {("addition", ADDITION)}
    assert [row.split(",")[6] for row in render_csv(report).splitlines()[1:]] == ["addition", "addition"]
    assert [(s.task, s.question, s.gold) for s in report.samples] == [
        ("addition", "What is 7 + 1?", "8"), ("addition", "What is 8 + 5?", "13"), ("addition", "What is 3 + 0?", "3")]
    assert "| addition | 0 | What is 7 + 1? | 8 | baseline |" in render_markdown(report)
