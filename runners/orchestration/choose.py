"""Choose, then confirm, while the run goes: predict after the probe, verify what decides, refit once, fall back.

What is modelled (``conf.schema.ChooseConfig``; the rule is ``offload_tools.choice``, the records
``results_schema.records.choice``):

1. after the probe phase: the copy bench (CPU runtime; ``runners.orchestration.close.copy_bench``), the probe's
   baselines (step time, noise floor) and calibration settings read from ``<probe>-runs.jsonl``; both model forms
   fitted, every distinct setting predicted, classes formed, the settings to verify chosen; one
   ``ChoiceDecision`` line (stage ``predict``) appended to ``choose-decisions.jsonl`` before any of them starts;
2. the verify phase: its baseline and every decided setting, ``repeats`` processes each, rotated
   (``verify_items``), through the same executor and finaliser as every phase;
3. every verified setting's measured retention (median of its processes / median of the phase's baselines)
   checked against its predicted interval; a miss refits the model with every measured point and verifies the
   new choice once (stage ``refit``); a miss after the refit marks the model untrusted and measures the predicted
   front instead, within ``front_budget`` (stage ``front``). The recommendation is never taken here: analysis
   decides from the measured points only.

A need of 0 bytes writes one ``unnecessary`` line and verifies nothing. A resume reads the lines already written
and continues the same decision (``decided_items`` gives ``runners.orchestration.stages.make_plan`` the decided
cases, so that a resume's bookkeeping sees them).

What is deliberately not modelled: statistics of the decision (``analysis.comparison``).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

from analysis.model.probe_noise import probe_noise
from conf.schema import Config
from offload_tools.choice import ChoiceInputs, Setting, compute_choice, front
from offload_tools.transfer_model import MeasuredPoint
from results_schema.records.choice import (FILE_NAME, PROBE_STAGES, ChoiceDecision, FittedPoint, SettingRef, Stage,
                                           VerifiedCheck, read_decisions)
from results_schema.records.models import BenchRecord
from runners.cases import ScheduledCase
from runners.planning.choose_plan import ChooseNeed
from conf.schema_matrix import PointConfig
from offload_tools.choice import distinct_settings, released_bytes
from results_schema.records.base import PhaseKind
from results_schema.records.choice import Form, FormFit, NoiseArm, PredictedSetting
from results_schema.codec.io import append_jsonl
from results_schema.records.plan import PlannedPhase
from runners.orchestration.choose_probe import (copy_bench_bandwidth, phase_runs, probe_decision, probe_items,
                                                uncontended_by_label)
from runners.orchestration.close import copy_bench
from runners.orchestration.execute import RunState, run_phases
from runners.orchestration.run_objects import OpenRun, Plan
from runners.orchestration.rundir import planned_case
from runners.planning.choose_plan import with_choose
from runners.planning.plan import expand_phase, schedule
from results_schema.rules.spread_rule import spread_pct
from results_schema.units import GIB

if TYPE_CHECKING:
    from rich.console import Console

    from runners.orchestration.host_measures import CopyBenchRun

REFIT_BUDGET = 1
"""Settings a refit verifies: the refitted model's new best (the issue's "verify the new choice once")."""

__all__ = ["active", "choose_stage", "decided_items", "read_decisions", "run_choose", "verify_items"]


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


def decided_items(cfg: Config, run_dir: Path | None, start_index: int, known: ChooseNeed | None) -> list[Any]:
    """On resume: the probe's re-measures and the verify phase's items from the decisions already written, numbered
    from ``start_index``; else none (``known``: the plan's ``choose_need``)."""
    if run_dir is None or known is None or not active(cfg):
        return []
    decisions = read_decisions(run_dir)
    if not decisions:
        return []
    items = probe_items(cfg, known, decisions) + (
        verify_items(cfg, decided_settings(decisions), 0) if has_verify(cfg, known) else [])
    return [dataclasses.replace(sc, index=start_index + i) for i, sc in enumerate(items)]


# ----------------------------------------------------------------------------- what was measured


def fitted_processes(run_dir: Path, phases: Sequence[str], bad: set[str]) -> tuple[str, ...]:
    """``phase/label-rN`` of every process a fit uses (uncontended, tokens as the baseline's), in file order."""
    return tuple(f"{ph}/{r.record.label}-r{r.record.repeat}" for ph in phases
                 for rs in uncontended_by_label(phase_runs(run_dir, ph), bad, ph).values() for r in rs)


def _bad_labels(mismatches: Sequence[str]) -> set[str]:
    """``phase/label`` of every case whose tokens differed (``RunState.token_mismatches``: ``phase/label-rN: ...``)."""
    return {m.split(":", 1)[0].rsplit("-r", 1)[0] for m in mismatches}


def measured_points(run_dir: Path, phase: str, scale: float, bad: set[str]) -> list[FittedPoint]:
    """Offloaded settings of ``phase`` (tokens as the baseline's) as fitted points: median retention vs the phase's
    baseline median, times ``scale`` (the probe's baseline median, tok/s)."""
    groups = uncontended_by_label(phase_runs(run_dir, phase), bad, phase)
    base = [r.record.throughput_tok_s for r in groups.get("baseline", [])]
    if not base:
        return []
    b = statistics.median(base)
    out = []
    for label, rs in groups.items():
        ev = rs[0].evidence
        if label == "baseline" or ev.wrapped_count == 0:
            continue
        med = statistics.median(r.record.throughput_tok_s for r in rs)
        out.append(FittedPoint(group_size=ev.offload_group_size, num_in_group=ev.offload_num_in_group,
                               prefetch_step=ev.offload_prefetch_step, throughput_tok_s=med / b * scale,
                               phase=phase, processes=len(rs)))
    return out


# ----------------------------------------------------------------------------- one decision


@dataclasses.dataclass(frozen=True)
class _Context:
    cfg: Config
    run_dir: Path
    known: ChooseNeed
    baselines: tuple[float, ...]
    num_prompts: int
    bench: float | None
    bad: set[str]
    baseline_records: tuple[Any, ...] = ()


def _context(cfg: Config, run_dir: Path, bad: set[str], known: ChooseNeed) -> _Context | None:
    probe = cfg.choose.probe_phase
    assert probe is not None
    runs = uncontended_by_label(phase_runs(run_dir, probe), bad, probe).get("baseline", [])
    if not runs:
        return None
    return _Context(cfg, run_dir, known, tuple(r.record.throughput_tok_s for r in runs),
                    runs[0].record.workload.num_prompts, copy_bench_bandwidth(run_dir), bad,
                    tuple(r.record for r in runs))


def _noise_pct(xs: Sequence[float]) -> float:
    return spread_pct(xs) or 0.0


def _noise_arms(ctx: _Context) -> tuple[NoiseArm, ...]:
    """Every probe arm with its uncontended per-process throughput: the prediction interval's noise input."""
    probe = str(ctx.cfg.choose.probe_phase)
    groups = uncontended_by_label(phase_runs(ctx.run_dir, probe), ctx.bad, probe)
    return tuple(NoiseArm(label=label, tok_s=tuple(r.record.throughput_tok_s for r in rs))
                 for label, rs in sorted(groups.items()))


def _candidates(ctx: _Context, need: int) -> int:
    sizes = ctx.known.sizes
    layer = dict(enumerate(sizes.layer_bytes))
    n = sum(1 for s in distinct_settings(ctx.cfg.model.num_layers)
            if released_bytes(s, layer, sizes.slot, ctx.cfg.model.num_layers) >= need)
    return (n + 1) * ctx.cfg.phases[ctx.cfg.choose.verify_phase].repeats


def _record(ctx: _Context, stage: Stage, points: Sequence[FittedPoint], checked: Sequence[VerifiedCheck],
            exclude: Sequence[Setting], budget: int, trusted: bool) -> ChoiceDecision:

    cfg, sizes = ctx.cfg, ctx.known.sizes
    need, text = ctx.known.need, ctx.known.text
    arms = _noise_arms(ctx)
    noise = probe_noise({a.label: a.tok_s for a in arms})
    inp = ChoiceInputs(num_layers=cfg.model.num_layers, num_prompts=ctx.num_prompts,
                       layer_bytes=dict(enumerate(sizes.layer_bytes)), slot=sizes.slot,
                       baseline_tok_s=statistics.median(ctx.baselines), noise_pct=noise.half_width_pct,
                       points=[MeasuredPoint(p.group_size, p.num_in_group, p.prefetch_step, p.throughput_tok_s)
                               for p in points], need_bytes=need, budget=budget, exclude=tuple(exclude),
                       bench_bandwidth_bytes_s=ctx.bench)
    ch = compute_choice(inp)
    chosen = list(ch.chosen) if stage != "front" else front(ch.predictions, need, exclude)[:budget]
    impl = str(cfg.choose.implementation)
    refs = tuple(SettingRef(group_size=p.setting.group_size, num_in_group=p.setting.num_in_group,
                            prefetch_step=p.setting.prefetch_step, label=p.setting.label(impl)) for p in chosen)
    note = _note(stage, refs, checked, need)
    return ChoiceDecision(
        stage=stage, need_bytes=need, need_source=text, implementation=impl, num_layers=cfg.model.num_layers,
        num_prompts=ctx.num_prompts, layer_bytes=sizes.layer_bytes, layer_bytes_source=sizes.source,
        slot_bytes=sizes.slot, baseline_phase=str(cfg.choose.probe_phase), baseline_tok_s=ctx.baselines,
        noise_pct=inp.noise_pct, copy_bench_bandwidth_bytes_s=ctx.bench, points=tuple(points),
        fits=tuple(FormFit(form=cast(Form, f), bandwidth_bytes_s=m.bandwidth_bytes_s, bandwidth_source=m.bandwidth_source,
                           rms_error_pct=m.fit_rms_error_pct or 0.0, max_point_error_pct=m.max_point_error_pct or 0.0)
                   for f, m in ch.fits.items()),
        form=cast(Form, ch.form), form_reason=ch.form_reason, half_width_pct=ch.half_width_pct,
        predictions=tuple(PredictedSetting(
            group_size=p.setting.group_size, num_in_group=p.setting.num_in_group, prefetch_step=p.setting.prefetch_step,
            offloaded_layers=p.offloaded_layers, released_bytes=p.released_bytes, predicted_tok_s=p.tok_s,
            other_form_tok_s=ch.other_form_tok_s[p.setting], retention=p.retention, retention_low=p.retention_low,
            retention_high=p.retention_high, class_id=p.class_id) for p in ch.predictions),
        checked=tuple(checked), budget=budget, chosen=refs, decided_phase=None, trusted=trusted, note=note,
        processes_every_candidate=_candidates(ctx, need),
        fitted_processes=fitted_processes(ctx.run_dir, sorted({str(cfg.choose.probe_phase), *(p.phase for p in points)}),
                                          ctx.bad), noise_arms=arms)


def _note(stage: str, refs: Sequence[SettingRef], checked: Sequence[VerifiedCheck], need: int) -> str:
    labels = ", ".join(r.label for r in refs) or "nothing"
    missed = [c.label for c in checked if c.missed]
    head = {"predict": f"after the probe: verify {labels}",
            "refit": f"{', '.join(missed)} missed the prediction: refitted with every measured point; verify {labels}",
            "front": f"{', '.join(missed)} still missed after the refit: the model is not trusted on this host; "
                     f"the predicted front is measured instead: {labels}"}[stage]
    return f"{head} (need {need / GIB:.4g} GiB)"


def free_device_bytes(baselines: Sequence[BenchRecord]) -> int | None:
    """Device memory left free beside the baseline (bytes): the smallest ``device_memory_total_bytes -
    device_memory_peak_load_bytes`` over the baseline processes (``BenchRecord``); None where a process lacks either
    (the CPU runtime, whose "device" is host RAM; a device whose memory could not be read)."""
    free = [r.device_memory_total_bytes - r.device_memory_peak_load_bytes for r in baselines
            if r.device_memory_total_bytes is not None and r.device_memory_peak_load_bytes is not None]
    return min(free) if free and len(free) == len(baselines) else None


def unnecessary(ctx: _Context, note: str = "offload unnecessary: a need of 0 bytes is met by the baseline "
                                             "(no verify stage)") -> ChoiceDecision:
    """The decision that the need is met without offload (a need of 0, or device memory already free): the
    baseline, no verify stage."""
    cfg, sizes = ctx.cfg, ctx.known.sizes
    return ChoiceDecision(
        stage="unnecessary", need_bytes=ctx.known.need, need_source=ctx.known.text,
        implementation=str(cfg.choose.implementation), num_layers=cfg.model.num_layers, num_prompts=ctx.num_prompts,
        layer_bytes=sizes.layer_bytes, layer_bytes_source=sizes.source, slot_bytes=sizes.slot, baseline_phase=str(cfg.choose.probe_phase),
        baseline_tok_s=ctx.baselines, noise_pct=_noise_pct(ctx.baselines), copy_bench_bandwidth_bytes_s=ctx.bench,
        points=(), fits=(), form=None, form_reason="no model needed: the need is met without offload",
        half_width_pct=0.0, predictions=(), checked=(), budget=0, chosen=(), decided_phase=None, trusted=True,
        note=note, processes_every_candidate=0)


def checks(ctx: _Context, decision: ChoiceDecision, settings: Sequence[SettingRef]) -> list[VerifiedCheck]:
    """Every one of ``settings`` measured in the verify phase, beside its interval under ``decision``."""
    verify = ctx.cfg.choose.verify_phase
    groups = uncontended_by_label(phase_runs(ctx.run_dir, verify), ctx.bad, verify)
    base = [r.record.throughput_tok_s for r in groups.get("baseline", [])]
    preds = {(p.group_size, p.num_in_group, p.prefetch_step): p for p in decision.predictions}
    out = []
    for c in settings:
        rs = groups.get(c.label, [])
        if not rs or not base:
            continue
        p = preds[(c.group_size, c.num_in_group, c.prefetch_step)]
        r = statistics.median(x.record.throughput_tok_s for x in rs) / statistics.median(base)
        out.append(VerifiedCheck(label=c.label, predicted_retention=p.retention, retention_low=p.retention_low,
                                 retention_high=p.retention_high, measured_retention=r, processes=len(rs),
                                 missed=not p.retention_low <= r <= p.retention_high))
    return out


def next_decision(ctx: _Context, decisions: Sequence[ChoiceDecision]) -> ChoiceDecision | None:
    """The decision that follows ``decisions`` (None: the choice is complete)."""
    cfg = ctx.cfg
    probe = str(cfg.choose.probe_phase)
    if not decisions:
        need = ctx.known.need
        if need == 0:
            return unnecessary(ctx)
        free = free_device_bytes(ctx.baseline_records)
        if free is not None and need <= free:
            return unnecessary(ctx, f"offload unnecessary: the device already has {free / GIB:.4g} GiB free beside "
                                    f"the baseline's peak (total - peak used, every probe baseline), more than the need "
                                    f"of {need / GIB:.4g} GiB; give vLLM that memory (gpu_memory_utilization) instead")
        pts = measured_points(ctx.run_dir, probe, statistics.median(ctx.baselines), ctx.bad)
        return _record(ctx, "predict", pts, (), (), cfg.choose.verify_budget, True) if pts else None
    last = decisions[-1]
    if last.stage in ("front", "unnecessary"):
        return None
    # predict: its chosen settings; refit: every verified one (the refitted model holds them all)
    settings = last.chosen if last.stage == "predict" else tuple(c for d in decisions for c in d.chosen)
    found = checks(ctx, last, settings)
    if not any(c.missed for c in found):
        return None
    scale = statistics.median(ctx.baselines)
    pts = (measured_points(ctx.run_dir, probe, scale, ctx.bad)
           + measured_points(ctx.run_dir, cfg.choose.verify_phase, scale, ctx.bad))
    done = [Setting(p.group_size, p.num_in_group, p.prefetch_step) for p in pts]
    if last.stage == "predict":
        return _record(ctx, "refit", pts, found, done, REFIT_BUDGET, True)
    return _record(ctx, "front", pts, found, done, cfg.choose.front_budget, False)


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
        items += verify_items(cfg, decided_settings(choice), len(items)) if choice and verify else []
        if items and run_stage(items):
            return items
        if any(d.stage == "stopped" for d in decisions):
            return items
        bad = _bad_labels(state.token_mismatches)
        step = None if choice else probe_decision(cfg, run_dir, known, bad, decisions)
        if step is not None:  # a stop's line is the run's last (runners.orchestration.close.verdict_line)
            append_jsonl(run_dir / FILE_NAME, step)
            if step.stage == "remeasure":
                console.print(f"choose (remeasure): {step.note}", markup=False)
            continue
        ctx = _context(cfg, run_dir, bad, known)
        if ctx is None:
            console.print("choose: no baseline of the probe recorded; nothing can be predicted", markup=False)
            return items
        nxt = next_decision(ctx, choice)
        if nxt is None:
            return items
        new = verify_items(cfg, decided_settings(choice) + decided_settings([nxt]), 0) if verify else []
        added = [sc for sc in new if sc.case.label in {c.label for c in nxt.chosen}]
        nxt = nxt.model_copy(update={"decided_phase": _planned(cfg, added)}) if added else nxt
        append_jsonl(run_dir / FILE_NAME, nxt)
        console.print(f"choose ({nxt.stage}): {nxt.note}", markup=False)
        if not verify:
            return items


def has_verify(cfg: Config, known: ChooseNeed | None) -> bool:
    """Whether the run has a verify phase as planned (``runners.planning.choose_plan.with_choose``: a need of 0
    drops it; ``known``: the plan's ``choose_need``)."""

    return active(cfg) and cfg.choose.verify_phase in with_choose(cfg, known).phases


def _planned(cfg: Config, added: Sequence[ScheduledCase]) -> Any:
    """The verify phase's cases a decision adds, as ``plan.json`` holds cases (``results_schema.records.plan.PlannedPhase``)."""

    cases = tuple(dict.fromkeys(sc.case for sc in added))
    planned = tuple(planned_case(c) for c in cases)
    return PlannedPhase(name=cfg.choose.verify_phase, kind=PhaseKind(cases[0].kind), cases=planned,
                        processes=sum(c.repeats for c in planned))


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
