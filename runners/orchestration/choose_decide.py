"""A choose run's decisions after its probe: what was measured, the model fitted, the settings decided.

What is modelled (``conf.schema.ChooseConfig``; the rule is ``offload_tools.choice``, the records
``results_schema.records.choice``):

* what was measured: the probe's and the verify phase's uncontended processes (tokens as the baseline's) as fitted
  points (median retention against the phase's baseline median, scaled to the probe's baseline median);
* one decision (``ChoiceDecision``): both model forms fitted, every distinct setting predicted, classes formed, the
  settings to verify chosen (stage ``predict``); each verified setting's measured retention checked against its
  predicted interval; a miss refits the model with every measured point and verifies its new best once (stage
  ``refit``); a miss after the refit marks the model untrusted and chooses the predicted front (stage ``front``);
  a need met without offload (0 bytes, or device memory already free) is stage ``unnecessary``; with a sequential
  verify phase (``choose.verify_looks``) a decision that chooses settings declares their look series
  (``VerifyDesign``: looks, and the target from the prediction alone: ``offload_tools.choice.verify_target``).

What is deliberately not modelled: the loop that runs the decided cases (``runners.orchestration.choose``), the
probe's re-measures (``runners.orchestration.choose_probe``), statistics of the recommendation (``analysis``).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any, Sequence, cast

from analysis.model.probe_noise import probe_noise
from conf.schema import Config
from offload_tools.choice import (ChoiceInputs, Prediction, Setting, compute_choice, distinct_settings, front,
                                  released_bytes, verify_target)
from offload_tools.transfer_model import MeasuredPoint
from results_schema.records.choice import (ChoiceDecision, FittedPoint, Form, FormFit, NoiseArm, PredictedSetting,
                                           SettingRef, Stage, VerifiedCheck, VerifyDesign)
from results_schema.records.models import BenchRecord
from results_schema.records.sequential import DEFAULT_ALPHA, DEFAULT_SPENDING
from results_schema.rules.spread_rule import spread_pct
from results_schema.units import GIB
from runners.orchestration.choose_probe import copy_bench_bandwidth, phase_runs, uncontended_by_label
from runners.planning.choose_plan import ChooseNeed

REFIT_BUDGET = 1
"""Settings a refit verifies: the refitted model's new best (the issue's "verify the new choice once")."""

__all__ = ["REFIT_BUDGET", "bad_labels", "checks", "context", "design_words", "fitted_processes", "free_device_bytes",
           "measured_points", "next_decision", "unnecessary"]


# ----------------------------------------------------------------------------- what was measured


def fitted_processes(run_dir: Path, phases: Sequence[str], bad: set[str]) -> tuple[str, ...]:
    """``phase/label-rN`` of every process a fit uses (uncontended, tokens as the baseline's), in file order."""
    return tuple(f"{ph}/{r.record.label}-r{r.record.repeat}" for ph in phases
                 for rs in uncontended_by_label(phase_runs(run_dir, ph), bad, ph).values() for r in rs)


def bad_labels(mismatches: Sequence[str]) -> set[str]:
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
    first_block: int = 0  # a sequential verify phase: blocks its earlier series cover (the next one starts after)


def context(cfg: Config, run_dir: Path, bad: set[str], known: ChooseNeed) -> _Context | None:
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
    design = _verify_design(ctx, ch.predictions, exclude) if refs else None
    note = _note(stage, refs, checked, need) + (f"; {design_words(design)}" if design is not None else "")
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
                                          ctx.bad), noise_arms=arms, verify_design=design)


def _verify_design(ctx: _Context, preds: Sequence[Prediction], exclude: Sequence[Setting]) -> VerifyDesign | None:
    """A sequential verify phase (``choose.verify_looks``): the look series of this decision's settings, its target
    from the prediction alone (``offload_tools.choice.verify_target``); None: fixed repeats."""
    ch = ctx.cfg.choose
    if not ch.verify_looks:
        return None
    t = verify_target(preds, ctx.known.need, exclude, float(ch.verify_target_floor_pct))
    impl = str(ch.implementation)
    return VerifyDesign(looks=tuple(int(n) for n in ch.verify_looks), target_pct=t.target_pct,
                        floor_pct=float(ch.verify_target_floor_pct), predicted_gap_pct=t.gap_pct,
                        best=t.best.label(impl) if t.best else None,
                        runner_up=t.runner_up.label(impl) if t.runner_up else None, alpha=DEFAULT_ALPHA,
                        spending=DEFAULT_SPENDING, first_block=ctx.first_block)


def design_words(d: VerifyDesign) -> str:
    """The decision line's words for its verify series: looks, target and where the target comes from."""
    gap = (f"the predicted gap between {d.best} and the runner-up {d.runner_up}, {d.predicted_gap_pct:.1f}%"
           if d.predicted_gap_pct is not None else "no runner-up")
    return (f"sequential verify from block {d.first_block + 1}: looks after {', '.join(map(str, d.looks))} blocks, "
            f"target {d.target_pct:.1f}% ({gap}; floor {d.floor_pct:g}%)")


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
