"""Shared pieces of the run validation (``analysis.validation.validate``): the issue collector and path helper.

What is modelled: ``Collector`` gathers ``(check name, ValidationIssue)`` pairs; ``Where`` names the
case an issue concerns; ``rel_path`` shows a path relative to the run directory.

What is deliberately not modelled: the checks themselves (``analysis.validation.records``,
``analysis.validation.checks``, ``analysis.validation.validate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from analysis.load import RunData
from results_schema.records.validation import ValidationIssue


class CaseRef(TypedDict):
    """The case (process) an issue concerns: keyword arguments of ``Collector.add``."""

    phase: str
    label: str
    repeat: int


class Where(CaseRef, total=False):
    """A case and the file an issue concerns: keyword arguments of ``Collector.add``."""

    path: str | Path


@dataclass
class Collector:
    """Every issue found so far, with the name of the check that raised it (``analysis.validation.validate.CHECKS``)."""

    issues: list[tuple[str, ValidationIssue]] = field(default_factory=list)

    def add(self, check: str, code: str, message: str, *, severity: Literal["error", "warning"] = "error",
            phase: str | None = None, label: str | None = None, repeat: int | None = None,
            path: str | Path | None = None) -> None:
        """Record one issue of ``check`` (``path`` is stored as a string)."""
        self.issues.append((check, ValidationIssue(code=code, severity=severity, message=message, phase=phase,
                                                   label=label, repeat=repeat,
                                                   path=None if path is None else str(path))))


def rel_path(data: RunData, p: str | Path) -> str:
    """``p`` relative to the run directory (as given when it lies outside)."""
    try:
        return str(Path(p).resolve().relative_to(data.run_dir.resolve()))
    except ValueError:
        return str(p)
