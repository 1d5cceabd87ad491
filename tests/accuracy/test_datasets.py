"""Local datasets: manifest, hash/row verification with named errors, real-format normalization."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from results_schema.records.accuracy import DatasetManifest
from results_schema.codec.files import file_sha256 as sha256_file
from runners.incase.accuracy.datasets import (
    DatasetError,
    GPQARow,
    load_dataset,
    normalize_row,
    read_rows,
)
from runners.incase.accuracy.materialize import materialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"
SHIPPED = Path(__file__).resolve().parents[2] / "eval_datasets" / "fixtures"


def _copy_shipped(tmp_path: Path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(SHIPPED, dst)
    return dst / "manifest.json"


def test_shipped_fixture_manifest_verifies_and_loads() -> None:
    entry, path, rows = load_dataset(SHIPPED / "manifest.json", "gsm8k")
    assert (entry.kind, entry.rows, len(rows)) == ("fixture", 8, 8)
    assert sha256_file(path) == entry.sha256
    answers = [r.answer for r in rows]
    assert any(a.endswith("#### -3") for a in answers) and any(a.endswith("#### 1,200") for a in answers)
    entry, _, rows = load_dataset(SHIPPED / "manifest.json", "gpqa")
    assert entry.rows == len(rows) == 12
    assert all(isinstance(r, GPQARow) and r.example_id.startswith("recFIXTURE") for r in rows)


def test_missing_file_names_path_and_expected_hash(tmp_path: Path) -> None:
    manifest = _copy_shipped(tmp_path)
    (manifest.parent / "gsm8k-fixture.jsonl").unlink()
    expected = DatasetManifest.model_validate_json(manifest.read_text()).entry("gsm8k-fixture").sha256
    with pytest.raises(DatasetError, match=rf"dataset file missing: .*gsm8k-fixture\.jsonl .*expected sha256 {expected}"):
        load_dataset(manifest, "gsm8k")


def test_hash_mismatch_names_expected_and_actual(tmp_path: Path) -> None:
    manifest = _copy_shipped(tmp_path)
    data = manifest.parent / "gpqa-fixture.jsonl"
    data.write_bytes(data.read_bytes().replace(b"photon", b"phonon"))
    expected = DatasetManifest.model_validate_json(manifest.read_text()).entry("gpqa-fixture").sha256
    with pytest.raises(DatasetError, match=rf"sha256 mismatch: expected {expected} .*actual {sha256_file(data)}"):
        load_dataset(manifest, "gpqa")


def test_missing_manifest_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset manifest not found: .*nope.json"):
        load_dataset(tmp_path / "nope.json", "gsm8k")


def test_unknown_dataset_lists_known_entries() -> None:
    with pytest.raises(DatasetError, match=r"no dataset named or of task 'mmlu'.*gsm8k-fixture"):
        load_dataset(SHIPPED / "manifest.json", "mmlu")


def test_title_case_and_snake_case_gpqa_columns_normalize_identically(tmp_path: Path) -> None:
    title = materialize("gpqa", tmp_path / "t", from_file=FIXTURES / "gpqa_diamond_sample.csv", kind="fixture")
    snake = materialize("gpqa", tmp_path / "s", from_file=FIXTURES / "gpqa_diamond_snake_sample.jsonl",
                        kind="fixture")
    rows_t = read_rows(tmp_path / "t" / title.path, "gpqa")
    rows_s = read_rows(tmp_path / "s" / snake.path, "gpqa")
    def stripped(rows):  # type: ignore[no-untyped-def]
        return [(r.question.strip(), tuple(o.strip() for o in r.options)) for r in rows]

    assert stripped(rows_t[:6]) == stripped(rows_s)
    assert rows_t[0].options[0] == " The photon\n"  # texts kept as stored (qwen-chat-v1 uses them verbatim)
    assert rows_t[0].raw["Correct Answer"] == " The photon\n"


def test_materialize_is_reproducible_and_refuses_wrong_full_count(tmp_path: Path) -> None:
    a = materialize("gsm8k", tmp_path / "a", from_file=FIXTURES / "gsm8k_sample.jsonl", kind="fixture")
    b = materialize("gsm8k", tmp_path / "b", from_file=FIXTURES / "gsm8k_sample.jsonl", kind="fixture")
    assert a.sha256 == b.sha256
    with pytest.raises(DatasetError, match="full split must have 1319 rows, got 8"):
        materialize("gsm8k", tmp_path / "c", from_file=FIXTURES / "gsm8k_sample.jsonl", revision="abc")
    with pytest.raises(DatasetError, match="--revision"):
        materialize("gsm8k", tmp_path / "d", from_file=FIXTURES / "gsm8k_sample.jsonl")


def test_full_dataset_entry_requires_full_row_count() -> None:
    with pytest.raises(ValueError, match="must have 198 rows"):
        DatasetManifest.model_validate({"datasets": [{
            "name": "gpqa_diamond", "task": "gpqa", "kind": "full", "source": "Idavidrein/gpqa",
            "config": "gpqa_diamond", "revision": "x", "split": "train", "path": "g.jsonl", "rows": 12,
            "sha256": "0" * 64}]})


def test_malformed_gsm8k_row_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": ""}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: missing or empty field 'answer'"):
        read_rows(bad, "gsm8k")


def test_gsm8k_gold_without_a_number_is_a_malformed_row_under_each_protocol() -> None:
    from results_schema.records.protocols import protocol_spec
    from runners.incase.accuracy.protocol import render_row

    row = normalize_row("gsm8k", 4, {"question": "q", "answer": "no number at all"})
    with pytest.raises(DatasetError, match="row 4: GSM8K answer has no number"):
        render_row(protocol_spec("qwen-chat-v1", "gsm8k"), row)
    with pytest.raises(DatasetError, match="row 4: GSM8K answer has no '#### N' marker"):
        render_row(protocol_spec("boxed-chat-v1", "gsm8k"), row)


def test_materialized_jsonl_has_sorted_keys_and_compact_separators(tmp_path: Path) -> None:
    entry = materialize("gpqa", tmp_path, from_file=FIXTURES / "gpqa_diamond_sample.csv", kind="fixture")
    lines = (tmp_path / entry.path).read_text(encoding="utf-8").splitlines()
    for line in lines:
        obj = json.loads(line)
        assert line == json.dumps(obj, sort_keys=True, separators=(",", ":"))
    manifest = json.loads((tmp_path / "manifest.json").read_text())["datasets"][0]
    assert {k: manifest[k] for k in ("source", "config", "split", "revision", "rows")} == {
        "source": "fixture", "config": "gpqa_diamond", "split": "train", "revision": "local", "rows": len(lines)}
    assert manifest["sha256"] == sha256_file(tmp_path / entry.path)


def test_gpqa_row_missing_option_names_column() -> None:
    with pytest.raises(DatasetError, match="missing or empty field 'incorrect_answer_3'"):
        normalize_row("gpqa", 0, {"Question": "q", "Correct Answer": "a", "Incorrect Answer 1": "b",
                                  "Incorrect Answer 2": "c"})


def test_non_finite_constant_in_dataset_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1", "x": NaN}\n')
    with pytest.raises(DatasetError, match="non-finite constant 'NaN'"):
        read_rows(bad, "gsm8k")


def test_materialize_cli_writes_manifest(tmp_path: Path) -> None:
    from runners.incase.accuracy.cli import main

    rc = main(["materialize", "--task", "gsm8k", "--out-dir", str(tmp_path), "--from-file",
               str(FIXTURES / "gsm8k_sample.jsonl"), "--kind", "fixture", "--name", "g"])
    assert rc == 0
    manifest = DatasetManifest.model_validate_json((tmp_path / "manifest.json").read_text())
    assert manifest.entry("g").rows == 8


def test_committed_addition_set_is_every_digit_pair_once_and_regenerates_byte_identical(tmp_path):
    from runners.incase.accuracy.synthetic import ADDITION_NAME, addition_rows, write_addition_set

    committed = Path(__file__).resolve().parents[2] / "eval_datasets" / "addition"
    entry = write_addition_set(tmp_path)
    assert entry.name == ADDITION_NAME == "single-digit-addition" and entry.task == "addition" and entry.rows == 100
    assert (tmp_path / f"{ADDITION_NAME}.jsonl").read_bytes() == (committed / f"{ADDITION_NAME}.jsonl").read_bytes()
    assert (tmp_path / "manifest.json").read_text() == (committed / "manifest.json").read_text()
    qs = {r["question"] for r in addition_rows()}
    assert qs == {f"What is {a} + {b}?" for a in range(10) for b in range(10)}
