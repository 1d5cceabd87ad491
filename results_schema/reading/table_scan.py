"""Strict reading of a whole JSONL file into a ``RecordTable``: the accept / refuse decisions of ``scan_jsonl``.

What is modelled: ``scan_table(path, model_cls)`` returns the same accepted lines (in file order) and the
same ``LineError``\\ s (in line order, same messages) as ``results_schema.codec.io.scan_jsonl``, through the
same per-line reader: the line rules (``results_schema.codec.files.line_problem``), then the one-pass
check ``parse_line`` itself starts with (``results_schema.codec.fast_json.fast_struct``: msgspec decodes the
line into the struct derived from the model, the model is built from it and runs its own validators, no
object repeats a key), and for a line that check cannot prove, ``results_schema.codec.io.parse_line``'s
full path, which accepts it (the model is kept) or names the field that is wrong. Every rule of a record
is stated once, in its model; nothing here decides a line.

A line the one-pass check accepts is kept as its decoded struct and the model built to validate it is
dropped: structs are not tracked by Python's cyclic garbage collector, so the thousands of rows a
catalog holds cost the collector nothing, where as many model trees made each of its passes traverse
them all (``python -m tests.support.bench``). ``RecordTable.models()`` rebuilds the models without running
a validator again. A model with no derived struct (``fast_structs.Unsupported``) is read by ``scan_jsonl``.

What is deliberately not modelled: single-document files (``read_json``), the files' names and phases
(``analysis.load``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from results_schema.reading.columns import RecordTable
from results_schema.codec.fast_json import fast_struct
from results_schema.codec.fast_structs import Unsupported, plan_for
from results_schema.codec.files import line_problem
from results_schema.codec.io import LineError, RecordError, gc_paused, parse_line, scan_jsonl

__all__ = ["scan_table"]

M = TypeVar("M", bound=BaseModel)


def scan_table(path: Path | str, model_cls: type[M]) -> tuple[RecordTable[M], list[LineError]]:
    """Read every line of ``path``; collect all bad lines instead of stopping at the first.

    Args:
        path: a ``.jsonl`` file of ``model_cls`` lines.
        model_cls: the pydantic model of one line.

    Returns:
        ``(table, errors)``: the accepted lines as a ``RecordTable`` (file order) and a ``LineError`` per bad
        line (line order), exactly those of ``scan_jsonl(path, model_cls)``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    try:
        plan = plan_for(model_cls)
    except Unsupported:
        good, errs = scan_jsonl(path, model_cls)
        return RecordTable(model_cls, [ln for ln, _m in good], [m for _ln, m in good]), errs
    errors: list[LineError] = []
    lines: list[int] = []
    items: list[Any] = []
    with gc_paused():
        raw_lines = path.read_bytes().split(b"\n")
        torn = raw_lines.pop()
        for lineno, raw in enumerate(raw_lines, start=1):
            problem = line_problem(raw, True)
            if problem is not None:
                errors.append(LineError(str(path), lineno, "", problem))
                continue
            decoded = fast_struct(raw, plan)
            if decoded is not None:
                lines.append(lineno)
                items.append(decoded[0])
                continue
            try:
                items.append(parse_line(raw, model_cls, path=path, line=lineno))
            except RecordError as exc:
                errors.append(LineError(exc.path, exc.line, exc.field, exc.message))
            else:
                lines.append(lineno)
        if torn:
            errors.append(LineError(str(path), len(raw_lines) + 1, "", line_problem(torn, False) or ""))
    return RecordTable(model_cls, lines, items), errors
