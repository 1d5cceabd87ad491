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

What is deliberately not modelled: file naming (see ``results_schema.records.dispatch``),
schema migration (``schema_version`` is ``Literal[1]``), compression.
"""

from __future__ import annotations

import fcntl
import gc
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from results_schema.codec.fast_json import fast_parse
from results_schema.codec.files import fsync_dir, line_problem, naming, write_text_atomic

__all__ = ["DuplicateKeyError", "LineError", "RecordError", "StrictJSONError", "append_jsonl", "check_jsonl",
           "dumps_model", "format_validation_error", "gc_paused", "iter_jsonl", "parse_line", "read_json",
           "read_jsonl", "scan_jsonl", "strict_json_loads", "write_json"]

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
    """Parse JSON, rejecting ``NaN``, ``Infinity``, ``-Infinity`` and duplicate keys.

    Args:
        text: one JSON document.

    Returns:
        The parsed Python object.

    Raises:
        StrictJSONError: syntax error, a non-finite constant, or a key twice in one
            object (``DuplicateKeyError``).
    """
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs_no_duplicates)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"invalid JSON: {exc.msg} at column {exc.colno}") from exc


def dumps_model(model: BaseModel) -> str:
    """Serialize ``model`` to one line of strict JSON, proving the round trip first.

    Args:
        model: a pydantic model instance (normally a ``results_schema.records.models`` model).

    Returns:
        The JSON text, without a trailing newline.

    Raises:
        StrictJSONError: the text would not parse strictly.
        ValueError: the text does not validate back to an equal model.
    """
    text = model.model_dump_json()
    strict_json_loads(text)
    back = type(model).model_validate_json(text, strict=True)
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


class DuplicateKeyError(StrictJSONError):
    """A JSON object holds the same key twice (``key`` names it)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate key {key!r} (a key may appear once per object)")


def _pairs_no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def _json_number(text: str) -> int | float:
    """``parse_float`` hook: finite numbers only; an integral number is the integer it equals.

    JSON has one number type; JSON Schema's ``integer`` is "a number with a zero
    fractional part" (JSON Schema Validation 2020-12, section 6.1.1), so ``16.0`` is
    the integer 16 for the exported schema and therefore for the reader too. Nothing
    else changes type: ``"16"`` stays a string and is rejected where a number is due.
    """
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text} is out of range for a 64-bit float")
    return int(value) if value.is_integer() else value


def parse_line(text: str | bytes, model_cls: type[M], *, path: Path | str = "<string>", line: int = 1) -> M:
    """Strictly parse and validate one JSON document into ``model_cls``, never coercing types.

    Steps: (1) Python's ``json`` parser with hooks rejects ``NaN``/``Infinity``
    constants (naming the field), numbers that overflow to infinity, and any object
    holding the same key twice (naming the key); (2) the document, re-serialized, is
    validated by pydantic in strict mode (``model_validate_json(..., strict=True)``):
    a string is never read as a number or boolean (``"16"``, ``"NO"``), a number never
    as a boolean. The accept/reject decision equals that of the exported JSON Schema
    (``python -m results_schema export``) for every per-field constraint (types,
    required and unknown fields, ranges, patterns, enums); the models' cross-field
    invariants (sums, counts) are checked by the reader only, since JSON Schema cannot
    state them.

    A line that certainly passes all of this is decoded once, from its raw bytes, by msgspec into a struct
    derived field for field from ``model_cls`` (``results_schema.codec.fast_json.fast_parse``,
    ``results_schema.codec.fast_structs``); every other line takes the steps above, which decide and name the error.

    Raises:
        RecordError: naming ``path:line`` and the offending field or key.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else text
    fast = fast_parse(raw, model_cls)
    if fast is not None:
        return fast
    try:
        obj = json.loads(text, object_pairs_hook=_pairs_no_duplicates, parse_constant=_reject_constant,
                         parse_float=_json_number)
    except DuplicateKeyError as exc:
        raise RecordError(path, line, exc.key, str(exc)) from exc
    except StrictJSONError as exc:
        found = _non_finite_field(text)
        if found is not None:
            raise RecordError(path, line, found[0], f"non-finite JSON constant {found[1]} is not allowed") from exc
        raise RecordError(path, line, "", str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise RecordError(path, line, "", f"invalid strict JSON: {exc.msg} at column {exc.colno}") from exc
    except UnicodeDecodeError as exc:
        raise RecordError(path, line, "", f"invalid strict JSON: not UTF-8 ({exc.reason})") from exc
    try:
        return model_cls.model_validate_json(json.dumps(obj, allow_nan=False), strict=True)
    except ValidationError as exc:
        field, msg = format_validation_error(exc)
        raise RecordError(path, line, field, msg) from exc


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
        OSError: the write or fsync failed (naming ``path``; a line cut by a full disk stays torn, and a
            resume quarantines it).
    """
    path = Path(path)
    data = (dumps_model(model) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _append(path, data)
    except OSError as exc:  # a full disk on write names no file: name it
        raise naming(exc, path) from None


def _append(path: Path, data: bytes) -> None:
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
        fsync_dir(path.parent)


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
            problem = line_problem(raw, raw.endswith(b"\n"))
            if problem is not None:
                raise RecordError(path, lineno, "", problem)
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
    with gc_paused():
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


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a block runs, then restore its state.

    Used while a file of records is read, while a case process whose heap is frozen after it imports vLLM
    (``runners.incase.import_heap.frozen_import``), and while pytest collects (``tests/conftest.py``). Reading
    builds no reference cycle (records are trees of frozen models, tuples, dicts and scalars), so reference
    counting frees everything and the cyclic collector only traverses, at each of its passes, every record read
    so far (``python -m tests.support.bench`` times reading with it). Collection resumes, if it was enabled, when
    the block ends (also when the block raises).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def scan_jsonl(path: Path | str, model_cls: type[M]) -> tuple[list[tuple[int, M]], list[LineError]]:
    """Parse every line of ``path``; collect all bad lines instead of stopping at the first.

    Same line rules as ``iter_jsonl`` (blank line, torn last line and schema errors are errors).

    Returns:
        ``(good, errors)``: ``good`` is ``[(line_number, model)]`` in file order.
    """
    path = Path(path)
    good: list[tuple[int, M]] = []
    errors: list[LineError] = []
    with open(path, "rb") as fh, gc_paused():
        for lineno, raw in enumerate(fh, start=1):
            problem = line_problem(raw, raw.endswith(b"\n"))
            if problem is not None:
                errors.append(LineError(str(path), lineno, "", problem))
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
    dumps_model(model)  # proves the round trip
    write_text_atomic(path, model.model_dump_json(indent=indent) + "\n")


def read_json(path: Path | str, model_cls: type[M]) -> M:
    """Strictly read a single-document JSON file into ``model_cls``.

    Raises:
        RecordError: naming ``path:1`` and the field.
    """
    path = Path(path)
    return parse_line(path.read_bytes(), model_cls, path=path, line=1)
