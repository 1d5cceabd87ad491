"""The outcome of one finished case process: its line (a run or a failure) and whether it was expected.

What is modelled: ``Finalized``, built by ``runners.outcome.bench`` (throughput, ttft, stability
cases), ``runners.outcome.accuracy`` (accuracy cases) and ``runners.outcome.serving`` (serving cases). What is deliberately not modelled: the checks that decide it
(``runners.outcome.case_checks``).
"""

from __future__ import annotations

from dataclasses import dataclass

from results_schema.records.case_outcome import CaseFailure
from results_schema.records.models import CaseRun


@dataclass(frozen=True)
class Finalized:
    """Result of finalizing one case: exactly one of ``run`` / ``failure``.

    ``expected`` is True when the outcome matches the case's expectation (a
    success without ``expect_error``, or a failure matching it).
    """

    run: CaseRun | None
    failure: CaseFailure | None
    expected: bool
    note: str = ""
