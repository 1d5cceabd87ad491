"""Write a dataset JSONL and its manifest entry (``python -m runners.incase.accuracy materialize``).

What is modelled: from a local file, or -- only on a machine with hub access and the
optional ``datasets`` package -- from the hub: one ``json.dumps(row, sort_keys=True,
separators=(",", ":"))`` line per row (texts and columns as in the source), and a manifest
entry (``results_schema.records.accuracy.DatasetEntry``) with source (name), config (subset),
revision, split, row count and SHA-256. Every row must render under the task's default
protocol (``results_schema.records.protocols.default_protocol``) before anything is written.

What is deliberately not modelled: other splits or benchmarks, dataset licensing/gating
(GPQA is gated: accept its terms on the hub first), downloads at run time.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from results_schema.records.accuracy import FULL_ROW_COUNTS, DatasetEntry, DatasetManifest
from results_schema.codec.files import write_bytes_atomic
from results_schema.records.protocols import default_protocol, protocol_spec
from runners.incase.accuracy.datasets import DatasetError, load_manifest, normalize_row
from runners.incase.accuracy.protocol import render_row

HUB_SOURCES: dict[str, dict[str, str]] = {
    "gsm8k": {"source": "openai/gsm8k", "config": "main", "split": "test", "name": "gsm8k"},
    "gpqa": {"source": "Idavidrein/gpqa", "config": "gpqa_diamond", "split": "train", "name": "gpqa_diamond"},
}
"""Where the full evaluation splits live on the Hugging Face hub."""

GENERATED_SOURCES: dict[str, dict[str, str | None]] = {
    "addition": {"config": None, "split": "test", "name": "single-digit-addition"},
}
"""Tasks of this project's generated sets (no hub split: always ``kind='fixture'`` from a local file)."""




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
    source: str | None = None,
) -> DatasetEntry:
    """Write ``<out_dir>/<name>.jsonl`` and add/replace its entry in ``<out_dir>/manifest.json``.

    Every row is checked first (a malformed row, or a GSM8K / addition answer without a number under
    the task's default protocol, stops the write). The JSONL keeps the source columns and texts
    as they are, one ``json.dumps(row, sort_keys=True, separators=(",", ":"))`` object per
    line (:func:`jsonl_line`), so the SHA-256 is reproducible from the same source rows.

    Args:
        task: gsm8k or gpqa (hub splits), or addition (generated: ``from_file`` and ``kind='fixture'`` only).
        out_dir: directory of the manifest and the JSONL.
        from_file: local .jsonl/.csv/.parquet copy; None = fetch from the hub (network).
        revision: hub commit the rows came from (required with ``from_file`` for ``kind='full'``).
        name: entry name (default: gsm8k / gpqa_diamond / single-digit-addition).
        kind: 'full' (row count must be 1319 / 198) or 'fixture'.
        source: the entry's ``source`` for a fixture (default ``'fixture'``; e.g. ``'synthetic'`` for rows
            generated by ``runners.incase.accuracy.synthetic``); a full split always records its hub name.

    Returns:
        The manifest entry written.

    Raises:
        DatasetError: bad rows, wrong row count for 'full', missing revision, a generated task from the hub.
    """
    src = _task_source(task, from_file, kind)
    out_dir = Path(out_dir)
    records, revision = _source_records(task, from_file, revision, kind)
    _check_rows(task, records, f"{from_file or 'hub'}", kind)
    name = name or str(src["name"])
    data = "".join(jsonl_line(r) for r in records).encode("utf-8")
    file_path = out_dir / f"{name}.jsonl"
    write_bytes_atomic(file_path, data)
    entry = DatasetEntry(
        name=name,
        task=task,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        source=str(src["source"]) if kind == "full" else (source or "fixture"),
        config=src["config"],
        revision=revision,
        split=str(src["split"]),
        path=file_path.name,
        rows=len(records),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    manifest_path = out_dir / "manifest.json"
    existing: Sequence[DatasetEntry] = load_manifest(manifest_path).datasets if manifest_path.exists() else ()
    manifest = DatasetManifest(datasets=tuple(e for e in existing if e.name != name) + (entry,))
    write_bytes_atomic(manifest_path, (manifest.model_dump_json(indent=2) + "\n").encode())
    return entry


def _task_source(task: str, from_file: Path | str | None, kind: str) -> dict[str, str | None]:
    """The hub fields of ``task`` (``HUB_SOURCES``), or of a generated task (``GENERATED_SOURCES``: only from a
    local file, as a fixture).

    Raises:
        DatasetError: unknown task, or a generated task asked from the hub or as kind 'full'.
    """
    if task in HUB_SOURCES:
        return {**HUB_SOURCES[task]}
    if task not in GENERATED_SOURCES:
        raise DatasetError(f"unknown task {task!r}; expected one of {sorted(HUB_SOURCES) + sorted(GENERATED_SOURCES)}")
    if from_file is None or kind == "full":
        raise DatasetError(f"task {task!r} is generated by this project: materialize it from a local file "
                           "(--from-file) as kind 'fixture'; it has no hub split")
    return {**GENERATED_SOURCES[task]}


def _source_records(task: str, from_file: Path | str | None, revision: str | None,
                    kind: str) -> tuple[list[dict[str, object]], str]:
    """(rows, revision) from ``from_file`` (revision ``local`` for a fixture without one) or the hub."""
    if from_file is None:
        return _records_from_hub(task, revision)
    if revision is None:
        if kind == "full":
            raise DatasetError("--revision (the hub commit of the copy) is required with --from-file for kind full")
        revision = "local"
    return _records_from_file(Path(from_file)), revision


def _check_rows(task: str, records: Sequence[dict[str, object]], where: str, kind: str) -> None:
    """Every row renders under the task's default protocol; a full split has its published row count."""
    spec = protocol_spec(default_protocol(task), task)
    for i, rec in enumerate(records):
        render_row(spec, normalize_row(task, i, rec, f"{where} row {i}"))
    if kind == "full" and len(records) != FULL_ROW_COUNTS[task]:
        raise DatasetError(f"{task}: full split must have {FULL_ROW_COUNTS[task]} rows, got {len(records)}")
