"""A choose run's verify phase: whether the run has one, its schedule from the decided settings, its planned cases.

What is modelled (``conf.schema.ChooseConfig``): the verify phase measures the baseline and every decided setting
through the same executor and finaliser as every phase, in one of two designs:

* fixed (``verify_looks`` empty): every decided setting and the baseline ``repeats`` processes, rotated
  (``verify_items``);
* sequential (``verify_looks`` set): each decision that chooses settings starts its own look series
  (``ChoiceDecision.verify_design``, recorded before any of its processes runs): ABBA blocks of the baseline and its
  settings still open, numbered after the earlier series' blocks (``first_block``), looked at after
  ``verify_looks[k]`` blocks with the throughput phases' machinery (``runners.orchestration.sequential``:
  ``series_blocks``, ``look_on``; the lines in ``sequential-decisions.jsonl``, phase = the verify phase), each at
  its decision's target; a setting stops when its verdict against the baseline is conclusive
  (``sequential_verify_items``, ``next_verify_look``).

Each decision records the verify cases it adds as ``plan.json`` holds cases (``planned_verify``). A need of 0 drops
the phase (``has_verify``: ``runners.planning.choose_plan.with_choose``).

What is deliberately not modelled: which settings are decided (``runners.orchestration.choose_decide``), the
statistics of a look (``analysis.comparison.sequential``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from pathlib import Path

from analysis.comparison.sequential import SequentialDesign
from conf.schema import Config
from conf.schema_matrix import PointConfig
from offload_tools.choice import Setting
from results_schema.records.base import PhaseKind
from results_schema.records.choice import ChoiceDecision, VerifyDesign
from results_schema.records.plan import PlannedPhase
from results_schema.records.sequential import LookDecision, read_looks
from runners.cases import PhaseCase, ScheduledCase
from runners.orchestration.rundir import planned_case
from runners.orchestration.sequential import look_on, phase_values, series_blocks
from runners.planning.choose_plan import ChooseNeed, with_choose
from runners.planning.plan import expand_phase, schedule

__all__ = ["active", "decided_settings", "has_verify", "next_verify_look", "planned_verify", "sequential_verify",
           "sequential_verify_items", "verify_end", "verify_items", "verify_schedule"]


def active(cfg: Config) -> bool:
    """True when the config has a choose probe phase."""
    return cfg.choose.probe_phase is not None


def decided_settings(decisions: Sequence[ChoiceDecision]) -> list[Setting]:
    """Every setting decided for measurement, in decision order."""
    return [Setting(c.group_size, c.num_in_group, c.prefetch_step) for d in decisions for c in d.chosen]


def sequential_verify(cfg: Config) -> bool:
    """True when the verify phase is sequential (``choose.verify_looks`` set)."""
    return bool(cfg.choose.verify_looks)


def _verify_cases(cfg: Config, decided: Sequence[Setting]) -> list[PhaseCase]:
    """The verify phase's cases with ``decided`` as its points, baseline first (a sequential phase: ``repeats`` =
    the first look's blocks, as ``with_choose`` plans it)."""
    name = cfg.choose.verify_phase
    matrix = dataclasses.replace(cfg.phases[name], implementations=[cfg.choose.implementation], points=[
        PointConfig(g=s.group_size, n=s.num_in_group, prefetch_step=s.prefetch_step) for s in decided])
    if sequential_verify(cfg):
        matrix = dataclasses.replace(matrix, repeats=int(cfg.choose.verify_looks[0]), repeats_by_label={})
    return expand_phase(name, matrix, workload=cfg.workload, runtime=cfg.runtime, num_layers=cfg.model.num_layers)


def verify_items(cfg: Config, decided: Sequence[Setting], start_index: int) -> list[Any]:
    """The fixed verify phase's schedule (``ScheduledCase``) with ``decided`` as its points: baseline and each setting
    ``repeats`` processes, rotated; numbered from ``start_index``."""
    name = cfg.choose.verify_phase
    items = schedule({name: _verify_cases(cfg, decided)}, rotate_by_phase={name: cfg.phases[name].rotate})
    return [dataclasses.replace(sc, index=start_index + i) for i, sc in enumerate(items)]


def series_design(vd: VerifyDesign) -> SequentialDesign:
    """The look design a decision declared (``ChoiceDecision.verify_design``)."""
    return SequentialDesign(tuple(vd.looks), vd.target_pct, vd.alpha, vd.spending)


def _series(decisions: Sequence[ChoiceDecision]) -> list[tuple[ChoiceDecision, VerifyDesign]]:
    return [(d, d.verify_design) for d in decisions if d.verify_design is not None]


def sequential_verify_items(cfg: Config, decisions: Sequence[ChoiceDecision], looks: Sequence[LookDecision],
                            start_index: int) -> list[ScheduledCase]:
    """Every verify block decided so far: per decision with a ``verify_design``, its series' blocks (the first look's,
    plus what each of its look lines added: ``runners.orchestration.sequential.series_blocks``), in decision order,
    numbered from ``start_index``."""
    cases = {c.label: c for c in _verify_cases(cfg, decided_settings(decisions))}
    base = _verify_cases(cfg, [])[0]
    out: list[ScheduledCase] = []
    for d, vd in _series(decisions):
        mine = [line for line in looks if line.first_block == vd.first_block]
        out += series_blocks(base, [cases[c.label] for c in d.chosen], series_design(vd), mine, vd.first_block,
                             start_index + len(out))
    return out


def verify_schedule(cfg: Config, run_dir: Path, decisions: Sequence[ChoiceDecision],
                    start_index: int) -> list[ScheduledCase]:
    """The verify phase's items as decided by ``decisions`` (and, sequential, by the recorded looks)."""
    if sequential_verify(cfg):
        return sequential_verify_items(cfg, decisions, read_looks(run_dir, cfg.choose.verify_phase), start_index)
    return verify_items(cfg, decided_settings(decisions), start_index)


def verify_end(run_dir: Path, cfg: Config) -> int:
    """Verify blocks the recorded look series cover (the next series' ``first_block``; 0: none yet)."""
    return max((line.first_block + line.blocks for line in read_looks(run_dir, cfg.choose.verify_phase)), default=0)


def next_verify_look(cfg: Config, run_dir: Path, decisions: Sequence[ChoiceDecision]) -> LookDecision | None:
    """The next look of the last decision's series on the recorded verify processes (None: no series, or it is
    done): ``runners.orchestration.sequential.look_on`` at the decision's declared design and target."""
    series = _series(decisions)
    if not series:
        return None
    d, vd = series[-1]
    phase = cfg.choose.verify_phase
    lines = [line for line in read_looks(run_dir, phase) if line.first_block == vd.first_block]
    return look_on(phase, series_design(vd), _verify_cases(cfg, [])[0].label, [c.label for c in d.chosen], lines,
                   phase_values(run_dir, phase), vd.first_block)


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
