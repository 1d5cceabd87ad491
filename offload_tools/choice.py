"""Choose, then confirm: every distinct setting predicted, grouped into classes, the few that decide chosen.

What is modelled (pure functions over plain numbers; the runner uses them while a run goes, ``analysis verify``
recomputes them from the records):

* ``distinct_settings``: every distinct ``(G, N, prefetch_step)`` for a layer count: settings that offload the
  same layer set with the same number of prefetch slots (``offload.ring.num_slots``:
  ``min(prefetch_step, offloaded)``) run the same offloader, so one representative (the smallest ``G``, then
  ``N``, then step) stands for each; steps 1..``MAX_PREFETCH_STEP``;
* ``calibration_settings``: two settings the two model forms (``offload_tools.transfer_model``) predict differently,
  whatever the bandwidth: every layer at step 1 (no compute to hide a copy behind: both forms predict a cost)
  and the half of the layers with the largest hiding window per copy (``prefetch_step * G / N``: the
  overlapped form predicts the least cost there, the serial form half of the first's);
* ``predict``: released bytes (offloaded layer bytes minus the static slots, as the offloader's evidence
  accounts them: ``offload.evidence_state``) and predicted throughput and retention of every setting under
  a fitted model, with an interval of relative half-width ``sqrt(noise^2 + residual^2)`` (percent): ``noise``
  the noise term the caller measured (the runner and ``analysis``: ``analysis.model.probe_noise``, the t
  prediction half-width from the probe arms' pooled between-process SD), ``residual`` the fit's worst point error;
* ``classes``: settings with the same released bytes and the same prediction are one class (the model cannot
  tell them apart), verified through one representative;
* ``choose``: among classes that meet the need, the predicted best (ties: more released bytes) and the next
  ones whose interval reaches the best's lower end, up to a budget;
* ``misses``: a verified point whose measured retention lies outside its predicted interval;
* ``verify_target``: the smallest difference a sequential verify phase must resolve: the predicted gap between the
  best class ``choose`` would verify and the next class that would be chosen instead (the runner-up), in percent of
  the baseline's throughput, never below a floor.

What is deliberately not modelled: the statistics of the final decision (``analysis``: bootstrap intervals of
measured retention); KV cache gain beyond released bytes (1:1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from offload.ring import num_slots
from offload.selection import case_label, select_offload_layers
from offload_tools.transfer_model import FORMS, MeasuredPoint, TransferModel, fit

MAX_PREFETCH_STEP = 3
"""Prefetch steps predicted: 1..3 (vLLM's default is 1; beyond 3 slots the static buffers outweigh the hiding)."""

CLASS_REL_TOL = 1e-9
"""Predictions within this relative tolerance are the same prediction (floating-point noise only)."""


@dataclass(frozen=True, order=True)
class Setting:
    """``(offload_group_size, offload_num_in_group, offload_prefetch_step)``."""

    group_size: int
    num_in_group: int
    prefetch_step: int

    def label(self, implementation: str = "current") -> str:
        """The case label of this setting (``offload.selection.case_label``: ``current_g2_n1``, ``current_g2_n1_p3``)."""
        return case_label(implementation, self.group_size, self.num_in_group, self.prefetch_step)


@dataclass(frozen=True)
class Prediction:
    """One setting under a model: layers, bytes, throughput, retention and its interval, class.

    Attributes:
        setting: the representative setting.
        offloaded_layers: layer indices it offloads.
        released_bytes: offloaded bytes minus static slot bytes (B).
        tok_s: predicted throughput (tok/s).
        retention: predicted throughput / baseline throughput.
        retention_low, retention_high: the interval (``retention * (1 -+ half_width_pct / 100)``).
        class_id: index of its class in ``classes`` order (0 = predicted best among all classes).
    """

    setting: Setting
    offloaded_layers: tuple[int, ...]
    released_bytes: int
    tok_s: float
    retention: float
    retention_low: float
    retention_high: float
    class_id: int = -1


def setting_key(num_layers: int, group_size: int, num_in_group: int, prefetch_step: int) -> tuple[tuple[int, ...], int]:
    """What makes two settings the same offloader: ``(offloaded layer indices, slots)``, the slots
    ``offload.ring.num_slots(len(layers), prefetch_step)`` (0 when nothing is offloaded).

    Raises:
        ValueError: ``prefetch_step < 1`` (``offload.ring.num_slots``).
    """
    layers = select_offload_layers(num_layers, group_size, num_in_group)
    return layers, num_slots(len(layers), prefetch_step)


def distinct_settings(num_layers: int, max_step: int = MAX_PREFETCH_STEP) -> list[Setting]:
    """Every distinct offloading setting of ``num_layers`` layers (``setting_key``), one representative each, in order.

    Raises:
        ValueError: ``num_layers < 1`` or ``max_step < 1``.
    """
    if num_layers < 1 or max_step < 1:
        raise ValueError(f"num_layers ({num_layers}) and max_step ({max_step}) must be >= 1")
    seen: set[tuple[tuple[int, ...], int]] = set()
    out = []
    for g in range(1, num_layers + 1):
        for n in range(1, g + 1):
            if not select_offload_layers(num_layers, g, n):
                continue
            for k in range(1, max_step + 1):
                key = setting_key(num_layers, g, n, k)
                if key not in seen:
                    seen.add(key)
                    out.append(Setting(g, n, k))
    return out


def calibration_settings(num_layers: int, max_step: int = MAX_PREFETCH_STEP) -> tuple[Setting, Setting]:
    """Two settings the serial and overlapped forms predict differently (module docstring).

    Raises:
        ValueError: fewer than 2 layers (one setting offloads everything: nothing to tell the forms apart with).
    """
    if num_layers < 2:
        raise ValueError(f"calibration needs >= 2 layers (got {num_layers})")
    every = Setting(1, 1, 1)
    half = num_layers // 2
    best: Setting | None = None
    for s in distinct_settings(num_layers, max_step):
        if len(select_offload_layers(num_layers, s.group_size, s.num_in_group)) != half:
            continue
        window = s.prefetch_step * s.group_size / s.num_in_group
        if best is None or window > best.prefetch_step * best.group_size / best.num_in_group:
            best = s
    assert best is not None  # G = 2, N = 1 offloads half the layers (rounded down) for any count >= 2
    return every, best


def slot_bytes(param_bytes: Iterable[int], align: int = 512) -> int:
    """Bytes of one static slot for a layer's parameters: each key at an ``align``-aligned offset
    (``offload.arena.ALIGN_BYTES``)."""
    return sum(-(-int(b) // align) * align for b in param_bytes)


def released_bytes(setting: Setting, layer_bytes: Mapping[int, int], slot: int, num_layers: int) -> int:
    """Offloaded bytes of ``setting`` minus its static slots (``min(prefetch_step, offloaded)`` x ``slot``)."""
    layers = select_offload_layers(num_layers, setting.group_size, setting.num_in_group)
    return sum(int(layer_bytes[i]) for i in layers) - num_slots(len(layers), setting.prefetch_step) * slot


def interval_half_width_pct(noise_pct: float, residual_pct: float) -> float:
    """Relative half-width (percent) of a predicted retention: ``sqrt(noise^2 + residual^2)``."""
    return math.hypot(noise_pct, residual_pct)


def predict(model: TransferModel, settings: Sequence[Setting], layer_bytes: Mapping[int, int], slot: int,
            half_width_pct: float) -> list[Prediction]:
    """Every setting's prediction under ``model`` with its class id (``classes`` order).

    Args:
        model: the fitted model (its ``num_layers``, ``bytes_per_layer``, bandwidth and form).
        settings: the settings (``distinct_settings``).
        layer_bytes: bytes of each layer index (weight headers or config arithmetic).
        slot: bytes of one static slot (``slot_bytes``).
        half_width_pct: the interval's relative half-width (``interval_half_width_pct``).
    """
    h = half_width_pct / 100.0
    preds = []
    for s in settings:
        r = model.retention(s.group_size, s.num_in_group, s.prefetch_step)
        preds.append(Prediction(s, select_offload_layers(model.num_layers, s.group_size, s.num_in_group),
                                released_bytes(s, layer_bytes, slot, model.num_layers),
                                model.baseline_tok_s * r, r, r * (1 - h), r * (1 + h)))
    order = classes(preds)
    ids = {p.setting: i for i, cls in enumerate(order) for p in cls}
    return [Prediction(**{**p.__dict__, "class_id": ids[p.setting]}) for p in preds]


def _same(a: Prediction, b: Prediction) -> bool:
    return a.released_bytes == b.released_bytes and math.isclose(a.tok_s, b.tok_s, rel_tol=CLASS_REL_TOL)


def classes(preds: Sequence[Prediction]) -> list[list[Prediction]]:
    """Predictions grouped into classes (same released bytes, same prediction), best predicted first
    (ties: more released bytes first), each class in setting order (its representative first)."""
    out: list[list[Prediction]] = []
    for p in sorted(preds, key=lambda p: (-p.tok_s, -p.released_bytes, p.setting)):
        if out and _same(out[-1][0], p):
            out[-1].append(p)
        else:
            out.append([p])
    return [sorted(c, key=lambda p: p.setting) for c in out]


def meeting(preds: Sequence[Prediction], need_bytes: float) -> list[Prediction]:
    """The predictions whose released bytes meet ``need_bytes``."""
    return [p for p in preds if p.released_bytes >= need_bytes]


def choose(preds: Sequence[Prediction], need_bytes: float, budget: int,
           exclude: Iterable[Setting] = ()) -> list[Prediction]:
    """Representatives to verify: the best predicted class meeting the need and the next classes whose interval
    reaches the best's lower end, at most ``budget``; classes holding an ``exclude`` setting are skipped
    (already measured).

    Raises:
        ValueError: ``budget < 1``.
    """
    if budget < 1:
        raise ValueError(f"verify budget ({budget}) must be >= 1")
    done = set(exclude)
    ok = [c for c in classes(meeting(preds, need_bytes)) if not any(p.setting in done for p in c)]
    if not ok:
        return []
    best = ok[0][0]
    out = [best]
    for c in ok[1:]:
        if len(out) >= budget:
            break
        if c[0].retention_high >= best.retention_low:
            out.append(c[0])
    return out


def front(preds: Sequence[Prediction], need_bytes: float, exclude: Iterable[Setting] = ()) -> list[Prediction]:
    """Class representatives on the predicted Pareto front (more released bytes, more tok/s) meeting the need,
    fastest first; classes holding an ``exclude`` setting (already measured) are left out after the front is found."""
    done = set(exclude)
    reps = [c[0] for c in classes(meeting(preds, need_bytes))]
    out: list[Prediction] = []
    for p in reps:  # fastest first: on the front iff it releases more than every faster one
        if all(p.released_bytes > q.released_bytes for q in out):
            out.append(p)
    cls = {p.setting: c for c in classes(meeting(preds, need_bytes)) for p in c}
    return [p for p in out if not any(q.setting in done for q in cls[p.setting])]


@dataclass(frozen=True)
class VerifyTarget:
    """What a sequential verify phase must resolve (``verify_target``).

    Attributes:
        target_pct: ``max(gap_pct, floor_pct)`` (percent of the baseline's throughput): every look's equivalence
            margin.
        gap_pct: predicted retention of the best minus the runner-up's, times 100 (percent points of the baseline's
            throughput); None: no runner-up (one candidate class left).
        best, runner_up: the two class representatives (None where there is none).
    """

    target_pct: float
    gap_pct: float | None
    best: Setting | None
    runner_up: Setting | None


def verify_target(preds: Sequence[Prediction], need_bytes: float, exclude: Iterable[Setting],
                  floor_pct: float) -> VerifyTarget:
    """The verify phase's target effect, from the prediction alone (declared before any verify process runs).

    The candidates are ``choose``'s: the classes meeting the need with no ``exclude`` setting, best predicted first;
    the runner-up is the second class's representative (the setting that would be chosen instead of the best).
    ``gap_pct = (best.retention - runner_up.retention) * 100``; the target is ``max(gap_pct, floor_pct)`` (the floor:
    the smallest cost that matters, e.g. 5%); with no runner-up, the floor.

    Raises:
        ValueError: ``floor_pct`` not > 0.
    """
    if not floor_pct > 0:
        raise ValueError(f"verify target floor ({floor_pct!r}%) must be > 0")
    done = set(exclude)
    ok = [c[0] for c in classes(meeting(preds, need_bytes)) if not any(p.setting in done for p in c)]
    if len(ok) < 2:
        return VerifyTarget(floor_pct, None, ok[0].setting if ok else None, None)
    gap = (ok[0].retention - ok[1].retention) * 100.0
    return VerifyTarget(max(gap, floor_pct), gap, ok[0].setting, ok[1].setting)


def misses(pred: Prediction, measured_retention: float) -> bool:
    """True when ``measured_retention`` lies outside ``pred``'s interval."""
    return not pred.retention_low <= measured_retention <= pred.retention_high


@dataclass(frozen=True)
class ChoiceInputs:
    """What one choice is computed from (all measured or read before it; recorded with it).

    Attributes:
        num_layers, num_prompts: the model's layer count; prompts per round (tokens per decode step).
        layer_bytes: bytes of each layer index (weight headers, or config arithmetic where no checkpoint is at hand).
        slot: bytes of one static slot (``slot_bytes``).
        baseline_tok_s: median throughput of the baseline processes (tok/s).
        noise_pct: the noise term's half-width (percent; ``analysis.model.probe_noise``), also the floor below which
            the two forms' worst point errors are not told apart (``choose_form``).
        points: measured offload settings (throughput relative to ``baseline_tok_s``'s baseline).
        need_bytes: bytes the setting must release.
        budget: settings to verify at most.
        exclude: settings already measured (their classes are not chosen again).
        bench_bandwidth_bytes_s: the run's copy bench (bytes/s), recorded beside the fit; None = none.
    """

    num_layers: int
    num_prompts: int
    layer_bytes: Mapping[int, int]
    slot: int
    baseline_tok_s: float
    noise_pct: float
    points: Sequence[MeasuredPoint]
    need_bytes: float
    budget: int
    exclude: Sequence[Setting] = ()
    bench_bandwidth_bytes_s: float | None = None


@dataclass(frozen=True)
class Choice:
    """A choice: both fitted forms, the form the data chose and why, every prediction, the chosen settings."""

    fits: Mapping[str, TransferModel]
    form: str
    form_reason: str
    half_width_pct: float
    predictions: Sequence[Prediction]
    other_form_tok_s: Mapping[Setting, float]
    chosen: Sequence[Prediction]


def bytes_per_layer(layer_bytes: Mapping[int, int]) -> float:
    """Mean bytes of the model's layers (the model's ``b``)."""
    return sum(layer_bytes.values()) / len(layer_bytes)


def choose_form(fits: Mapping[str, TransferModel], noise_pct: float) -> tuple[str, str]:
    """``(form, reason)``: the form with the smaller worst point error; where the two differ by less than the
    probe's noise (``noise_pct``) the data do not separate them and ``serial`` (the larger predicted cost) is taken."""
    err = {f: (m.max_point_error_pct if m.max_point_error_pct is not None else math.inf) for f, m in fits.items()}
    s, o = err["serial"], err["overlapped"]
    text = f"worst point error serial {s:.1f}%, overlapped {o:.1f}%"
    if abs(s - o) <= noise_pct:
        return "serial", (f"{text}: within the probe's noise ({noise_pct:.1f}%), the data do not separate "
                          "the forms; serial predicts the larger cost (conservative)")
    form = "serial" if s < o else "overlapped"
    return form, f"{text}: {form} explains the calibration settings (difference > the probe's noise {noise_pct:.1f}%)"


def compute_choice(inp: ChoiceInputs) -> Choice:
    """Fit both forms to ``inp.points``, take the form the data choose, predict every distinct setting, choose.

    Raises:
        ValueError: no point offloads a layer (nothing to fit), or ``inp.budget < 1``.
    """
    b = bytes_per_layer(inp.layer_bytes)
    fits: dict[str, TransferModel] = {f: fit(inp.points, baseline_tok_s=inp.baseline_tok_s, num_prompts=inp.num_prompts,
                   num_layers=inp.num_layers, bytes_per_layer=b, mode=f,
                   bench_bandwidth_bytes_s=inp.bench_bandwidth_bytes_s) for f in FORMS}
    form, reason = choose_form(fits, inp.noise_pct)
    m = fits[form]
    h = interval_half_width_pct(inp.noise_pct, m.max_point_error_pct or 0.0)
    settings = distinct_settings(inp.num_layers)
    preds = predict(m, settings, inp.layer_bytes, inp.slot, h)
    other = fits["overlapped" if form == "serial" else "serial"]
    return Choice(fits=fits, form=form, form_reason=reason, half_width_pct=h, predictions=preds,
                  other_form_tok_s={s: other.predict(s.group_size, s.num_in_group, s.prefetch_step) for s in settings},
                  chosen=choose(preds, inp.need_bytes, inp.budget, inp.exclude))


def largest_release(num_layers: int, layer_bytes: Mapping[int, int], slot: int) -> int:
    """The most bytes any setting releases (every layer offloaded, one slot)."""
    return max(released_bytes(s, layer_bytes, slot, num_layers) for s in distinct_settings(num_layers))
