"""The registry of case kinds: one entry per phase kind, and the dispatch every runner module goes through.

What is modelled: ``KINDS`` (name -> ``CaseKind``; the order is ``PhaseKind``'s), ``kind`` / ``kind_of`` (the
object of a phase kind's name / of a case), ``bench_kinds`` / ``control_kinds`` / ``sequential_kinds`` (names
with a trait, for messages) and ``case_argv`` (write a scheduled case's spec, return its argv: the kind's
``launch``). A new kind is one module (a ``CaseKind`` subclass) and one entry here; what else it needs outside
``runners/`` (its ``PhaseKind`` value, its conf block, its record and reader, its in-case code, its analysis) is
listed in runners/README.md ("Adding a case kind").

What is deliberately not modelled: any kind's behaviour (its own module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from runners.cases import PhaseCase, ScheduledCase
from runners.kinds.accuracy import ACCURACY
from runners.kinds.base import CaseKind
from runners.kinds.bench import STABILITY, THROUGHPUT, TTFT
from runners.kinds.serving import SERVING
from runners.launching.case_command import CaseCommands
from runners.paths import CasePaths

KINDS: dict[str, CaseKind] = {k.name: k for k in (THROUGHPUT, TTFT, STABILITY, ACCURACY, SERVING)}
"""Every registered case kind by its phase kind name (``results_schema.records.value_sets.PhaseKind``)."""


def kind(name: str) -> CaseKind:
    """The registered kind named ``name`` (a ``MatrixConfig.kind`` / ``PhaseCase.kind``).

    Raises:
        ValueError: no kind of that name is registered (naming the registered ones).
    """
    try:
        return KINDS[str(name)]
    except KeyError:
        raise ValueError(f"unknown case kind {str(name)!r}; registered kinds: {', '.join(KINDS)}") from None


def kind_of(case: PhaseCase) -> CaseKind:
    """The kind of one planned case."""
    return kind(case.kind)


def bench_kinds() -> tuple[str, ...]:
    """Names of the kinds whose cases run ``runners.incase.bench_one`` (registry order)."""
    return tuple(name for name, k in KINDS.items() if k.bench)


def control_kinds() -> tuple[str, ...]:
    """Names of the kinds whose baselines may run a speed control (``step_delay_ms``), alphabetical."""
    return tuple(sorted(name for name, k in KINDS.items() if k.speed_control))


def sequential_kinds() -> tuple[str, ...]:
    """Names of the kinds whose phases may run group-sequential looks (registry order)."""
    return tuple(name for name, k in KINDS.items() if k.sequential)


def case_argv(sc: ScheduledCase, *, model_dir: Path, paths: CasePaths, bench_command: Sequence[str] | None,
              python: str, accuracy_command: Sequence[str] | None = None,
              serving_command: Sequence[str] | None = None,
              bench_module: str = "runners.incase.bench_one") -> tuple[str, ...]:
    """Write the case's spec (its kind's ``spec_path``) and return the argv of its process.

    Args:
        sc: the scheduled case.
        model_dir: model directory the case loads (an accuracy phase's own model replaces it).
        paths: the case's files.
        bench_command / accuracy_command / serving_command: explicit prefixes replacing ``[python, -m, <module>]``
            (tests: fake engines).
        python: the case runtime's interpreter.
        bench_module: module a bench case runs (``runners.incase.bench_one``).

    Returns:
        ``(*prefix, --case, PATH)`` for bench cases, ``(*prefix, run, --case, PATH)`` for accuracy cases,
        ``(*prefix, --case, PATH, --run-dir, DIR)`` for serving cases (prefix default
        ``python, -m, runners.incase.serving``).
    """
    commands = CaseCommands(bench_command=bench_command, accuracy_command=accuracy_command,
                            serving_command=serving_command, bench_module=bench_module)
    return kind_of(sc.case).launch(sc, model_dir=model_dir, paths=paths, python=python, commands=commands)
