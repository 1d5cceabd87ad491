"""Schema of ``choose-decisions.jsonl``: every decision of a choose-then-confirm run, beside ``plan.json``.

What is modelled: one line per decision the runner took while the run went (``offload_tools.choice``), appended
with fsync before the cases it decided start: its stage (``predict`` after the probe, ``refit`` after a
verified point missed its prediction, ``front`` when the refitted model still missed: the predicted front is
measured instead; ``unnecessary``: a need of 0 bytes, the baseline needs no verify stage), its inputs (the
need, the layer bytes and where they came from, the probe baselines and their noise floor, the copy bench,
the measured points fitted), both fitted model forms and the form the data chose with the reason, every
distinct setting's prediction with its interval and class, the verified points it checked, and the settings
it decided to measure in the verify phase (``decided_phase``, in the plan's own terms). Before the first
prediction, a probe process measured beside foreign work (``BenchRecord.host_load.contended``) is re-measured in
a fresh process: stage ``remeasure`` names the contended processes (``remeasured``) and adds the fresh ones to the
probe phase (``decided_phase``: the same labels, more repeats); a probe still short of uncontended processes once
the re-measures are spent ends the choice: stage ``stopped`` (its ``note`` is the run's last line; ``unrun_phase``:
the verify phase it leaves unrun). A resume reads these lines and continues the same decision; ``analysis
verify`` recomputes the predictions and the choice from the inputs and compares.

What is deliberately not modelled: the final recommendation (``analysis``: it is decided from measurements,
with their intervals); the cases' own records (``<phase>-runs.jsonl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Sequence

from pydantic import Field, model_validator

from results_schema.records.base import FiniteFloat, NonNegFloat, NonNegInt, SchemaVersion, StrictModel
from results_schema.records.dispatch import FileKind
from results_schema.codec.io import read_jsonl
from results_schema.records.plan import PlannedCase, PlannedPhase, RunPlan
from results_schema.records.sequential import SpendingName
from results_schema.records.identity import Setting

FILE_NAME = "choose-decisions.jsonl"
"""File name of the decision lines inside a run directory."""

DEFAULT_VERIFY_TARGET_FLOOR_PCT = 5.0
"""The smallest target of a sequential verify phase where none is named (``conf.schema.ChooseConfig``'s
``verify_target_floor_pct`` default; a saved config leaves it out while it holds this value, and
``analysis.comparison.sequential_check`` reads it back)."""

Stage = Literal["predict", "refit", "front", "unnecessary", "remeasure", "stopped"]
NO_MODEL_STAGES: tuple[Stage, ...] = ("unnecessary", "remeasure", "stopped")
"""Stages that fit no model (``form`` is null): the need met without offload, a probe re-measure, a stopped choice."""
PROBE_STAGES: tuple[Stage, ...] = ("remeasure", "stopped")
"""Stages about the probe itself, decided before any prediction (``remeasure``, ``stopped``)."""
Form = Literal["serial", "overlapped"]


class SettingRef(Setting):
    """An offload setting ``(G, N, prefetch_step)`` and the case label it runs under."""

    label: str = Field(min_length=1, description="Case label (current_g<G>_n<N>_s<step>).")


class FittedPoint(Setting):
    """A measured setting the model was fitted to."""

    throughput_tok_s: float = Field(gt=0, description="Median per-process throughput, scaled to the probe "
                                                      "baseline (retention x probe baseline median) (tok/s).")
    phase: str = Field(min_length=1, description="Phase the setting was measured in.")
    processes: int = Field(ge=1, description="Processes the median is over.")


class NoiseArm(StrictModel):
    """One probe arm the prediction interval's noise term pools (``analysis.model.probe_noise``)."""

    label: str = Field(min_length=1, description="The arm's case label (baseline, or a calibration setting).")
    tok_s: tuple[float, ...] = Field(min_length=1, description="Per-process throughput of its uncontended processes "
                                                               "(tok/s).")


class FormFit(StrictModel):
    """One model form fitted to the points (``offload_tools.transfer_model.fit``)."""

    form: Form
    bandwidth_bytes_s: float = Field(gt=0, description="Fitted copy bandwidth (B/s).")
    bandwidth_source: str = Field(description="fitted, or grid edge (lowest / highest).")
    rms_error_pct: NonNegFloat = Field(description="RMS relative error over the points (%).")
    max_point_error_pct: NonNegFloat = Field(description="Worst |predicted - measured| / measured (%).")


class PredictedSetting(Setting):
    """One distinct setting under the chosen form."""

    offloaded_layers: tuple[NonNegInt, ...] = Field(min_length=1, description="Layer indices offloaded.")
    released_bytes: int = Field(description="Offloaded bytes minus static slot bytes (B), predicted.")
    predicted_tok_s: float = Field(gt=0, description="Predicted throughput, chosen form (tok/s).")
    other_form_tok_s: float = Field(gt=0, description="Predicted throughput, the other form (tok/s).")
    retention: float = Field(gt=0, description="Predicted throughput / baseline.")
    retention_low: FiniteFloat = Field(description="Lower end of the predicted retention interval.")
    retention_high: float = Field(gt=0, description="Upper end of the predicted retention interval.")
    class_id: NonNegInt = Field(description="Class (same released bytes, same prediction); 0 = predicted best.")


class VerifiedCheck(StrictModel):
    """A verified setting's measurement beside the prediction it was chosen under."""

    label: str = Field(min_length=1)
    predicted_retention: float = Field(gt=0)
    retention_low: FiniteFloat
    retention_high: float = Field(gt=0)
    measured_retention: float = Field(gt=0, description="Median of its processes / median of the phase's baselines.")
    processes: int = Field(ge=1)
    missed: bool = Field(description="Measured retention outside the predicted interval.")


class VerifyDesign(StrictModel):
    """The sequential design of the verify processes one decision adds (``conf.schema.ChooseConfig.verify_looks``),
    declared in the decision line before any of them runs, from the prediction alone
    (``offload_tools.choice.verify_target``)."""

    looks: tuple[int, ...] = Field(min_length=1, description="Processes per arm at each look; the last is the budget.")
    target_pct: float = Field(gt=0, description="Every look's equivalence margin (percent of the baseline's "
                                                "throughput): max(predicted_gap_pct, floor_pct).")
    floor_pct: float = Field(gt=0, description="The smallest target (choose.verify_target_floor_pct, percent).")
    predicted_gap_pct: float | None = Field(description="Predicted retention of the best candidate minus the "
                                                        "runner-up's, times 100; null: no runner-up.")
    best: str | None = Field(description="Label of the best predicted candidate (the class chosen first).")
    runner_up: str | None = Field(description="Label of the next candidate that would be chosen instead; null: none.")
    alpha: float = Field(gt=0, lt=1, description="Total two-sided alpha over the looks.")
    spending: SpendingName = Field(description="Alpha-spending function (pocock or obrien_fleming).")
    first_block: NonNegInt = Field(description="Verify blocks before this series (the earlier decisions'): its block "
                                               "b is repeat first_block + b - 1 of the baseline and of its settings.")


class ChoiceDecision(StrictModel):
    """One line of ``choose-decisions.jsonl`` (module docstring)."""

    schema_version: SchemaVersion = 1
    stage: Stage
    need_bytes: int = Field(ge=0, description="Bytes the setting must release (B).")
    need_source: str = Field(description="need_gib=X or need_kv_gib=X (KV cache gain taken 1:1 as released bytes).")
    implementation: str = Field(description="Implementation whose settings are chosen.")
    num_layers: int = Field(ge=1)
    num_prompts: int = Field(ge=1, description="Prompts per round (tokens per decode step).")
    layer_bytes: tuple[NonNegInt, ...] = Field(min_length=1, description="Bytes of each layer index (B).")
    layer_bytes_source: str = Field(description="Where layer_bytes came from (weight headers / config.json).")
    slot_bytes: NonNegInt = Field(description="Bytes of one static prefetch slot (B).")
    baseline_phase: str = Field(min_length=1)
    baseline_tok_s: tuple[float, ...] = Field(min_length=1, description="The probe baselines' throughput (tok/s).")
    noise_pct: NonNegFloat = Field(description="The noise term of every predicted interval (%): the t prediction "
                                   "half-width from the probe arms' pooled between-process SD (noise_arms, "
                                   "analysis.model.probe_noise); in records without noise_arms (and the probe stages, "
                                   "unnecessary) the baselines' spread (max - min) / median.")
    copy_bench_bandwidth_bytes_s: NonNegFloat | None = Field(description="The run's copy bench (B/s); null: none.")
    points: tuple[FittedPoint, ...] = Field(description="Measured settings fitted.")
    fits: tuple[FormFit, ...] = Field(description="Both forms fitted (empty for stage unnecessary).")
    form: Form | None = Field(description="The form the data chose; null for stage unnecessary.")
    form_reason: str = Field(description="Why that form.")
    half_width_pct: NonNegFloat = Field(description="Relative half-width of every predicted interval (%): "
                                                    "sqrt(noise_pct^2 + worst point error^2).")
    predictions: tuple[PredictedSetting, ...] = Field(description="Every distinct setting (offload_tools.choice).")
    checked: tuple[VerifiedCheck, ...] = Field(description="Verified settings checked before this decision.")
    budget: int = Field(ge=0, description="Settings this stage may choose at most.")
    chosen: tuple[SettingRef, ...] = Field(description="Settings decided for measurement in this stage.")
    decided_phase: PlannedPhase | None = Field(description="The verify phase's cases this stage adds, as in "
                                                           "plan.json; null when it adds none.")
    trusted: bool = Field(description="False once a refitted model still missed: the front is measured instead.")
    note: str = Field(description="One line: what this stage decided and why.")
    processes_every_candidate: NonNegInt = Field(
        description="Processes the same-runtime design would run to measure every setting meeting the need "
                    "((candidates + baseline) x verify repeats).")
    fitted_processes: tuple[str, ...] = Field(
        default=(), description="``phase/label-rN`` of every process the fit used: uncontended (no foreign work on "
        "the host while it measured), tokens as the baseline's; empty in records written before it was recorded.")
    noise_arms: tuple[NoiseArm, ...] = Field(
        default=(), description="Stages predict, refit, front: every probe arm and its uncontended per-process "
        "throughput, the noise term's input (noise_pct is analysis.model.probe_noise of them); empty in records "
        "written before it was recorded (noise_pct then is the baselines' range) and for the other stages.")
    remeasured: tuple[str, ...] = Field(
        default=(), description="Stage remeasure: ``phase/label-rN`` of the contended probe processes this decision "
        "replaces with fresh processes (``decided_phase``); stage stopped: the contended probe processes the choice "
        "stopped on; empty for the other stages.")
    unrun_phase: str | None = Field(
        default=None, description="Stage stopped: the verify phase the stop leaves unrun (its planned cases are not "
        "expected, ``with_decided``); null for the other stages.")
    verify_design: VerifyDesign | None = Field(
        default=None, description="A sequential verify phase: the look series this decision's settings run under "
        "(its look lines are in sequential-decisions.jsonl with its first_block); null: fixed repeats, or no setting "
        "chosen.")

    @model_validator(mode="after")
    def _consistent(self) -> "ChoiceDecision":
        if len(self.layer_bytes) != self.num_layers:
            raise ValueError(f"layer_bytes has {len(self.layer_bytes)} entries for {self.num_layers} layers")
        if len(self.chosen) > self.budget:
            raise ValueError(f"{len(self.chosen)} chosen settings exceed the budget {self.budget}")
        if (self.form is None) != (self.stage in NO_MODEL_STAGES):
            raise ValueError(f"form is null exactly for the stages {', '.join(NO_MODEL_STAGES)}")
        if self.stage in PROBE_STAGES and (self.chosen or not self.remeasured):
            raise ValueError(f"stage {self.stage}: no setting chosen, and the contended processes named")
        if (self.unrun_phase is not None) != (self.stage == "stopped"):
            raise ValueError("unrun_phase is set exactly for stage stopped")
        return self


FILE_KINDS: list[FileKind] = [FileKind(FILE_NAME, "results_schema.records.choice:ChoiceDecision", jsonl=True)]
"""Picked up by ``results_schema.records.dispatch`` once ``results_schema.records.choice`` is in ``CONTRIBUTING_MODULES``."""


def with_decided(plan: RunPlan, decisions: Sequence[ChoiceDecision]) -> RunPlan:
    """``plan`` with every decision's ``decided_phase`` cases added to their phase (the run's whole plan).

    A decided case whose label the phase already has adds its repeats to it (a ``remeasure`` of the probe; the baseline
    blocks of a sequential verify series after the first); a ``stopped`` decision removes its ``unrun_phase`` (the
    verify phase it leaves unrun).

    Raises:
        ValueError: a decided phase the plan does not have.
    """
    phases = {p.name: p for p in plan.phases}
    for d in decisions:
        if d.unrun_phase is not None:
            phases.pop(d.unrun_phase, None)
        dp = d.decided_phase
        if dp is None:
            continue
        if dp.name not in phases:
            raise ValueError(f"decision {d.stage!r} adds cases to phase {dp.name!r}, which plan.json does not have")
        ph = phases[dp.name]
        have = {c.label for c in ph.cases}  # a remeasure only grows cases the probe has (_more_repeats refuses others)
        cases = _more_repeats(ph.cases, dp.cases) if d.stage == "remeasure" else _more_repeats(
            ph.cases, [c for c in dp.cases if c.label in have]) + tuple(c for c in dp.cases if c.label not in have)
        phases[dp.name] = PlannedPhase(name=ph.name, kind=ph.kind, cases=cases, processes=ph.processes + dp.processes)
    out = tuple(phases.values())
    return RunPlan(experiment=plan.experiment, run_id=plan.run_id, phases=out, processes=sum(p.processes for p in out))


def verify_phase(decisions: Sequence[ChoiceDecision]) -> str | None:
    """The phase the decided settings were measured in (None: no decision added settings: a need of 0, or a choice
    that stopped before predicting; a probe re-measure adds processes to the probe, never settings)."""
    return next((d.decided_phase.name for d in decisions if d.decided_phase is not None
                 and d.stage not in PROBE_STAGES), None)


def _more_repeats(cases: Sequence[PlannedCase], added: Sequence[PlannedCase]) -> tuple[PlannedCase, ...]:
    """``cases`` with each of ``added`` (same label) adding its repeats and expected runs to its case.

    Raises:
        ValueError: an added label the phase does not have.
    """
    more = {c.label: c for c in added}
    missing = set(more) - {c.label for c in cases}
    if missing:
        raise ValueError(f"a remeasure adds processes to {sorted(missing)}, which the probe phase does not have")
    return tuple(c if c.label not in more else c.model_copy(update={
        "repeats": c.repeats + more[c.label].repeats, "expected_runs": c.expected_runs + more[c.label].expected_runs})
        for c in cases)


SUMMARY_FILE = "choice.json"
"""``summary/choice.json``: the decision of a choose run, from its measurements (``analysis.model.choice``)."""


class VerifiedPoint(StrictModel):
    """A decided setting: the prediction it was chosen under beside its measurement."""

    label: str = Field(min_length=1)
    stage: Stage
    predicted_retention: float = Field(gt=0)
    retention_low: FiniteFloat
    retention_high: float = Field(gt=0)
    measured_retention: float | None = Field(description="Median of its processes / the phase's baseline median; "
                                                         "null when none of its processes recorded a run.")
    within_interval: bool | None = Field(description="Measured inside the predicted interval; null: not measured.")


class Recommended(StrictModel):
    """The recommended setting, decided from measurements only."""

    label: str = Field(min_length=1)
    group_size: NonNegInt
    num_in_group: NonNegInt
    prefetch_step: int = Field(ge=1)
    reason: str = Field(description="Why (the measured retention interval and verdicts, or 'offload unnecessary').")


class ChoiceSummary(StrictModel):
    """``summary/choice.json``."""

    schema_version: SchemaVersion = 1
    recommended: Recommended | None = Field(description="Null when no valid measured setting meets the need.")
    verified: tuple[VerifiedPoint, ...]
    processes_run: NonNegInt = Field(description="Case processes the run recorded (runs and failures).")
    processes_every_candidate: NonNegInt = Field(description="Processes the same-runtime design would run to "
                                                             "measure every setting meeting the need.")
    trusted: bool = Field(description="False when a verified point still missed after the refit.")
    lines: tuple[str, ...] = Field(description="The printed reasoning, one line each.")


def read_decisions(run_dir: Path) -> list[ChoiceDecision]:
    """The run's ``choose-decisions.jsonl`` lines, in order (none: not a choose run, or nothing decided yet); read by
    the runner (``runners.orchestration.choose``: a resume continues the same decision) and the analysis
    (``analysis.model.choice``: ``analysis verify`` recomputes it).

    Raises:
        results_schema.codec.io.RecordError: the first line that does not validate, naming ``path:line``.
    """
    path = Path(run_dir) / FILE_NAME
    return read_jsonl(path, ChoiceDecision) if path.is_file() else []
