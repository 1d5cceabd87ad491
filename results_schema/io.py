"""Strict, durable reading and writing of result files (JSONL and single JSON documents).

What is modelled: one pydantic model per JSON line (``append_jsonl``/``read_jsonl``)
or per file (``write_json``/``read_json``). Writes are validated *before* they
reach the disk: the serialized text must parse with a strict JSON parser (no
``NaN``/``Infinity`` constants) and validate back to a model equal to the one
given; otherwise nothing is written. Appends are one ``os.write`` of one
complete line on an ``O_APPEND`` descriptor, under an exclusive ``flock``,
followed by ``fsync`` (and an fsync of the directory when the file was
created), so concurrent writers (local executor, Ray result streaming) never
interleave and a crash leaves at most one torn trailing line, which the next
append and every read refuse to paper over.

What is deliberately not modelled: file naming (see ``results_schema.dispatch``),
schema migration (``schema_version`` is ``Literal[1]``), compression.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

M = TypeVar("M", bound=BaseModel)


class StrictJSONError(ValueError):
    """A line or document is not strict JSON (bad syntax, NaN/Infinity constant)."""


class RecordError(ValueError):
    """A record in a file failed to parse or validate; names ``path:line`` and the field.

    Attributes:
        path: file that holds the bad record.
        line: 1-based line number (1 for single-document JSON files).
        field: dotted location of the first offending field (``""`` for syntax errors).
        message: what is wrong.
    """

    def __init__(self, path: Path | str, line: int, field: str, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


def _reject_constant(name: str) -> float:
    raise StrictJSONError(f"non-finite JSON constant {name!r} is not allowed")


def strict_json_loads(text: str | bytes) -> object:
    """Parse JSON, rejecting ``NaN``, ``Infinity`` and ``-Infinity``.

    Args:
        text: one JSON document.

    Returns:
        The parsed Python object.

    Raises:
        StrictJSONError: syntax error or a non-finite constant.
    """
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"invalid JSON: {exc.msg} at column {exc.colno}") from exc


def dumps_model(model: BaseModel) -> str:
    """Serialize ``model`` to one line of strict JSON, proving the round trip first.

    Args:
        model: a pydantic model instance (normally a ``results_schema.models`` model).

    Returns:
        The JSON text, without a trailing newline.

    Raises:
        StrictJSONError: the text would not parse strictly.
        ValueError: the text does not validate back to an equal model.
    """
    text = model.model_dump_json()
    obj = strict_json_loads(text)
    back = type(model).model_validate(obj)
    if back != model:
        raise ValueError(f"{type(model).__name__} does not round-trip through JSON: {text[:200]}")
    return text


def format_validation_error(exc: ValidationError) -> tuple[str, str]:
    """Return ``(field, message)`` for the first error of a pydantic ``ValidationError``."""
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in err.get("loc", ()))
    msg = err.get("msg", str(exc))
    n = exc.error_count()
    if n > 1:
        msg = f"{msg} (+{n - 1} more error{'s' if n > 2 else ''})"
    return field, msg


class _NonFinite:
    def __init__(self, name: str) -> None:
        self.name = name


def _non_finite_field(text: str | bytes) -> tuple[str, str] | None:
    """Locate the first NaN/Infinity constant: ``(dotted field path, constant)``, or None."""
    try:
        obj = json.loads(text, parse_constant=_NonFinite)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    stack: list[tuple[tuple, object]] = [((), obj)]
    while stack:
        loc, node = stack.pop(0)
        if isinstance(node, _NonFinite):
            return ".".join(str(p) for p in loc), node.name
        if isinstance(node, dict):
            stack.extend((loc + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((loc + (i,), v) for i, v in enumerate(node))
    return None


def parse_line(text: str | bytes, model_cls: type[M], *, path: Path | str = "<string>", line: int = 1) -> M:
    """Strictly parse and validate one JSON document into ``model_cls``.

    Strict JSON: ``NaN``/``Infinity``/``-Infinity`` constants are rejected wherever they
    appear, with the dotted path of the field that holds one. Fast path: a document
    whose bytes contain neither ``NaN`` nor ``Infinity`` cannot hold such a constant
    and is parsed and validated in one step by pydantic-core
    (``model_validate_json``); any other document is parsed by pydantic-core's JSON
    parser with ``allow_inf_nan=False`` first.

    Raises:
        RecordError: naming ``path:line`` and the offending field.
    """
    raw = text.encode() if isinstance(text, str) else text
    if b"NaN" not in raw and b"Infinity" not in raw:
        try:
            return model_cls.model_validate_json(raw)
        except ValidationError as exc:
            field, msg = format_validation_error(exc)
            raise RecordError(path, line, field, msg) from exc
    try:
        obj = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        field = _non_finite_field(raw)
        if field is not None:
            raise RecordError(path, line, field[0], f"non-finite JSON constant {field[1]} is not allowed") from exc
        raise RecordError(path, line, "", f"invalid strict JSON: {exc}") from exc
    try:
        return model_cls.model_validate(obj)
    except ValidationError as exc:
        field, msg = format_validation_error(exc)
        raise RecordError(path, line, field, msg) from exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_jsonl(path: Path | str, model: BaseModel) -> None:
    """Append ``model`` as one JSON line to ``path``, atomically and durably.

    The line is validated (strict JSON + equal round trip) before anything is
    written. The write is a single ``os.write`` on an ``O_APPEND`` descriptor
    under an exclusive ``flock``, followed by ``fsync``; the parent directory
    is fsynced when the file is created. Parent directories are created.

    Args:
        path: target ``.jsonl`` file.
        model: the record to append.

    Raises:
        ValueError: the model does not round-trip, or the file ends with a torn
            (unterminated) line from an earlier crash; nothing is written.
        OSError: the write or fsync failed.
    """
    path = Path(path)
    data = (dumps_model(model) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        raise ValueError(
                            f"{path}: last line is not newline-terminated (torn write?); refusing to append"
                        )
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def iter_jsonl(path: Path | str, model_cls: type[M]) -> Iterator[tuple[int, M]]:
    """Yield ``(line_number, model)`` for every line of ``path``, strictly.

    Blank lines are errors (a writer never produces them), as is a final line
    without a newline (torn write).

    Raises:
        RecordError: first bad line, naming ``path:line`` and the field.
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                raise RecordError(path, lineno, "", "last line is not newline-terminated (torn write)")
            if not raw.strip():
                raise RecordError(path, lineno, "", "blank line")
            yield lineno, parse_line(raw, model_cls, path=path, line=lineno)


def read_jsonl(path: Path | str, model_cls: type[M]) -> list[M]:
    """Read every line of ``path`` into ``model_cls`` (strict; see ``iter_jsonl``).

    Args:
        path: a ``.jsonl`` file; a missing file raises, an empty one gives ``[]``.
        model_cls: the pydantic model of one line.

    Returns:
        The records, in file order.

    Raises:
        RecordError: first bad line, naming ``path:line`` and the field.
    """
    return [m for _, m in iter_jsonl(path, model_cls)]


@dataclass(frozen=True)
class LineError:
    """One bad line found by ``check_jsonl`` (does not stop at the first)."""

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


def scan_jsonl(path: Path | str, model_cls: type[M]) -> tuple[list[tuple[int, M]], list[LineError]]:
    """Parse every line of ``path``; collect all bad lines instead of stopping at the first.

    Same line rules as ``iter_jsonl`` (blank line, torn last line and schema errors are errors).

    Returns:
        ``(good, errors)``: ``good`` is ``[(line_number, model)]`` in file order.
    """
    path = Path(path)
    good: list[tuple[int, M]] = []
    errors: list[LineError] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                errors.append(LineError(str(path), lineno, "", "last line is not newline-terminated (torn write)"))
                continue
            if not raw.strip():
                errors.append(LineError(str(path), lineno, "", "blank line"))
                continue
            try:
                good.append((lineno, parse_line(raw, model_cls, path=path, line=lineno)))
            except RecordError as exc:
                errors.append(LineError(exc.path, exc.line, exc.field, exc.message))
    return good, errors


def check_jsonl(path: Path | str, model_cls: type[BaseModel]) -> tuple[int, list[LineError]]:
    """Validate every line of ``path``; collect all errors instead of stopping (see ``scan_jsonl``).

    Returns:
        ``(number_of_valid_lines, errors)``.
    """
    good, errors = scan_jsonl(path, model_cls)
    return len(good), errors


def write_json(path: Path | str, model: BaseModel, *, indent: int | None = 2) -> None:
    """Write ``model`` as a single JSON document atomically (tmp + fsync + rename).

    Args:
        path: target file; parent directories are created; an existing file is replaced.
        model: the document.
        indent: pretty-printing indent (``None`` for one line).

    Raises:
        ValueError: the model does not round-trip.
    """
    path = Path(path)
    dumps_model(model)  # proves the round trip
    text = model.model_dump_json(indent=indent) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o644)  # mkstemp creates 0600; result files are world-readable like append_jsonl's
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def read_json(path: Path | str, model_cls: type[M]) -> M:
    """Strictly read a single-document JSON file into ``model_cls``.

    Raises:
        RecordError: naming ``path:1`` and the field.
    """
    path = Path(path)
    return parse_line(path.read_bytes(), model_cls, path=path, line=1)
