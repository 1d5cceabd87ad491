"""The run as planned and the open run directory: the objects the stages pass on (``runners.orchestration.stages``),
in a module of their own so that a stage's helpers (``runners.orchestration.choose``) can be typed with them.

What is deliberately not modelled: how they are made (``runners.orchestration.stages``: ``make_plan``, ``open_run``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conf.schema import Config
from conf.schema_stack import RuntimeConfig
from runners.identity.gates import RunIdentity
from runners.orchestration.accuracy_phase import AccuracyPhase
from runners.orchestration.execute import Timings
from runners.orchestration.rundir import Key
from runners.cases import ScheduledCase
from runners.planning.choose_plan import ChooseNeed


@dataclass(frozen=True)
class Plan:
    """The run as planned, before any process starts.

    Attributes:
        cfg: the typed config (the saved one when resuming).
        runtimes: the runtimes the run uses (``runners.config.runtimes_used``), computed once here.
        overrides: the command-line overrides (the saved ones when resuming).
        items: every case process in schedule order (``runners.cases.ScheduledCase``).
        phases: phase names in schedule order.
        accuracy_phases: what the pre-launch check learnt about each accuracy phase.
        resume_dir: the run directory to resume, or None for a new run.
        choose: a choose run's need and model sizes (``runners.planning.choose_plan.choose_need``), computed
            once here; None without a choose phase.
    """

    cfg: Config
    runtimes: tuple[RuntimeConfig, ...]
    overrides: tuple[str, ...]
    items: tuple[ScheduledCase, ...]
    phases: tuple[str, ...]
    accuracy_phases: tuple[AccuracyPhase, ...]
    resume_dir: Path | None
    choose: ChooseNeed | None = None


@dataclass(frozen=True)
class OpenRun:
    """An open run directory: its path, the config it runs (``run_id`` set), the identity, done cases."""

    run_dir: Path
    cfg: Config
    run_identity: RunIdentity
    done: frozenset[Key]
    timings: Timings
