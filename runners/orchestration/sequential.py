"""A sequential throughput phase while the run goes: blocks, a look after the declared blocks, stop what is known.

What is modelled (``conf.schema_matrix.SequentialConfig``; the rule is ``analysis.comparison.sequential``, the
records ``results_schema.records.sequential``), as the choose run does its stages (``runners.orchestration.choose``):

1. the plan holds the first look's blocks (``runners.planning.plan``: every label ``looks[0]`` times, ABBA blocks);
2. after the blocks of look ``k`` are recorded, every label still open is looked at
   (``analysis.comparison.sequential.look_verdict`` on the values ``look_values`` gives: its processes of blocks
   ``1..looks[k]`` against the baseline's, or, with ``sequential.pairing: block``, the complete blocks paired), and one ``LookDecision`` line is appended to ``sequential-decisions.jsonl`` with fsync, naming
   each label's verdict, interval, level and reason, and the blocks it adds (``looks[k+1] - looks[k]``) for the
   labels still open; only then do those blocks start (baseline + the open labels, ABBA order:
   ``runners.planning.blocks``);
3. the phase ends when no label is open or the budget's look is taken (open labels end ``inconclusive`` with their
   MDE).

A resume reads the lines already written (never rewrites one), runs the blocks they decided that are not recorded,
and takes the next look on the recorded blocks plus the new ones (``decided_items`` gives
``runners.orchestration.stages.make_plan`` every decided block so that a resume's bookkeeping sees them).

A serving phase's looks are ``runners.orchestration.serving_sequential``'s (its cells, its floor baselines, its
``serving-looks.jsonl``), dispatched here by phase kind: the same loop, blocks and resume.

What is deliberately not modelled: the statistics (``analysis.comparison.sequential``); a sequential phase followed
by other phases runs its later blocks after them (the default has one phase); contended processes count as
measured here (the decision table withholds a verdict resting on one after the run).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence, cast

from analysis.comparison.sequential import SequentialDesign, look_values, look_verdict
from conf.schema import Config
from results_schema.codec.io import append_jsonl, read_jsonl
from results_schema.codec.scalars import finite_or_null
from results_schema.records.models import CaseRun
from results_schema.records.sequential import (FILE_NAME, LabelLook, LookDecision, LookVerdictName, PairingName,
                                               SpendingName, read_looks, series_repeats)
from results_schema.records.serving_looks import FILE_NAME as SERVING_FILE, read_serving_looks
from runners.orchestration.execute import RunState, run_phases
from runners.orchestration.look_design import design
from runners.orchestration.run_objects import OpenRun, Plan
from runners.orchestration.serving_sequential import (is_serving, serving_block_items, serving_look_lines,
                                                      serving_next_look, serving_plan_line)
from runners.planning.blocks import block_order
from runners.cases import PhaseCase, ScheduledCase
from runners.planning.plan import expand_phase

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["decided_items", "design", "look_lines", "look_on", "next_look", "phase_values", "plan_lines", "sequential_phases",
           "sequential_stage", "series_blocks"]


def sequential_phases(cfg: Config) -> list[str]:
    """Names of the run's sequential phases (config order)."""
    return [name for name, m in cfg.phases.items() if m.sequential.looks]


def _cases(cfg: Config, phase: str) -> list[PhaseCase]:
    cases = expand_phase(phase, cfg.phases[phase], workload=cfg.workload, runtime=cfg.runtime,
                         num_layers=cfg.model.num_layers)
    return cases  # baseline first (runners.planning.plan: sequential phases need one)


def series_blocks(base: PhaseCase, labels: Sequence[PhaseCase], d: SequentialDesign, lines: Sequence[LookDecision],
                  first_block: int, start_index: int) -> list[ScheduledCase]:
    """Every block of one look series decided so far (the first look's for every label, plus each line's
    ``next_blocks`` for its open labels), in run order, numbered from ``start_index``; the series' block ``b`` is repeat
    ``first_block + b - 1`` of every arm (ABBA order: ``runners.planning.blocks.block_order``)."""
    bounds = [(d.looks[0], [c.label for c in labels])]
    for line in lines:
        if line.next_blocks:
            bounds.append((line.blocks + line.next_blocks, list(line.still_open)))
    out: list[ScheduledCase] = []
    block = 0
    for end, open_labels in bounds:
        while block < end:
            block += 1
            arms = block_order(base, [c for c in labels if c.label in open_labels], block)
            out += [ScheduledCase(index=start_index + len(out), case=c, repeat=first_block + block - 1) for c in arms]
    return out


def block_items(cfg: Config, phase: str, lines: Sequence[LookDecision], start_index: int) -> list[ScheduledCase]:
    """Every block of ``phase`` decided so far (``series_blocks``; one series from block 1)."""
    cases = _cases(cfg, phase)
    return series_blocks(cases[0], cases[1:], design(cfg, phase), lines, 0, start_index)


def decided_items(cfg: Config, items: Sequence[ScheduledCase], run_dir: Path | None) -> list[ScheduledCase]:
    """``items`` with each sequential phase's items as decided so far (a resume: from its recorded looks)."""
    out = list(items)
    for phase in sequential_phases(cfg):
        mine = [sc for sc in out if sc.case.phase == phase]
        if not mine or run_dir is None:
            continue
        start = mine[0].index
        new = (serving_block_items(cfg, phase, read_serving_looks(run_dir, phase), start) if is_serving(cfg, phase)
               else block_items(cfg, phase, read_looks(run_dir, phase), start))
        shift = len(new) - len(mine)
        out = ([sc for sc in out if sc.case.phase != phase and sc.index < start] + new
               + [dataclasses.replace(sc, index=sc.index + shift) for sc in out
                  if sc.case.phase != phase and sc.index > start])
    return out


def phase_values(run_dir: Path, phase: str) -> dict[str, dict[int, float]]:
    """``label -> {repeat: tok/s}`` of every recorded process of ``phase``."""
    path = run_dir / f"{phase}-runs.jsonl"
    out: dict[str, dict[int, float]] = {}
    for r in read_jsonl(path, CaseRun) if path.is_file() else []:
        out.setdefault(r.record.label, {})[r.record.repeat] = r.record.throughput_tok_s
    return out


def _label_look(label: str, a: list[float], b: list[float], d: SequentialDesign, k: int) -> LabelLook:
    if not a or not b:  # every process of a side (paired: of a block) failed: nothing to look at
        verdict: LookVerdictName = "inconclusive" if k == len(d.looks) - 1 else "open"
        what = "no complete block" if d.paired else "no recorded process on a side"
        return LabelLook(label=label, verdict=verdict, processes=len(a), reference_processes=len(b), ci_low_pct=None,
                         ci_high_pct=None, center_pct=None, method="", mde_pct=None,
                         reason=f"look {k + 1}: {what} ({len(a)} vs {len(b)}); {verdict}")
    lv = look_verdict(a, b, d, k)
    dec = lv.decision
    return LabelLook(label=label, verdict=cast(LookVerdictName, lv.verdict), processes=lv.processes,
                     reference_processes=lv.reference_processes, ci_low_pct=finite_or_null(dec.ci_low_pct),
                     ci_high_pct=finite_or_null(dec.ci_high_pct), center_pct=finite_or_null(dec.center_pct),
                     method=dec.method, mde_pct=finite_or_null(lv.mde_pct), reason=lv.reason(d))


def look_on(phase: str, d: SequentialDesign, base: str, labels: Sequence[str], lines: Sequence[LookDecision],
            values: Mapping[str, Mapping[int, float]], first_block: int = 0) -> LookDecision | None:
    """The look that follows ``lines`` (one series) on ``values`` (``label -> {repeat: tok/s}``), None when the series
    is done: look ``k`` on each open label's processes of the series' blocks ``1..looks[k]`` (repeats ``first_block ..
    first_block + looks[k] - 1``) against the baseline's; ``labels`` the series' labels (open before its first look)."""
    k = len(lines)
    if k >= len(d.looks) or (lines and not lines[-1].still_open):
        return None
    open_labels = list(labels) if not lines else list(lines[-1].still_open)
    n = d.looks[k]

    looked = tuple(_label_look(label, *look_values(series_repeats(values.get(label, {}), first_block),
                                                   series_repeats(values.get(base, {}), first_block), d, k), d, k)
                   for label in open_labels)
    still = any(x.verdict == "open" for x in looked)
    nxt = d.looks[k + 1] - n if still and k + 1 < len(d.looks) else 0
    return LookDecision(phase=phase, look=k + 1, blocks=n, looks=d.looks, target_pct=d.target_pct, alpha=d.alpha,
                        spending=cast(SpendingName, d.spending), pairing=cast(PairingName, d.pairing),
                        look_alpha=d.look_alphas()[k], baseline=base, labels=looked, next_blocks=nxt,
                        first_block=first_block)


def next_look(cfg: Config, phase: str, run_dir: Path, lines: Sequence[LookDecision]) -> LookDecision | None:
    """The look that follows ``lines`` on the recorded processes (None: the phase is done)."""
    cases = _cases(cfg, phase)
    return look_on(phase, design(cfg, phase), cases[0].label, [c.label for c in cases[1:]], lines,
                   phase_values(run_dir, phase))


def plan_lines(cfg: Config) -> list[str]:
    """One line per sequential phase, printed before the first case: what is planned, what the looks may add (a
    serving phase: ``runners.orchestration.serving_sequential.serving_plan_line``)."""
    out = []
    for phase in sequential_phases(cfg):
        if is_serving(cfg, phase):
            out.append(serving_plan_line(cfg, phase))
            continue
        d, arms = design(cfg, phase), len(_cases(cfg, phase))
        out.append(f"sequential {phase}: {arms * d.looks[0]} processes planned ({d.looks[0]} blocks of {arms} arms); "
                   f"looks after {', '.join(map(str, d.looks))} blocks stop each label when it is slower, faster or "
                   f"equivalent within ±{d.target_pct:g}% (alpha {d.alpha:g}, {d.spending}-type spending, "
                   f"{'paired t over complete blocks' if d.paired else 'unpaired t over processes'}); at most "
                   f"{arms * (d.budget - d.looks[0])} more processes (budget {d.budget} per arm)")
    return out


def look_lines(line: LookDecision) -> list[str]:
    """The console lines of one look: one per label, then what happens next."""
    out = [f"sequential {line.phase}/{x.label}: {x.reason}" for x in line.labels]
    still = ", ".join(line.still_open)
    out.append(f"sequential {line.phase}: look {line.look} recorded; "
               + (f"{line.next_blocks} more block(s) for baseline + {still}" if line.next_blocks else "phase done"))
    return out


def _take_look(cfg: Config, phase: str, run_dir: Path) -> list[str] | None:
    """The next look of ``phase`` on its recorded processes, appended with fsync to its file before the next block
    starts (a serving phase: ``serving-looks.jsonl``, ``runners.orchestration.serving_sequential``); its console
    lines, or None when the phase is done."""
    if is_serving(cfg, phase):
        served = serving_next_look(cfg, phase, run_dir)
        if served is None:
            return None
        append_jsonl(run_dir / SERVING_FILE, served)
        return serving_look_lines(served)
    nxt = next_look(cfg, phase, run_dir, read_looks(run_dir, phase))
    if nxt is None:
        return None
    append_jsonl(run_dir / FILE_NAME, nxt)  # fsync before the next block starts
    return look_lines(nxt)


def sequential_stage(p: Plan, run: OpenRun, state: RunState, console: Console) -> tuple[bool, list[ScheduledCase]]:
    """Take every look of every sequential phase, running the blocks each decides (module docstring); returns
    ``(interrupted, every item of the run as decided)``. An interrupt between two blocks (while a look is computed or
    written) is an interrupt like one inside a case: the lines written stay, a resume continues."""
    items: list[ScheduledCase] = list(p.items)
    try:
        for phase in sequential_phases(run.cfg):
            while True:
                items = decided_items(run.cfg, items, run.run_dir)
                todo = [sc for sc in items if sc.case.phase == phase and sc.key not in run.done | state.finished]
                state.progress.total = len(items)
                if todo and (run_phases(run.cfg, state, todo, phases=[phase], identity=run.run_identity.gate,
                                        resumed=False, timings=run.timings) or state.stopped):
                    return True, items
                texts = _take_look(run.cfg, phase, run.run_dir)
                if texts is None:
                    break
                for text in texts:
                    console.print(text, markup=False)
    except KeyboardInterrupt:
        return True, decided_items(run.cfg, items, run.run_dir)
    return False, items
