"""Local evaluation datasets: hash manifest, verified loading, row normalization, materialize.

What is modelled: a dataset is one JSONL file declared in a ``manifest.json``
(:class:`results_schema.accuracy.DatasetManifest`: source, revision, split, row
count, SHA-256). Loading checks existence, SHA-256 and row count *before* any
row is parsed and fails with a message naming the file and the expected and
actual values. Rows are read from the real public formats, texts kept exactly as
stored (the protocol decides what to strip and how to read a gold answer):

* GSM8K (``openai/gsm8k``, config ``main``, split ``test``): ``question``,
  ``answer`` ending in ``#### N``.
* GPQA Diamond (``Idavidrein/gpqa``, config ``gpqa_diamond``, split ``train``):
  title-case CSV columns (``Question``, ``Correct Answer``, ``Incorrect Answer 1``
  .. ``3``, ``Record ID``) or their snake-case variants (``question``,
  ``correct_answer``, ``incorrect_answer_1`` ..); both spellings give the same row.

Nothing here downloads at run time. ``materialize`` (CLI:
``python -m runners.accuracy materialize``) writes a manifest entry from a local
file, or -- only on a machine with hub access and the optional ``datasets``
package -- from the hub: one ``json.dumps(row, sort_keys=True, separators=(",", ":"))``
line per row, and a manifest entry with source (name), config (subset), revision,
split, row count and SHA-256.

What is deliberately not modelled: other splits or benchmarks, dataset
licensing/gating (GPQA is gated: accept its terms on the hub first).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from results_schema.accuracy import FULL_ROW_COUNTS, DatasetEntry, DatasetManifest

HUB_SOURCES: dict[str, dict[str, str]] = {
    "gsm8k": {"source": "openai/gsm8k", "config": "main", "split": "test", "name": "gsm8k"},
    "gpqa": {"source": "Idavidrein/gpqa", "config": "gpqa_diamond", "split": "train", "name": "gpqa_diamond"},
}
"""Where the full evaluation splits live on the Hugging Face hub."""


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


def sha256_file(path: Path) -> str:
    """SHA-256 (lowercase hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
            f"materialize it with `python -m runners.accuracy materialize` on a machine with the data"
        )
    actual = sha256_file(path)
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
    if task == "gsm8k":
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
    raise DatasetError(f"unknown task {task!r}; expected gsm8k or gpqa")


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


# ---------------------------------------------------------------- materialize


def _records_from_file(path: Path) -> list[dict[str, object]]:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise DatasetError(f"{path}: expected JSON objects per line")
                out.append(obj)
        return out
    if suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return [dict(r) for r in csv.DictReader(f)]
    if suffix == ".parquet":
        import pandas as pd  # optional: needs pyarrow or fastparquet

        frame = pd.read_parquet(path)
        frame = frame.astype(object).where(frame.notna(), None)  # pandas' NaN for a missing cell -> null
        return [dict(r) for r in frame.to_dict(orient="records")]
    raise DatasetError(f"{path}: unsupported input format {suffix!r} (use .jsonl, .csv or .parquet)")


def _records_from_hub(task: str, revision: str | None) -> tuple[list[dict[str, object]], str]:
    """Fetch the full split from the hub (needs network and the optional ``datasets`` package)."""
    try:
        import datasets as hf_datasets  # optional dependency, never used at run time
        from huggingface_hub import HfApi
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise DatasetError(
            "materialize from the hub needs the optional 'datasets' package and network access; "
            "alternatively pass --from-file with a local copy"
        ) from exc
    src = HUB_SOURCES[task]  # pragma: no cover - network
    resolved = revision or HfApi().dataset_info(src["source"]).sha  # pragma: no cover
    ds = hf_datasets.load_dataset(src["source"], src["config"], split=src["split"], revision=resolved)  # pragma: no cover
    return [dict(r) for r in ds], str(resolved)  # pragma: no cover


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def jsonl_line(record: dict[str, object]) -> str:
    """One materialized row: ``json.dumps(sort_keys=True, separators=(",", ":"))`` + newline (finite numbers only).

    Raises:
        DatasetError: a non-finite number (NaN / inf) in the row.
    """
    try:
        return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    except ValueError as exc:
        raise DatasetError(f"row {record!r:.120}: {exc}") from None


def materialize(
    task: str,
    out_dir: Path | str,
    *,
    from_file: Path | str | None = None,
    revision: str | None = None,
    name: str | None = None,
    kind: str = "full",
) -> DatasetEntry:
    """Write ``<out_dir>/<name>.jsonl`` and add/replace its entry in ``<out_dir>/manifest.json``.

    Every row is checked first (a malformed row, or a GSM8K answer without a number under
    the default protocol, stops the write). The JSONL keeps the source columns and texts
    as they are, one ``json.dumps(row, sort_keys=True, separators=(",", ":"))`` object per
    line (:func:`jsonl_line`), so the SHA-256 is reproducible from the same source rows.

    Args:
        task: gsm8k or gpqa.
        out_dir: directory of the manifest and the JSONL.
        from_file: local .jsonl/.csv/.parquet copy; None = fetch from the hub (network).
        revision: hub commit the rows came from (required with ``from_file`` for ``kind='full'``).
        name: entry name (default: gsm8k / gpqa_diamond).
        kind: 'full' (row count must be 1319 / 198) or 'fixture'.

    Returns:
        The manifest entry written.

    Raises:
        DatasetError: bad rows, wrong row count for 'full', missing revision.
    """
    if task not in HUB_SOURCES:
        raise DatasetError(f"unknown task {task!r}; expected one of {sorted(HUB_SOURCES)}")
    src = HUB_SOURCES[task]
    out_dir = Path(out_dir)
    if from_file is not None:
        records = _records_from_file(Path(from_file))
        if revision is None:
            if kind == "full":
                raise DatasetError("--revision (the hub commit of the copy) is required with --from-file for kind full")
            revision = "local"
    else:
        records, revision = _records_from_hub(task, revision)
    from results_schema.protocols import DEFAULT_PROTOCOL, protocol_spec
    from runners.accuracy.protocol import render_row

    spec = protocol_spec(DEFAULT_PROTOCOL, task)
    for i, rec in enumerate(records):
        render_row(spec, normalize_row(task, i, rec, f"{from_file or 'hub'} row {i}"))
    if kind == "full" and len(records) != FULL_ROW_COUNTS[task]:
        raise DatasetError(f"{task}: full split must have {FULL_ROW_COUNTS[task]} rows, got {len(records)}")
    name = name or src["name"]
    data = "".join(jsonl_line(r) for r in records).encode("utf-8")
    file_path = out_dir / f"{name}.jsonl"
    _atomic_write(file_path, data)
    entry = DatasetEntry(
        name=name,
        task=task,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        source=src["source"] if kind == "full" else "fixture",
        config=src["config"],
        revision=revision,
        split=src["split"],
        path=file_path.name,
        rows=len(records),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    manifest_path = out_dir / "manifest.json"
    existing: Sequence[DatasetEntry] = load_manifest(manifest_path).datasets if manifest_path.exists() else ()
    manifest = DatasetManifest(datasets=tuple(e for e in existing if e.name != name) + (entry,))
    _atomic_write(manifest_path, (manifest.model_dump_json(indent=2) + "\n").encode())
    return entry
