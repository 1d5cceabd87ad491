"""The outcome of one finished case process, whatever its kind: the lines it appends and whether it was expected.

What is modelled: ``Outcome``, the one type every kind's end returns (``runners.outcome.bench``:
throughput, ttft, stability cases; ``runners.outcome.accuracy``; ``runners.outcome.serving``;
called through ``runners.kinds.base.CaseKind.finalize``). What is deliberately not modelled: the
checks that decide it (``runners.outcome.case_checks``), writing the lines
(``runners.orchestration.execute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from results_schema.records.case_outcome import CaseFailure

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class Line:
    """One record line of a finished case and the file of the run directory it is appended to."""

    file: str
    """Relative to the run directory, e.g. ``<phase>-runs.jsonl``."""
    record: BaseModel


@dataclass(frozen=True)
class Outcome:
    """Result of finalizing one case: its record lines (none on failure) and/or its ``CaseFailure``.

    ``expected`` is True when the outcome matches the case's expectation (a success without
    ``expect_error``, or a failure matching it); ``note`` says more (e.g. the KV cache memory changed,
    an unexpected success).
    """

    lines: tuple[Line, ...]
    failure: CaseFailure | None
    expected: bool
    note: str = ""

    def records(self, kind: type[R]) -> list[R]:
        """The records of the lines that are ``kind`` instances, in order."""
        return [ln.record for ln in self.lines if isinstance(ln.record, kind)]

