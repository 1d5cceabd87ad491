"""Local evaluation datasets: hash manifest, verified loading, row normalization.

What is modelled: a dataset is one JSONL file declared in a ``manifest.json``
(:class:`results_schema.records.accuracy.DatasetManifest`: source, revision, split, row
count, SHA-256). Loading checks existence, SHA-256 and row count *before* any
row is parsed and fails with a message naming the file and the expected and
actual values. Rows are read from the real public formats, texts kept exactly as
stored (the protocol decides what to strip and how to read a gold answer):

* GSM8K (``openai/gsm8k``, config ``main``, split ``test``): ``question``,
  ``answer`` ending in ``#### N``. Rows of the task ``addition`` (generated,
  ``runners.incase.accuracy.synthetic.addition_rows``) have the same two columns.
* GPQA Diamond (``Idavidrein/gpqa``, config ``gpqa_diamond``, split ``train``):
  title-case CSV columns (``Question``, ``Correct Answer``, ``Incorrect Answer 1``
  .. ``3``, ``Record ID``) or their snake-case variants (``question``,
  ``correct_answer``, ``incorrect_answer_1`` ..); both spellings give the same row.

Nothing here downloads at run time; ``runners.incase.accuracy.materialize`` writes dataset
files and manifest entries.

What is deliberately not modelled: other splits or benchmarks, dataset
licensing/gating (GPQA is gated: accept its terms on the hub first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from results_schema.records.accuracy import DatasetEntry, DatasetManifest
from results_schema.codec.files import file_sha256

QUESTION_ANSWER_TASKS = ("gsm8k", "addition")
"""Tasks whose rows are GSM8K-format ``question`` / ``answer`` rows (:class:`GSM8KRow`)."""


class DatasetError(ValueError):
    """A dataset file is missing, has the wrong hash or row count, or holds a malformed row."""


@dataclass(frozen=True)
class GSM8KRow:
    """One GSM8K row; texts exactly as stored (the protocol decides what to strip and how to read the gold)."""

    index: int
    example_id: str
    question: str
    answer: str
    raw: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class GPQARow:
    """One GPQA row: ``options[0]`` is the correct answer, 1..3 the incorrect ones (texts as stored)."""

    index: int
    example_id: str
    question: str
    options: tuple[str, str, str, str]
    raw: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


Row = GSM8KRow | GPQARow


def load_manifest(path: Path | str) -> DatasetManifest:
    """Read and validate ``manifest.json``.

    Raises:
        DatasetError: missing file, invalid JSON or schema violation (message names the path).
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset manifest not found: {path}")
    try:
        return DatasetManifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise DatasetError(f"invalid dataset manifest {path}: {exc}") from exc


def select_entry(manifest: DatasetManifest, dataset: str) -> DatasetEntry:
    """The entry named ``dataset``, or the single entry whose task is ``dataset``.

    Raises:
        DatasetError: no match, or several entries for that task (name one explicitly).
    """
    for entry in manifest.datasets:
        if entry.name == dataset:
            return entry
    matches = [e for e in manifest.datasets if e.task == dataset]
    if len(matches) == 1:
        return matches[0]
    known = [f"{e.name} ({e.task})" for e in manifest.datasets]
    if not matches:
        raise DatasetError(f"no dataset named or of task {dataset!r} in manifest; known: {known}")
    raise DatasetError(f"several datasets of task {dataset!r} in manifest ({known}); pass an entry name")


def verify_file(manifest_path: Path, entry: DatasetEntry) -> Path:
    """Check that the entry's file exists and matches its SHA-256 and row count.

    Returns:
        Absolute path of the verified file.

    Raises:
        DatasetError: naming the path and the expected/actual hash or row count.
    """
    path = (Path(manifest_path).parent / entry.path).resolve()
    if not path.is_file():
        raise DatasetError(
            f"dataset file missing: {path} (manifest entry {entry.name!r}, expected sha256 {entry.sha256}); "
            f"materialize it with `python -m runners.incase.accuracy materialize` on a machine with the data"
        )
    actual = file_sha256(path)
    if actual != entry.sha256:
        raise DatasetError(
            f"dataset file {path} sha256 mismatch: expected {entry.sha256} (manifest entry {entry.name!r}), "
            f"actual {actual}"
        )
    rows = sum(1 for line in path.read_bytes().splitlines() if line.strip())
    if rows != entry.rows:
        raise DatasetError(f"dataset file {path} has {rows} rows, manifest entry {entry.name!r} says {entry.rows}")
    return path


def _normalize_key(key: str) -> str:
    return "_".join(key.strip().lower().replace("-", " ").split())


def _field(row: dict[str, object], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: missing or empty field {key!r} (columns: {sorted(row)})")
    return value


def normalize_row(task: str, index: int, raw: dict[str, object], where: str = "") -> Row:
    """Read one raw JSON row of ``task`` (see module docstring for accepted columns).

    Column names are matched case-insensitively with spaces, dashes and underscores
    equivalent (``Correct Answer`` == ``correct_answer``); texts are kept as stored.

    Raises:
        DatasetError: not an object, missing or empty column (message names the column and the columns present).
    """
    where = where or f"row {index}"
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    row = {_normalize_key(str(k)): v for k, v in raw.items()}
    if task in QUESTION_ANSWER_TASKS:
        return GSM8KRow(index=index, example_id=f"row-{index}", question=_field(row, "question", where),
                        answer=_field(row, "answer", where), raw=dict(raw))
    if task == "gpqa":
        question = _field(row, "question", where)
        options = (
            _field(row, "correct_answer", where),
            _field(row, "incorrect_answer_1", where),
            _field(row, "incorrect_answer_2", where),
            _field(row, "incorrect_answer_3", where),
        )
        record_id = row.get("record_id")
        example_id = record_id.strip() if isinstance(record_id, str) and record_id.strip() else f"row-{index}"
        return GPQARow(index=index, example_id=example_id, question=question, options=options, raw=dict(raw))
    raise DatasetError(f"unknown task {task!r}; expected one of {', '.join(QUESTION_ANSWER_TASKS)}, gpqa")


def _reject_constant(name: str) -> object:
    raise ValueError(f"non-finite constant {name!r} is not allowed")


def read_rows(path: Path, task: str) -> list[Row]:
    """Parse every JSON line of ``path`` as a ``task`` row (strict JSON, objects only)."""
    rows: list[Row] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            raw = json.loads(line, parse_constant=_reject_constant)
        except (json.JSONDecodeError, ValueError) as exc:
            raise DatasetError(f"{where}: invalid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise DatasetError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        rows.append(normalize_row(task, len(rows), raw, where))
    return rows


def load_dataset(manifest_path: Path | str, dataset: str) -> tuple[DatasetEntry, Path, list[Row]]:
    """Verified load: manifest entry, absolute file path and normalized rows.

    Args:
        manifest_path: ``manifest.json``.
        dataset: entry name, or a task with exactly one entry.

    Raises:
        DatasetError: see :func:`verify_file` and :func:`normalize_row`.
    """
    manifest_path = Path(manifest_path).resolve()
    entry = select_entry(load_manifest(manifest_path), dataset)
    path = verify_file(manifest_path, entry)
    return entry, path, read_rows(path, entry.task)
