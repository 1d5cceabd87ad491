"""A synthetic choose-then-confirm run directory (``tests.support.synthetic`` plus ``choose-decisions.jsonl``).

What is modelled: a ``probe`` phase (baseline and the two calibration settings, ``offload_tools.choice``), one
``predict`` decision computed by the runner's own rule (``offload_tools.choice.compute_choice``, so
``analysis.model.choice.recompute`` finds no difference) from the probe's intended means, and a ``verify``
phase measuring the baseline and the chosen settings at their predicted throughput (``slow_last`` scales the
last chosen setting's, to make it miss its interval). ``plan.json`` holds the verify phase's baseline only: the decided cases
come from the decision line, as in a real choose run.

What is deliberately not modelled: refit and front stages (their lines are hand-built in the tests that need
them), the copy bench.
"""

from __future__ import annotations

from pathlib import Path

from offload_tools.choice import ChoiceInputs, calibration_settings, compute_choice
from offload_tools.transfer_model import MeasuredPoint
from results_schema.records.choice import FILE_NAME, ChoiceDecision, FittedPoint, FormFit, PredictedSetting, SettingRef
from results_schema.codec.io import append_jsonl, write_json
from results_schema.records.plan import PLAN_FILE, PlannedPhase
from results_schema.units import GIB
from tests.support.synthetic import TINY_CONFIG, SynthCase, SynthPhase, layer_bytes, run_plan, write_run_dir

BASE_TOK_S = 100.0
SLOT = 4096
"""Bytes of one static slot: the synthetic evidence's static buffers per prefetch step."""


def _calibration_mean(layers: int) -> float:
    """A serial-like cost: each offloaded layer adds 5% of the baseline's step time (the window does not hide it)."""
    return BASE_TOK_S / (1 + 0.05 * layers)


def _probe_cases() -> list[SynthCase]:
    from offload.selection import select_offload_layers

    n = TINY_CONFIG["num_hidden_layers"]
    cases = [SynthCase("baseline", "baseline", mean_tok_s=BASE_TOK_S, sd_tok_s=0.2)]
    for s in calibration_settings(n):
        layers = len(select_offload_layers(n, s.group_size, s.num_in_group))
        cases.append(SynthCase(s.label(), "current", s.group_size, s.num_in_group, s.prefetch_step,
                               mean_tok_s=_calibration_mean(layers), sd_tok_s=0.2))
    return cases


def predict_decision(need_bytes: int, probe: list[SynthCase], *, budget: int = 2) -> ChoiceDecision:
    """The ``predict`` line the runner would write after ``probe`` (intended means as the fitted medians)."""
    n = TINY_CONFIG["num_hidden_layers"]
    lb = [layer_bytes()] * n
    base = [BASE_TOK_S + 0.5, BASE_TOK_S - 0.5]
    noise = (max(base) - min(base)) / BASE_TOK_S * 100
    pts = [c for c in probe if c.implementation != "baseline"]
    inp = ChoiceInputs(num_layers=n, num_prompts=4, layer_bytes=dict(enumerate(lb)), slot=SLOT, baseline_tok_s=BASE_TOK_S,
                       noise_pct=noise, need_bytes=need_bytes, budget=budget,
                       points=[MeasuredPoint(c.group_size, c.num_in_group, c.prefetch_step, c.mean_tok_s) for c in pts])
    ch = compute_choice(inp)
    chosen = tuple(SettingRef(group_size=p.setting.group_size, num_in_group=p.setting.num_in_group,
                              prefetch_step=p.setting.prefetch_step, label=p.setting.label()) for p in ch.chosen)
    return ChoiceDecision(
        stage="predict", need_bytes=need_bytes, need_source=f"need_gib={need_bytes / GIB:g}", implementation="current",
        num_layers=n, num_prompts=4, layer_bytes=tuple(lb), layer_bytes_source="synthetic", slot_bytes=SLOT,
        baseline_phase="probe", baseline_tok_s=tuple(base), noise_pct=noise, copy_bench_bandwidth_bytes_s=None,
        points=tuple(FittedPoint(group_size=c.group_size, num_in_group=c.num_in_group, prefetch_step=c.prefetch_step,
                                 throughput_tok_s=c.mean_tok_s, phase="probe", processes=2) for c in pts),
        fits=tuple(FormFit(form=f, bandwidth_bytes_s=m.bandwidth_bytes_s, bandwidth_source=m.bandwidth_source,
                           rms_error_pct=m.fit_rms_error_pct or 0.0, max_point_error_pct=m.max_point_error_pct or 0.0)
                   for f, m in ch.fits.items()),
        form=ch.form, form_reason=ch.form_reason, half_width_pct=ch.half_width_pct,
        predictions=tuple(PredictedSetting(
            group_size=p.setting.group_size, num_in_group=p.setting.num_in_group, prefetch_step=p.setting.prefetch_step,
            offloaded_layers=p.offloaded_layers, released_bytes=p.released_bytes, predicted_tok_s=p.tok_s,
            other_form_tok_s=ch.other_form_tok_s[p.setting], retention=p.retention, retention_low=p.retention_low,
            retention_high=p.retention_high, class_id=p.class_id) for p in ch.predictions),
        checked=(), budget=budget, chosen=chosen, decided_phase=None, trusted=True,
        note=f"after the probe: verify {', '.join(c.label for c in chosen)}", processes_every_candidate=99)


def write_choose_run(run_dir: Path, *, need_layers: float = 2.5, slow_last: float = 1.0,
                     repeats: int = 3) -> tuple[Path, ChoiceDecision]:
    """Write the run (module docstring); the need is ``need_layers`` layers' bytes. Returns the run and its line."""
    probe_cases = _probe_cases()
    d = predict_decision(int(need_layers * layer_bytes()), probe_cases)
    preds = {(p.group_size, p.num_in_group, p.prefetch_step): p for p in d.predictions}
    chosen = [SynthCase(c.label, "current", c.group_size, c.num_in_group, c.prefetch_step,
                        mean_tok_s=preds[(c.group_size, c.num_in_group, c.prefetch_step)].predicted_tok_s
                        * (slow_last if i == len(d.chosen) - 1 else 1.0), sd_tok_s=0.2) for i, c in enumerate(d.chosen)]
    base = SynthCase("baseline", "baseline", mean_tok_s=BASE_TOK_S, sd_tok_s=0.2)
    probe = SynthPhase("probe", probe_cases, repeats=2)
    write_run_dir(run_dir, [probe, SynthPhase("verify", [base, *chosen], repeats=repeats)])
    plan = run_plan([probe, SynthPhase("verify", [base], repeats=repeats)])
    write_json(run_dir / PLAN_FILE, plan)
    decided = run_plan([SynthPhase("verify", chosen, repeats=repeats)]).phases[0]
    d = d.model_copy(update={"decided_phase": PlannedPhase.model_validate(decided.model_dump())})
    append_jsonl(run_dir / FILE_NAME, ChoiceDecision.model_validate(d.model_dump()))
    return run_dir, d
