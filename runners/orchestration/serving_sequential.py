"""A sequential serving phase while the run goes: blocks, a look after the declared blocks, stop what is known.

What is modelled (``conf.schema_matrix.SequentialConfig`` of a serving phase, ``pairing: block``; the rule is
``analysis.serving.sequential``, the record ``results_schema.records.serving_looks``), as the throughput phase's
looks do (``runners.orchestration.sequential``, which calls this module for a serving phase):

1. the plan holds the first look's blocks (``runners.planning.plan``): every floor baseline and offload label
   ``looks[0]`` times, a speed control its fixed ``repeats_by_label`` (never more than ``looks[0]``), ABBA order;
2. after the blocks of look ``k`` are recorded, every offload label still open is looked at
   (``analysis.serving.sequential.label_look`` on the recorded ``ServingRun`` lines), and one
   ``ServingLookDecision`` line is appended to ``serving-looks.jsonl`` with fsync, naming each label's state and
   every (rate, metric) cell's verdict and interval, and the blocks it adds (``looks[k+1] - looks[k]``) while a
   label is open; only then do those blocks start: the floor baselines and the open labels, ABBA order
   (``runners.planning.blocks``), block ``b`` being repeat ``b - 1`` of every arm, so its rate order is
   ``runners.launching.serving_case.rotated``'s for that repeat, as in the planned blocks;
3. the phase ends when no label is open or the budget's look is taken.

A resume reads the lines already written (never rewrites one), runs the blocks they decided that are not recorded,
and takes the next look on the recorded blocks plus the new ones.

What is deliberately not modelled: the statistics (``analysis.serving.sequential``); the speed control's verdict
(judged after the run by the fixed rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, cast

from analysis.comparison.sequential import SequentialDesign
from analysis.serving.sequential import label_look
from conf.schema import Config
from results_schema.codec.io import read_jsonl
from results_schema.records.sequential import SpendingName
from results_schema.records.serving import ServingRun
from results_schema.records.serving_looks import ServingLookDecision, read_serving_looks
from results_schema.rules.floor_rule import is_floor_baseline, is_offload_label
from runners.cases import PhaseCase, ScheduledCase
from runners.outcome.serving import serving_name
from runners.kinds.registry import kind as case_kind
from runners.orchestration.look_design import design
from runners.planning.blocks import block_order
from runners.planning.plan import expand_phase

__all__ = ["is_serving", "serving_block_items", "serving_look_lines", "serving_look_on", "serving_next_look",
           "serving_plan_line"]


def is_serving(cfg: Config, phase: str) -> bool:
    """Whether ``phase``'s kind takes floor looks (``CaseKind.floor_looks``: serving; its looks are this module's)."""
    return case_kind(str(cfg.phases[phase].kind)).floor_looks


def _arms(cfg: Config, phase: str) -> tuple[list[PhaseCase], list[PhaseCase]]:
    """``(every case in config order, the floor baselines)``: a floor baseline is a baseline without a step delay
    (``results_schema.rules.floor_rule.is_floor_baseline``)."""
    cases = expand_phase(phase, cfg.phases[phase], workload=cfg.workload, runtime=cfg.runtime,
                         num_layers=cfg.model.num_layers)
    return cases, [c for c in cases if is_floor_baseline(c.implementation, c.step_delay_ms)]


def _labels(cases: Sequence[PhaseCase]) -> list[PhaseCase]:
    """The offload labels the looks judge: every case whose implementation is not ``baseline`` (a speed control is a
    baseline with a step delay: it is not looked at)."""
    return [c for c in cases if is_offload_label(c.implementation)]


def serving_block_items(cfg: Config, phase: str, lines: Sequence[ServingLookDecision],
                        start_index: int) -> list[ScheduledCase]:
    """Every block of the serving ``phase`` decided so far, in run order, numbered from ``start_index``: blocks
    ``1..looks[0]`` as planned (every case with a repeat there), then each line's ``next_blocks`` of the floor
    baselines and the labels it left open; block ``b`` is repeat ``b - 1`` (ABBA order:
    ``runners.planning.blocks.block_order``, the first case first in odd blocks)."""
    cases, floor = _arms(cfg, phase)
    first = int(cfg.phases[phase].sequential.looks[0])
    bounds: list[tuple[int, set[str]]] = []
    for line in lines:
        if line.next_blocks:
            bounds.append((line.blocks + line.next_blocks, {c.label for c in floor} | set(line.still_open)))
    blocks = [[c for c in cases if c.repeats >= b] for b in range(1, first + 1)]
    for end, open_labels in bounds:
        blocks += [[c for c in cases if c.label in open_labels] for _b in range(len(blocks), end)]
    out: list[ScheduledCase] = []
    for b, arms in enumerate(blocks, start=1):
        for c in block_order(arms[0], arms[1:], b):
            out.append(ScheduledCase(index=start_index + len(out), case=c, repeat=b - 1))
    return out


def serving_runs(run_dir: Path, phase: str) -> list[ServingRun]:
    """Every recorded ``ServingRun`` line of ``phase``."""
    path = run_dir / serving_name(phase)
    return read_jsonl(path, ServingRun) if path.is_file() else []


def serving_look_on(phase: str, d: SequentialDesign, baselines: Sequence[str], labels: Sequence[str],
                    lines: Sequence[ServingLookDecision], runs: Sequence[ServingRun]) -> ServingLookDecision | None:
    """The look that follows ``lines`` on ``runs`` (None when the phase is done): look ``k`` on each open label's
    cells over blocks ``1..looks[k]`` (``analysis.serving.sequential.label_look``); ``labels`` the labels open before
    the first look."""
    k = len(lines)
    if k >= len(d.looks) or (lines and not lines[-1].still_open):
        return None
    open_labels = list(labels) if not lines else list(lines[-1].still_open)
    looked = tuple(label_look(runs, phase, label, d, k) for label in open_labels)
    still = any(x.state == "open" for x in looked)
    nxt = d.looks[k + 1] - d.looks[k] if still and k + 1 < len(d.looks) else 0
    return ServingLookDecision(phase=phase, look=k + 1, blocks=d.looks[k], looks=d.looks, target_pct=d.target_pct,
                               alpha=d.alpha, spending=cast(SpendingName, d.spending), pairing="block",
                               look_alpha=d.look_alphas()[k], baselines=tuple(baselines), labels=looked,
                               next_blocks=nxt)


def serving_next_look(cfg: Config, phase: str, run_dir: Path) -> ServingLookDecision | None:
    """The look that follows the recorded lines of ``phase`` on its recorded processes (None: the phase is done)."""
    cases, floor = _arms(cfg, phase)
    return serving_look_on(phase, design(cfg, phase), [c.label for c in floor], [c.label for c in _labels(cases)],
                           read_serving_looks(run_dir, phase), serving_runs(run_dir, phase))


def serving_plan_line(cfg: Config, phase: str) -> str:
    """The line printed before the first case: what is planned, what the looks may add."""
    d = design(cfg, phase)
    cases, floor = _arms(cfg, phase)
    labels = _labels(cases)
    controls = [c for c in cases if c not in floor and c not in labels]
    arms = len(floor) + len(labels)
    planned = sum(c.repeats for c in cases)
    ctrl = f" + {sum(c.repeats for c in controls)} speed-control process(es), not looked at" if controls else ""
    return (f"sequential {phase}: {planned} processes planned ({d.looks[0]} blocks of {arms} arms: "
            f"{len(floor)} floor baselines + {len(labels)} offload label(s){ctrl}); looks after "
            f"{', '.join(map(str, d.looks))} blocks stop each offload label when every (rate, metric) verdict is "
            f"slower, faster or equivalent (alpha {d.alpha:g} per cell, {d.spending}-type spending, paired t over "
            f"complete blocks against the block's floor baselines); at most {arms * (d.budget - d.looks[0])} more "
            f"processes (budget {d.budget} blocks)")


def serving_look_lines(line: ServingLookDecision) -> list[str]:
    """The console lines of one serving look: one per label, then what happens next."""
    out = [f"sequential {line.phase}/{x.label}: {x.reason}" for x in line.labels]
    out.append(f"sequential {line.phase}: look {line.look} recorded; "
               + (f"{line.next_blocks} more block(s) for {' + '.join(line.baselines)} + {', '.join(line.still_open)}"
                  if line.next_blocks else "phase done"))
    return out
