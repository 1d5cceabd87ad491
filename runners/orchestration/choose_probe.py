"""A choose run's probe before anything is predicted: its processes by label, a contended one re-measured, the stop.

What is modelled (``conf.schema.ChooseConfig.probe_remeasures``; the records ``results_schema.records.choice``):

* a probe process is *contended* when its record says foreign work shared the host while it measured
  (``BenchRecord.host_load.contended``, the rule ``results_schema.records.host_load.is_contended``); nothing is
  fitted, predicted or checked from it (``uncontended_by_label``);
* a label of the probe (the baseline, each calibration setting) with fewer uncontended processes than the probe's
  design runs (``phases.<probe>`` repeats) has its contended processes re-measured in fresh processes, as new repeats
  of the same case, at most ``probe_remeasures`` per label over the run: one ``remeasure`` decision line per round,
  appended before those processes start, so a resume runs what it decided and never decides it twice;
* once the re-measures are spent, a label still below what a prediction needs (``MIN_PROBE_BASELINES`` uncontended
  baselines, one uncontended process per calibration setting) stops the choice: one ``stopped`` decision line whose
  note is the run's last line (the contended processes with their foreign cores, what is left, what to do).

What is deliberately not modelled: a probe process that failed (no record: the run's failure lines say so) or
whose tokens differed (``bad``: the run is INVALID for it); which foreign process loaded the host.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Sequence

from conf.schema import Config
from results_schema.records.base import PhaseKind
from results_schema.records.choice import PROBE_STAGES, ChoiceDecision, Stage
from results_schema.records.copy_bench import CopyBench, FILE_NAME as BENCH, H2DBench, H2D_FILE_NAME as H2D
from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.records.plan import PlannedPhase
from results_schema.rules.spread_rule import spread_pct
from runners.orchestration.rundir import planned_case
from runners.cases import PhaseCase, ScheduledCase
from runners.planning.choose_plan import ChooseNeed
from runners.planning.plan import expand

__all__ = ["MIN_PROBE_BASELINES", "contended", "copy_bench_bandwidth", "phase_runs", "probe_decision", "probe_items",
           "uncontended_by_label"]

MIN_PROBE_BASELINES = 2
"""Uncontended probe baselines a prediction needs (a step time and a spread); the probe runs exactly this many."""


def phase_runs(run_dir: Path, phase: str) -> list[CaseRun]:
    """The records of ``<phase>-runs.jsonl`` (none: no such file)."""
    path = run_dir / f"{phase}-runs.jsonl"
    return read_jsonl(path, CaseRun) if path.is_file() else []


def contended(r: CaseRun) -> bool:
    """The process measured beside foreign work (``BenchRecord.host_load.contended``)."""
    return r.record.host_load is not None and r.record.host_load.contended


def uncontended_by_label(runs: Sequence[CaseRun], bad: set[str], phase: str) -> dict[str, list[CaseRun]]:
    """Uncontended processes of ``phase`` by label (a label whose tokens differed, ``phase/label`` in ``bad``, left
    out): nothing is fitted, predicted or checked from a process that measured beside foreign work."""
    out: dict[str, list[CaseRun]] = {}
    for r in runs:
        if f"{phase}/{r.record.label}" not in bad and not contended(r):
            out.setdefault(r.record.label, []).append(r)
    return out


def copy_bench_bandwidth(run_dir: Path) -> float | None:
    """The run's copy bench (B/s): ``copy-bench.json``'s plain copy (CPU) or ``h2d-bench.json`` (CUDA / NPU); None:
    neither measured."""
    bench_path, h2d_path = run_dir / BENCH, run_dir / H2D
    return (read_json(bench_path, CopyBench).plain_copy_bandwidth_bytes_s if bench_path.is_file() else
            read_json(h2d_path, H2DBench).bandwidth_bytes_s if h2d_path.is_file() else None)


def _probe_cases(cfg: Config, known: ChooseNeed) -> dict[str, PhaseCase]:
    """The probe phase's cases as planned (label -> case; ``repeats``: the probe's design)."""
    return {c.label: c for c in expand(cfg, choose=known)[str(cfg.choose.probe_phase)]}


def probe_items(cfg: Config, known: ChooseNeed, decisions: Sequence[ChoiceDecision]) -> list[ScheduledCase]:
    """The probe processes the ``remeasure`` decisions added, in decision order (index from 0): each label's new
    repeats numbered after its planned ones and the re-measures decided before."""
    cases = _probe_cases(cfg, known)
    nxt = {label: c.repeats for label, c in cases.items()}
    out: list[ScheduledCase] = []
    for d in decisions:
        if d.stage != "remeasure" or d.decided_phase is None:
            continue
        for pc in d.decided_phase.cases:
            for _ in range(pc.repeats):
                out.append(ScheduledCase(index=len(out), case=cases[pc.label], repeat=nxt[pc.label]))
                nxt[pc.label] += 1
    return out


def _label_of(process: str) -> str:
    """``label`` of ``phase/label-rN``."""
    return process.split("/", 1)[1].rsplit("-r", 1)[0]


def _load_text(r: CaseRun) -> str:
    hl = r.record.host_load
    assert hl is not None  # a contended record has its reading
    return f"{hl.foreign_cores:.2f} foreign cores, steal {hl.steal_fraction:.1%}"


def probe_decision(cfg: Config, run_dir: Path, known: ChooseNeed, bad: set[str],
                   decisions: Sequence[ChoiceDecision]) -> ChoiceDecision | None:
    """The next probe decision (module docstring): ``remeasure`` the contended processes of labels short of the
    probe's design, ``stopped`` when a label stays below what a prediction needs with its re-measures spent, else
    None (the probe is complete: predict).

    Args:
        cfg: the run's config (``choose.probe_phase``, ``choose.probe_remeasures``, ``choose.verify_phase``).
        run_dir: the run directory (``<probe>-runs.jsonl``).
        known: the run's need and model sizes (``runners.planning.choose_plan.choose_need``).
        bad: ``phase/label`` of every case whose tokens differed (never re-measured: the run is INVALID for it).
        decisions: the decision lines written so far (only ``remeasure`` ones precede a prediction).
    """
    probe = str(cfg.choose.probe_phase)
    cases = _probe_cases(cfg, known)
    runs = [r for r in phase_runs(run_dir, probe) if f"{probe}/{r.record.label}" not in bad]
    if not any(contended(r) for r in runs) or not any(r.record.label == "baseline" for r in runs):
        return None
    quiet = uncontended_by_label(runs, bad, probe)
    replaced = {p for d in decisions if d.stage == "remeasure" for p in d.remeasured}
    spent = Counter(_label_of(p) for p in replaced)
    budget = cfg.choose.probe_remeasures
    todo: list[CaseRun] = []
    for label, case in cases.items():
        busy = [r for r in runs if r.record.label == label and contended(r)
                and f"{probe}/{label}-r{r.record.repeat}" not in replaced]
        todo += busy[:max(0, min(case.repeats - len(quiet.get(label, [])), budget - spent[label]))]
    if todo:
        return _remeasure(cfg, run_dir, known, runs, todo, spent, cases)
    need = {label: MIN_PROBE_BASELINES if label == "baseline" else 1 for label in cases}
    short = [label for label in cases if len(quiet.get(label, [])) < need[label]
             and any(r.record.label == label and contended(r) for r in runs)]
    return _stopped(cfg, run_dir, known, runs, short, quiet, need) if short else None


def _remeasure(cfg: Config, run_dir: Path, known: ChooseNeed, runs: Sequence[CaseRun], todo: Sequence[CaseRun], spent: Counter[str],
               cases: dict[str, PhaseCase]) -> ChoiceDecision:
    probe, budget = str(cfg.choose.probe_phase), cfg.choose.probe_remeasures
    added = Counter(r.record.label for r in todo)
    planned = tuple(planned_case(dataclasses.replace(cases[label], repeats=n)) for label, n in added.items())
    phase = PlannedPhase(name=probe, kind=PhaseKind(cases[next(iter(added))].kind), cases=planned,
                         processes=sum(added.values()))
    named = ", ".join(f"{probe}/{r.record.label}-r{r.record.repeat} ({_load_text(r)})" for r in todo)
    left = ", ".join(f"{label} {spent[label] + n} of {budget}" for label, n in added.items())
    note = (f"contended probe process(es) (foreign work on the host while they measured): {named}; re-measured in "
            f"fresh processes before anything is predicted (re-measures used per label: {left}); nothing is fitted "
            f"from a contended process")
    return _record(cfg, run_dir, known, runs, "remeasure", note, tuple(f"{probe}/{r.record.label}-r{r.record.repeat}"
                                                               for r in todo), phase)


def _stopped(cfg: Config, run_dir: Path, known: ChooseNeed, runs: Sequence[CaseRun], short: Sequence[str],
             quiet: dict[str, list[CaseRun]], need: dict[str, int]) -> ChoiceDecision:
    probe, budget = str(cfg.choose.probe_phase), cfg.choose.probe_remeasures
    busy = [r for r in runs if r.record.label in short and contended(r)]
    named = ", ".join(f"{probe}/{r.record.label}-r{r.record.repeat} ({_load_text(r)})" for r in busy)
    left = "; ".join(f"{len(quiet.get(label, []))} uncontended {label} process(es), {need[label]} needed"
                     for label in short)
    note = (f"choose: STOPPED before predicting: the probe stayed contended (foreign work on the host while it "
            f"measured) after up to {budget} re-measure(s) per label: {named}; left: {left}; nothing is predicted, verified "
            f"or recommended: rerun the choice on a quiet host, or raise choose.probe_remeasures (now {budget})")
    return _record(cfg, run_dir, known, runs, "stopped", note, tuple(f"{probe}/{r.record.label}-r{r.record.repeat}"
                                                             for r in busy), None)


def _record(cfg: Config, run_dir: Path, known: ChooseNeed, runs: Sequence[CaseRun], stage: Stage, note: str,
            remeasured: tuple[str, ...], decided: PlannedPhase | None) -> ChoiceDecision:
    """A probe-stage decision line (``results_schema.records.choice.PROBE_STAGES``): no model, no setting chosen;
    ``baseline_tok_s``: every probe baseline recorded so far, contended included (nothing is fitted from them)."""
    assert stage in PROBE_STAGES
    base = tuple(r.record.throughput_tok_s for r in runs if r.record.label == "baseline")
    sizes = known.sizes
    return ChoiceDecision(
        stage=stage, need_bytes=known.need, need_source=known.text, implementation=str(cfg.choose.implementation),
        num_layers=cfg.model.num_layers, num_prompts=runs[0].record.workload.num_prompts,
        layer_bytes=sizes.layer_bytes, layer_bytes_source=sizes.source, slot_bytes=sizes.slot,
        baseline_phase=str(cfg.choose.probe_phase), baseline_tok_s=base, noise_pct=spread_pct(base) or 0.0,
        copy_bench_bandwidth_bytes_s=copy_bench_bandwidth(run_dir), points=(), fits=(), form=None,
        form_reason="no model fitted: the probe is not complete", half_width_pct=0.0, predictions=(), checked=(),
        budget=0, chosen=(), decided_phase=decided, trusted=True, note=note, processes_every_candidate=0,
        remeasured=remeasured, unrun_phase=cfg.choose.verify_phase if stage == "stopped" else None)
