"""Choose, then confirm, while the run goes: the loop from the probe to the last decision's verify processes.

What is modelled (``conf.schema.ChooseConfig``; the rule is ``offload_tools.choice``, the records
``results_schema.records.choice``):

1. after the probe phase: the copy bench (CPU runtime; ``runners.orchestration.close.copy_bench``), the probe's
   re-measures of contended processes (``runners.orchestration.choose_probe``), then one decision
   (``runners.orchestration.choose_decide``: stage ``predict``) appended to ``choose-decisions.jsonl`` before any of
   the settings it decides starts;
2. the verify phase (``runners.orchestration.choose_verify``): its baseline and every decided setting, through the
   same executor and finaliser as every phase; sequential (``choose.verify_looks``): each decision's look series,
   one ``LookDecision`` line (``sequential-decisions.jsonl``, fsync) per look before the blocks it adds start;
3. the next decision from what was measured (``refit``, then ``front``), until none follows. The recommendation is
   never taken here: analysis decides from the measured points only.

A need of 0 bytes writes one ``unnecessary`` line and verifies nothing. A resume reads the lines already written
and continues the same decision (``decided_items`` gives ``runners.orchestration.stages.make_plan`` the decided
cases, so that a resume's bookkeeping sees them).

What is deliberately not modelled: statistics of the decision (``analysis.comparison``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from conf.schema import Config
from results_schema.codec.io import append_jsonl
from results_schema.records.choice import FILE_NAME, PROBE_STAGES, ChoiceDecision, read_decisions
from results_schema.records.sequential import FILE_NAME as LOOKS_FILE
from runners.cases import ScheduledCase
from runners.orchestration.choose_decide import bad_labels, context, next_decision
from runners.orchestration.choose_probe import probe_decision, probe_items
from runners.orchestration.choose_verify import (active, decided_settings, has_verify, next_verify_look, planned_verify,
                                                 sequential_verify, sequential_verify_items, verify_end, verify_items,
                                                 verify_schedule)
from runners.orchestration.close import copy_bench
from runners.orchestration.execute import RunState, run_phases
from runners.orchestration.run_objects import OpenRun, Plan
from runners.orchestration.sequential import look_lines
from runners.planning.choose_plan import ChooseNeed

if TYPE_CHECKING:
    from rich.console import Console

    from runners.orchestration.host_measures import CopyBenchRun

__all__ = ["choose_stage", "decided_items", "run_choose"]


def decided_items(cfg: Config, run_dir: Path | None, start_index: int, known: ChooseNeed | None) -> list[Any]:
    """On resume: the probe's re-measures and the verify phase's items from the decisions already written, numbered
    from ``start_index``; else none (``known``: the plan's ``choose_need``)."""
    if run_dir is None or known is None or not active(cfg):
        return []
    decisions = read_decisions(run_dir)
    if not decisions:
        return []
    choice = [d for d in decisions if d.stage not in PROBE_STAGES]
    items = probe_items(cfg, known, decisions) + (
        verify_schedule(cfg, run_dir, choice, 0) if has_verify(cfg, known) else [])
    return [dataclasses.replace(sc, index=start_index + i) for i, sc in enumerate(items)]


def run_choose(cfg: Config, run_dir: Path, state: RunState, console: Console,
               run_stage: Callable[[Sequence[ScheduledCase]], bool], bench: Callable[[], None],
               known: ChooseNeed) -> list[ScheduledCase]:
    """Decide and measure until the choice is complete; return every verify item (done or run here).

    Args:
        cfg: the run's config.
        run_dir: the run directory.
        state: the run's ``RunState`` (its ``token_mismatches`` keep a differing case out of every fit).
        console: where one line per decision goes.
        run_stage: ``(items) -> bool``: runs the items not yet recorded; True when interrupted.
        bench: ``() -> None``: runs the copy bench once (before the first decision).
        known: the run's need and model sizes (the plan's ``choose_need``).

    Raises:
        PlanError: the model cannot be sized (checked at planning, so not expected here).
    """

    bench()
    verify = has_verify(cfg, known)
    while True:
        decisions = read_decisions(run_dir)
        choice = [d for d in decisions if d.stage not in PROBE_STAGES]
        items = probe_items(cfg, known, decisions)  # what is decided runs first (a resume), then the next decision
        items += verify_schedule(cfg, run_dir, choice, len(items)) if choice and verify else []
        if items and run_stage(items):
            return items
        if any(d.stage == "stopped" for d in decisions):
            return items
        if verify and _look(cfg, run_dir, choice, console):  # a sequential verify series: its blocks run next
            continue
        bad = bad_labels(state.token_mismatches)
        step = None if choice else probe_decision(cfg, run_dir, known, bad, decisions)
        if step is not None:  # a stop's line is the run's last (runners.orchestration.close.verdict_line)
            append_jsonl(run_dir / FILE_NAME, step)
            if step.stage == "remeasure":
                console.print(f"choose (remeasure): {step.note}", markup=False)
            continue
        ctx = context(cfg, run_dir, bad, known)
        if ctx is None:
            console.print("choose: no baseline of the probe recorded; nothing can be predicted", markup=False)
            return items
        if sequential_verify(cfg):  # the next series starts after the blocks the recorded ones cover
            ctx = dataclasses.replace(ctx, first_block=verify_end(run_dir, cfg))
        nxt = next_decision(ctx, choice)
        if nxt is None:
            return items
        _append_decision(cfg, run_dir, choice, nxt, verify, console)
        if not verify:
            return items


def _look(cfg: Config, run_dir: Path, choice: Sequence[ChoiceDecision], console: Console) -> bool:
    """A sequential verify phase: take the next look of the last decision's series and append it (fsync) before the
    blocks it adds start; False when there is none (fixed repeats, no series, or the series is done)."""
    look = next_verify_look(cfg, run_dir, choice) if sequential_verify(cfg) and choice else None
    if look is None:
        return False
    append_jsonl(run_dir / LOOKS_FILE, look)
    for text in look_lines(look):
        console.print(text, markup=False)
    return True


def _append_decision(cfg: Config, run_dir: Path, choice: Sequence[ChoiceDecision], nxt: ChoiceDecision, verify: bool,
                     console: Console) -> None:
    """Append ``nxt`` (fsync) with the verify cases it adds (``decided_phase``: its settings; a sequential series
    after the first, the baseline's blocks too: the plan holds the first series' first look), and print it."""
    vd = nxt.verify_design
    if not verify:
        added: list[ScheduledCase] = []
    elif vd is not None:
        new = sequential_verify_items(cfg, [*choice, nxt], [], 0)
        added = [sc for sc in new if sc.repeat >= vd.first_block
                 and (sc.case.label in {c.label for c in nxt.chosen} or vd.first_block > 0)]
    else:
        new = verify_items(cfg, decided_settings(choice) + decided_settings([nxt]), 0)
        added = [sc for sc in new if sc.case.label in {c.label for c in nxt.chosen}]
    nxt = nxt.model_copy(update={"decided_phase": planned_verify(cfg, added)}) if added else nxt
    append_jsonl(run_dir / FILE_NAME, nxt)
    console.print(f"choose ({nxt.stage}): {nxt.note}", markup=False)


def choose_stage(p: Plan, run: OpenRun, state: RunState, base_env: Mapping[str, str], console: Console,
                 run_copy_bench: CopyBenchRun) -> tuple[bool, list[ScheduledCase]]:
    """A choose run's decisions and verify phase (``run_choose``) for the execute stage
    (``runners.orchestration.stages``: ``p`` its ``Plan``, ``run`` its ``OpenRun``, ``state`` its ``RunState``);
    returns ``(interrupted, the probe's re-measures and the verify items)``."""
    import time
    from dataclasses import replace

    known = p.choose
    assert known is not None  # a choose phase: make_plan computed it
    stopped = [False]
    resumed = {sc.key for sc in probe_items(run.cfg, known, read_decisions(run.run_dir))}  # in p.items on a resume
    base = sum(1 for sc in p.items if sc.case.phase != run.cfg.choose.verify_phase and sc.key not in resumed)

    def stage(items: Sequence[ScheduledCase]) -> bool:
        todo = [replace(sc, index=base + sc.index) for sc in items if sc.key not in run.done | state.finished]
        state.progress.total = base + len(items)
        stopped[0] = run_phases(run.cfg, state, todo, phases=list(dict.fromkeys(sc.case.phase for sc in todo)),
                                identity=run.run_identity.gate, resumed=True, timings=run.timings) or state.stopped
        return stopped[0]

    def bench() -> None:
        t = time.monotonic()
        if run.cfg.runtime.device == "cpu":
            copy_bench(run.cfg, p.items, run.run_dir, state.model_dir, base_env, console, run_copy_bench)
        else:
            from runners.orchestration.copy_bench import probe_h2d_bench

            probe_h2d_bench(run.cfg, run.run_dir, state.python, base_env, console, max(known.sizes.layer_bytes))
        run.timings.copy_bench += time.monotonic() - t

    decided = run_choose(run.cfg, run.run_dir, state, console, stage, bench, known)
    return stopped[0], [replace(sc, index=base + sc.index) for sc in decided]
