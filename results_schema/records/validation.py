"""``summary/validation.json``: the findings of ``analysis.validation.validate`` over a run directory."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from results_schema.records.base import NonNegInt, SchemaVersion, StrictModel
from results_schema.records.identity import PhaseLabel


Severity = Literal["error", "warning"]


class ValidationIssue(StrictModel):
    """One finding of ``analysis.validation.validate``; ``code`` is a stable machine-readable name."""

    code: str = Field(
        description=(
            "Stable name of the check that failed, e.g. missing_log, duplicate_bench_result, "
            "traceback_in_log, wrong_offloader_class, invalid_record, evidence_mismatch, "
            "empty_offload_evidence, selection_mismatch, layer_bytes_mismatch, token_digest_differs, "
            "count_mismatch, identical_kv_capacity, missing_kv_capacity."
        )
    )
    severity: Severity = Field(description="error makes the run invalid; warning does not.")
    message: str = Field(description="Human-readable explanation naming the case and the values.")
    phase: str | None = Field(default=None, description="Phase concerned, if any.")
    label: str | None = Field(default=None, description="Case label concerned, if any.")
    repeat: NonNegInt | None = Field(default=None, description="Repeat concerned, if any.")
    path: str | None = Field(default=None, description="File concerned, relative to the run directory.")


CONTENDED_CODE = "contended_case"
"""Issue code (a warning) of a case process whose measured window a busy host contended."""


class CaseCount(PhaseLabel):
    """Expected vs actual process count of one (phase, label)."""

    expected: NonNegInt | None = Field(description="Processes the plan asked for; null when no plan was found.")
    runs: NonNegInt = Field(description="Lines in <phase>-runs.jsonl for this label.")
    failures: NonNegInt = Field(description="Lines in <phase>-failures.jsonl for this label.")


class CheckResult(StrictModel):
    """Outcome of one named validation check over the whole run."""

    name: str = Field(description="Check name (e.g. counts, one_bench_result_per_log, no_tracebacks).")
    passed: bool = Field(description="True when the check found no error.")
    errors: NonNegInt = Field(description="Number of error-severity issues this check raised.")
    warnings: NonNegInt = Field(description="Number of warning-severity issues this check raised.")


class ValidationReport(StrictModel):
    """``summary/validation.json``: every check over a run directory; ``valid`` iff no error."""

    schema_version: SchemaVersion = Field(default=1, description="Schema version of this record (always 1).")
    run_dir: str = Field(description="Run directory that was validated (as given).")
    valid: bool = Field(description="True iff no issue has severity error.")
    checks: tuple[CheckResult, ...] = Field(description="Every check that ran, in order.")
    counts: tuple[CaseCount, ...] = Field(description="Expected vs actual counts per phase and label.")
    issues: tuple[ValidationIssue, ...] = Field(description="Every error and warning, in check order.")

    @model_validator(mode="after")
    def _check_valid(self) -> "ValidationReport":
        has_error = any(i.severity == "error" for i in self.issues)
        if self.valid == has_error:
            raise ValueError(f"valid ({self.valid}) contradicts issues (error present: {has_error})")
        return self

    @property
    def errors(self) -> tuple[ValidationIssue, ...]:
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def warnings(self) -> tuple[ValidationIssue, ...]:
        return tuple(i for i in self.issues if i.severity == "warning")

    def contended_line(self) -> str:
        """``N of M cases contended (foreign work on the host while they measured)``, or ``''`` when none was.

        N counts the processes with a ``contended_case`` warning (``analysis.comparison.soundness``), M the
        processes recorded (``counts``). Contention withholds verdicts; it never makes a run invalid.
        """
        hit = {(i.phase, i.label, i.repeat) for i in self.issues if i.code == CONTENDED_CODE}
        if not hit:
            return ""
        total = sum(c.runs for c in self.counts)
        return f"{len(hit)} of {max(total, len(hit))} cases contended (foreign work on the host while they measured)"

    def verdict(self, max_cases: int = 8) -> str:
        """One line for the end of a run / CLI: ``VALID (...)`` or ``INVALID: failing checks ...; cases ...``.

        Failing checks are named with their error counts; cases are the ``phase/label-rN`` of
        error issues (first ``max_cases``, then ``+N more``); the first error message closes it.
        Cases a busy host contended are counted after it (``contended_line``); they do not change validity.
        """
        contended = self.contended_line()
        tail = f"; {contended}" if contended else ""
        if self.valid:
            return f"validation: VALID ({len(self.checks)} checks passed, {len(self.warnings)} warning(s)){tail}"
        failing = ", ".join(f"{c.name} ({c.errors})" for c in self.checks if not c.passed) or "?"
        cases: list[str] = []
        for i in self.errors:
            if i.label is None:
                continue
            name = f"{i.phase}/{i.label}" + (f"-r{i.repeat}" if i.repeat is not None else "")
            if name not in cases:
                cases.append(name)
        shown = ", ".join(cases[:max_cases]) + (f", +{len(cases) - max_cases} more" if len(cases) > max_cases else "")
        first = " ".join(self.errors[0].message.split())[:300] if self.errors else ""
        return (f"validation: INVALID: failing checks: {failing}; cases: {shown or 'none (run-level)'}; "
                f"first error: {first}{tail}")
