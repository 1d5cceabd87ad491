"""Which model validates which result file, by file name.

What is modelled: an ordered, extensible table of ``FileKind`` entries mapping a
path pattern (``pathlib.PurePath.match`` semantics, i.e. matched from the right:
``*-runs.jsonl``, ``records/*/*.json``) to a model named lazily as
``"module:Class"``, so that models owned by other modules (the environment
manifest, accuracy records) are only imported when a matching file is checked.
A module may contribute its own entries by defining a module-level
``FILE_KINDS: list[FileKind]``; modules listed in ``CONTRIBUTING_MODULES`` are
consulted first (their entries win over the defaults below).

What is deliberately not modelled: content sniffing. A file whose name matches
no entry is not checked (and is an error when named explicitly on the CLI).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path, PurePath

from pydantic import BaseModel


@dataclass(frozen=True)
class FileKind:
    """One dispatch entry.

    Attributes:
        pattern: ``PurePath.match`` pattern on the path (matched from the right).
        model: ``"module:Class"`` of the pydantic model of one record.
        jsonl: True when the file holds one record per line, False for one JSON document.
    """

    pattern: str
    model: str
    jsonl: bool

    def matches(self, path: Path | str) -> bool:
        return PurePath(path).match(self.pattern)

    def load_model(self) -> type[BaseModel]:
        """Import and return the model class.

        Raises:
            LookupError: the module or class does not exist (yet).
        """
        module_name, _, attr = self.model.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            raise LookupError(f"model module {module_name!r} for {self.pattern!r} is not available") from exc
        try:
            cls = getattr(module, attr)
        except AttributeError as exc:
            raise LookupError(f"{module_name} has no model {attr!r} (needed for {self.pattern!r})") from exc
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise LookupError(f"{self.model} is not a pydantic model")
        return cls


DEFAULT_FILE_KINDS: list[FileKind] = [
    FileKind("*-runs.jsonl", "results_schema.records.models:CaseRun", jsonl=True),
    FileKind("*-failures.jsonl", "results_schema.records.case_outcome:CaseFailure", jsonl=True),
    FileKind("records/*/*.case.json", "results_schema.records.case:CaseSpec", jsonl=False),  # before the records
    FileKind("records/*/*.json", "results_schema.records.models:BenchRecord", jsonl=False),
    FileKind("evidence/*/*.json", "results_schema.records.models:RuntimeEvidence", jsonl=False),
    FileKind("summary/validation.json", "results_schema.records.validation:ValidationReport", jsonl=False),
    FileKind("environment-manifest.json", "results_schema.records.manifest:EnvironmentManifest", jsonl=False),
    FileKind("*.examples.jsonl", "results_schema.records.accuracy:AccuracyExample", jsonl=True),
    FileKind("*.result.json", "results_schema.records.accuracy:AccuracyResult", jsonl=False),
    FileKind("*-accuracy-cases.jsonl", "results_schema.records.accuracy:AccuracyCaseRun", jsonl=True),
    FileKind("accuracy-verification.json", "results_schema.records.accuracy:AccuracyVerification", jsonl=False),
]
"""Built-in entries, consulted after contributed ones."""

CONTRIBUTING_MODULES: tuple[str, ...] = ("results_schema.records.manifest", "results_schema.records.accuracy", "results_schema.records.serving",
                                         "results_schema.records.placement", "results_schema.records.run_owner",
                                         "results_schema.records.copy_bench", "results_schema.records.choice",
                                         "results_schema.records.sequential", "results_schema.records.serving_looks")
"""Modules whose optional ``FILE_KINDS`` list is prepended to the table."""

_EXTRA: list[FileKind] = []


def register_file_kind(kind: FileKind) -> None:
    """Add an entry at run time (consulted before every other entry)."""
    _EXTRA.insert(0, kind)


def file_kinds() -> list[FileKind]:
    """The full table, in match order: registered, contributed, defaults."""
    kinds = list(_EXTRA)
    for name in CONTRIBUTING_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        kinds.extend(getattr(module, "FILE_KINDS", ()))
    kinds.extend(DEFAULT_FILE_KINDS)
    return kinds


def kind_for(path: Path | str) -> FileKind | None:
    """Return the first entry matching ``path``, or None."""
    for kind in file_kinds():
        if kind.matches(path):
            return kind
    return None
