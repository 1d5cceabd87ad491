"""Exit codes of ``python -m runners.matrix`` and the run-level error that carries one.

Exit codes: 0 all cases as expected; 1 some case failed unexpectedly (records kept) or a bug;
2 config error; 3 identity gate; 4 all cases ran but the accuracy verifier failed; 5 formal run
stopped at its first failure; 6 the run's validation (``analysis``) or serving validation failed;
42 health gate; 130 interrupted (resume to continue).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CASE_FAILURES = 1
EXIT_CONFIG = 2
EXIT_IDENTITY = 3
EXIT_ACCURACY = 4
EXIT_FORMAL_STOP = 5
EXIT_INVALID = 6
EXIT_HEALTH = 42
EXIT_INTERRUPTED = 130


class RunnerError(RuntimeError):
    """A run-level error with an exit code and a one-line message (no traceback shown)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class PlanError(ValueError):
    """The config describes cases that cannot run; raised before any process starts."""
