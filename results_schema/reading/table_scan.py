"""Strict reading of a whole JSONL file into a ``RecordTable``: the accept / refuse decisions of ``scan_jsonl``.

What is modelled: ``scan_table(path, model_cls)`` returns the same accepted lines (in file order) and
the same ``LineError``\\ s (in line order, same messages) as ``results_schema.records.io.scan_jsonl``, but keeps
each accepted line as the msgspec struct derived from the model instead of a pydantic model, so a file
of 100,000 records is read without building 100,000 model trees. A line is kept as a struct only when
all of this is proven, and otherwise it goes to ``results_schema.records.io.parse_line`` (the full reader), which
accepts it (the model is kept) or names the error:

1. the line rules (``results_schema.records.files.line_problem``: no blank line, no torn last line);
2. the line holds no backslash (so that step 4's count is exact: every string is its own text);
3. msgspec decodes it into the derived struct (``results_schema.records.fast_structs``): strict RFC 8259 JSON, no
   ``NaN`` / ``Infinity``, no number overflowing a 64-bit float, no coercion (no string read as a number
   or boolean, no boolean as a number, no float as an integer), no unknown or missing field, every
   per-field constraint;
4. no object holds a key twice: the colons in the line equal the colons in the struct re-encoded by
   msgspec. Outside strings a colon separates a key from its value, and without escapes every string
   the struct holds appears verbatim in the line, so line colons >= struct colons, with equality only
   when no key was repeated (a decoder keeps only the last of a repeated key);
5. the model's cross-field (``mode="after"``) validators pass on the row, applied to columns of all rows
   at once (``ROW_RULES``; ``results_schema.reading.case_run_rules`` for ``CaseRun``). A model whose validators
   have no current port (``rules_current()`` False) or that has no derived struct is read line by line by
   ``scan_jsonl``: slower, never laxer.

What is deliberately not modelled: single-document files (``read_json``), error messages (the full
reader's), the files' names and phases (``analysis.load``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np
from pydantic import BaseModel

from results_schema.reading import case_run_rules
from results_schema.reading.columns import RecordTable
from results_schema.records.fast_structs import Unsupported, plan_for
from results_schema.records.files import line_problem
from results_schema.records.io import LineError, RecordError, gc_paused, parse_line, scan_jsonl
from results_schema.records.models import CaseRun

__all__ = ["ROW_RULES", "scan_table"]

M = TypeVar("M", bound=BaseModel)

ROW_RULES: dict[type[BaseModel], tuple[Callable[[RecordTable[Any]], np.ndarray], Callable[[], bool]]] = {
    CaseRun: (case_run_rules.refused_rows, case_run_rules.rules_current),
}
"""``{model: (refused_rows, rules_current)}``: the column form of each model's cross-field validators."""


def _decoded(raw: bytes, decode: Callable[[bytes], Any]) -> Any:
    """The struct when steps 2-4 hold for ``raw``, else None."""
    if b"\\" in raw:
        return None
    try:
        s = decode(raw)
    except (msgspec.DecodeError, ValueError):
        return None
    return s if raw.count(b":") == msgspec.json.encode(s).count(b":") else None


def scan_table(path: Path | str, model_cls: type[M]) -> tuple[RecordTable[M], list[LineError]]:
    """Read every line of ``path``; collect all bad lines instead of stopping at the first.

    Args:
        path: a ``.jsonl`` file of ``model_cls`` lines.
        model_cls: the pydantic model of one line.

    Returns:
        ``(table, errors)``: the accepted lines as a ``RecordTable`` (file order) and ``LineError`` per bad
        line (line order), exactly those of ``scan_jsonl(path, model_cls)``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    rules = ROW_RULES.get(model_cls)
    try:
        plan = plan_for(model_cls)
    except Unsupported:
        plan = None
    if plan is None or rules is None or not rules[1]():
        good, errs = scan_jsonl(path, model_cls)
        return RecordTable(model_cls, [ln for ln, _ in good], [m for _, m in good]), errs
    with gc_paused():
        lines = path.read_bytes().split(b"\n")
        torn = lines.pop()
        errors: list[LineError] = []
        fast_lines, structs, slow = [], [], []
        decode = plan.decoder.decode
        for lineno, raw in enumerate(lines, start=1):
            problem = line_problem(raw, True)
            if problem is not None:
                errors.append(LineError(str(path), lineno, "", problem))
                continue
            s = _decoded(raw, decode)
            if s is None:
                slow.append(lineno)
            else:
                fast_lines.append(lineno)
                structs.append(s)
        table: RecordTable[M] = RecordTable(model_cls, fast_lines, structs)
        refused = rules[0](table)
        if refused.any() or slow:
            slow += [fast_lines[i] for i in np.flatnonzero(refused).tolist()]
            accepted = []
            for lineno in slow:
                try:
                    accepted.append((lineno, parse_line(lines[lineno - 1], model_cls, path=path, line=lineno)))
                except RecordError as exc:
                    errors.append(LineError(exc.path, exc.line, exc.field, exc.message))
            table = table.select((~refused).tolist(), accepted)
        if torn:
            errors.append(LineError(str(path), len(lines) + 1, "", line_problem(torn, False) or ""))
    errors.sort(key=lambda e: e.line)
    return table, errors
