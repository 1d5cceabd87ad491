"""Exit codes of the runner's entry points and the run-level errors that carry one.

What is modelled: the one list of exit codes (``EXIT_*``, each with its meaning in ``EXIT_MEANINGS``)
that ``python -m runners.matrix`` and ``python -m runners.pins`` return, and every module imports;
``RunnerError`` (a message and one of these codes), ``io_error`` (an ``OSError`` as one such line) and ``PlanError`` (a config whose cases cannot
run). Which code a finished run returns when several reasons apply: ``runners.orchestration.close.exit_code``
(the first reason that applies, in that function's order).

What is deliberately not modelled: the exit codes of the case processes (``runners.incase``) and of
``python -m analysis`` (``analysis.cli``).
"""

from __future__ import annotations

from typing import Mapping

EXIT_OK = 0
EXIT_CASE_FAILURES = 1
EXIT_CONFIG = 2
EXIT_IDENTITY = 3
EXIT_ACCURACY = 4
EXIT_FORMAL_STOP = 5
EXIT_INVALID = 6
EXIT_IO = 7
EXIT_HEALTH = 42
EXIT_INTERRUPTED = 130

EXIT_MEANINGS: Mapping[int, str] = {
    EXIT_OK: "every case ended as expected (expected failures included) and the run is VALID; runners.pins: "
             "every declared pin observed",
    EXIT_CASE_FAILURES: "some case failed unexpectedly (its failure line is kept), or a bug (traceback shown)",
    EXIT_CONFIG: "config error, Hydra compose errors and bad arguments or pins files included (one line; nothing "
                 "launched, nothing written)",
    EXIT_IDENTITY: "identity gate: a declared pin, the model files or the offload tree do not match, or cannot be "
                   "observed; runners.pins: some pin not found or mismatched (the file is still written)",
    EXIT_ACCURACY: "every case ran but the accuracy verifier failed",
    EXIT_FORMAL_STOP: "a formal run stopped at its first unexpected outcome",
    EXIT_INVALID: "every case ran as expected but the run's validation (analysis) or its serving validation is "
                  "INVALID (e.g. tokens differ from the baseline, evidence or checksums disagree), or a choose run's "
                  "choice stopped before predicting (its probe stayed contended after its re-measures: the last line "
                  "names the processes and what to do)",
    EXIT_IO: "an I/O error (disk full, permission) stopped the runner, or the close stage (analysis, report, "
             "checksums) failed: one line naming the stage, the file and the cause; the recorded cases are kept and "
             "no SHA256SUMS is written, so the run is not finished; once the cause is gone, resume= runs what is "
             "missing (after a failed close: the close only)",
    EXIT_HEALTH: "a runtime's health gate failed",
    EXIT_INTERRUPTED: "interrupted (SIGINT / SIGTERM): no verdict yet; resume the run to continue",
}
"""Exit code -> its meaning, for every code the runner's entry points return."""


class RunnerError(RuntimeError):
    """A run-level error with an exit code (one of ``EXIT_MEANINGS``) and a one-line message (no traceback shown)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def os_error_cause(exc: OSError) -> str:
    """The cause of an ``OSError`` without its file: ``No space left on device (ENOSPC)``."""
    import errno

    cause = exc.strerror or str(exc) or type(exc).__name__
    return f"{cause} ({errno.errorcode[exc.errno]})" if isinstance(exc.errno, int) and exc.errno in errno.errorcode \
        else cause


def os_error_text(exc: OSError, file: object = None) -> str:
    """``FILE: CAUSE`` of an ``OSError``: the file it names (else ``file``) and :func:`os_error_cause`.

    Example: ``/r/summary/report.html: No space left on device (ENOSPC)``.
    """
    where = exc.filename if exc.filename is not None else file
    return f"{where}: {os_error_cause(exc)}" if where is not None else os_error_cause(exc)


def io_error(stage: str, exc: OSError, run_dir: object = None) -> RunnerError:
    """An ``OSError`` that stopped ``stage`` (a full disk, a permission) as one line: the stage, the file, the
    cause, what is kept and how to resume ``run_dir`` (None: no run directory yet); exit ``EXIT_IO``."""
    then = (f"; the cases recorded so far are kept (a line cut short is quarantined by the resume), no SHA256SUMS; "
            f"once the cause is gone, resume with `python -m runners.matrix resume={run_dir}`"
            if run_dir is not None else "")
    return RunnerError(f"{stage}: {os_error_text(exc)}{then}; exit {EXIT_IO}", EXIT_IO)


class PlanError(ValueError):
    """The config describes cases that cannot run; raised before any process starts (exit ``EXIT_CONFIG``)."""
