"""A choose run's verify phase: whether the run has one, its schedule from the decided settings, its planned cases.

What is modelled (``conf.schema.ChooseConfig``): the verify phase measures the baseline and every decided setting,
``repeats`` processes each, rotated (``verify_items``), through the same executor and finaliser as every phase; each
decision records the verify cases it adds as ``plan.json`` holds cases (``planned_verify``). A need of 0 drops the
phase (``has_verify``: ``runners.planning.choose_plan.with_choose``).

What is deliberately not modelled: which settings are decided (``runners.orchestration.choose_decide``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from conf.schema import Config
from conf.schema_matrix import PointConfig
from offload_tools.choice import Setting
from results_schema.records.base import PhaseKind
from results_schema.records.choice import ChoiceDecision
from results_schema.records.plan import PlannedPhase
from runners.cases import ScheduledCase
from runners.orchestration.rundir import planned_case
from runners.planning.choose_plan import ChooseNeed, with_choose
from runners.planning.plan import expand_phase, schedule

__all__ = ["active", "decided_settings", "has_verify", "planned_verify", "verify_items"]


def active(cfg: Config) -> bool:
    """True when the config has a choose probe phase."""
    return cfg.choose.probe_phase is not None


def decided_settings(decisions: Sequence[ChoiceDecision]) -> list[Setting]:
    """Every setting decided for measurement, in decision order."""
    return [Setting(c.group_size, c.num_in_group, c.prefetch_step) for d in decisions for c in d.chosen]


def verify_items(cfg: Config, decided: Sequence[Setting], start_index: int) -> list[Any]:
    """The verify phase's schedule (``ScheduledCase``) with ``decided`` as its points: baseline and each setting
    ``repeats`` processes, rotated; numbered from ``start_index``."""

    name = cfg.choose.verify_phase
    matrix = dataclasses.replace(cfg.phases[name], implementations=[cfg.choose.implementation], points=[
        PointConfig(g=s.group_size, n=s.num_in_group, prefetch_step=s.prefetch_step) for s in decided])
    cases = expand_phase(name, matrix, workload=cfg.workload, runtime=cfg.runtime, num_layers=cfg.model.num_layers)
    items = schedule({name: cases}, rotate_by_phase={name: matrix.rotate})
    return [dataclasses.replace(sc, index=start_index + i) for i, sc in enumerate(items)]


def has_verify(cfg: Config, known: ChooseNeed | None) -> bool:
    """Whether the run has a verify phase as planned (``runners.planning.choose_plan.with_choose``: a need of 0
    drops it; ``known``: the plan's ``choose_need``)."""

    return active(cfg) and cfg.choose.verify_phase in with_choose(cfg, known).phases


def planned_verify(cfg: Config, added: Sequence[ScheduledCase]) -> Any:
    """The verify phase's cases a decision adds, as ``plan.json`` holds cases (``results_schema.records.plan.PlannedPhase``)."""

    cases = tuple(dict.fromkeys(sc.case for sc in added))
    planned = tuple(planned_case(c) for c in cases)
    return PlannedPhase(name=cfg.choose.verify_phase, kind=PhaseKind(cases[0].kind), cases=planned,
                        processes=sum(c.repeats for c in planned))
