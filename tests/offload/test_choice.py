"""Claims about choose-then-confirm's rule (``offload_tools.choice``): the distinct settings and their classes, the
calibration settings that tell the model forms apart, the choice of what to verify, the predicted front, the form
the data choose, and the byte arithmetic (released bytes, slots)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from offload_tools.choice import (ChoiceInputs, Prediction, Setting, calibration_settings, choose, classes, compute_choice,
                            distinct_settings, front, interval_half_width_pct, largest_release, misses, predict,
                            released_bytes, slot_bytes)
from offload.ring import num_slots
from offload.selection import select_offload_layers
from offload_tools.transfer_model import BANDWIDTH_GRID, FORMS, MeasuredPoint, TransferModel

LAYERS, PROMPTS, BASELINE = 8, 4, 512.0
LAYER = 295_936
SLOT = 296_448
UNIFORM = {i: LAYER for i in range(LAYERS)}
T0 = PROMPTS / BASELINE
"""Baseline seconds per decode step (7.8 ms); one layer's compute is T0 / 8."""


def _model(mode: str, copy_s: float, layer_bytes: dict[int, int] = UNIFORM) -> TransferModel:
    """The model whose one-layer copy takes ``copy_s`` seconds."""
    b = sum(layer_bytes.values()) / len(layer_bytes)
    return TransferModel(BASELINE, PROMPTS, LAYERS, b, b / copy_s, mode)


def _layers(s: Setting, num_layers: int = LAYERS) -> tuple[int, ...]:
    return select_offload_layers(num_layers, s.group_size, s.num_in_group)


# ----------------------------------------------------------------------------- distinct settings and classes


def test_eight_layers_have_73_distinct_settings_one_per_layer_set_and_slot_count() -> None:
    settings = distinct_settings(LAYERS)
    assert len(settings) == 73 and len(set(settings)) == 73
    keys = [(_layers(s), num_slots(len(_layers(s)), s.prefetch_step)) for s in settings]
    assert len(set(keys)) == 73 and all(k[0] for k in keys)


def test_each_distinct_setting_is_the_smallest_of_the_settings_that_run_the_same_offloader() -> None:
    smallest: dict[tuple[tuple[int, ...], int], Setting] = {}
    for g in range(1, LAYERS + 1):
        for n in range(1, g + 1):
            for k in range(1, 4):
                s = Setting(g, n, k)
                if _layers(s):
                    key = (_layers(s), num_slots(len(_layers(s)), k))
                    smallest[key] = min(smallest.get(key, s), s)
    assert sorted(distinct_settings(LAYERS)) == sorted(smallest.values())


def test_six_settings_offload_four_layers_at_step_1_and_are_one_class_under_the_serial_form() -> None:
    settings = distinct_settings(LAYERS)
    four = [s for s in settings if s.prefetch_step == 1 and len(_layers(s)) == 4]
    assert four == [Setting(2, 1, 1), Setting(4, 2, 1), Setting(5, 3, 1), Setting(6, 4, 1), Setting(7, 4, 1),
                    Setting(8, 4, 1)]
    assert len({_layers(s) for s in four}) == 6  # six different layer sets
    preds = predict(_model("serial", T0 / 10), settings, UNIFORM, SLOT, 1.0)
    (cls,) = [c for c in classes(preds) if c[0].setting in four]
    assert [p.setting for p in cls] == four and len({p.class_id for p in cls}) == 1
    assert cls[0].setting == Setting(2, 1, 1)  # the representative: the smallest setting


def test_class_ids_follow_the_predicted_order_best_first() -> None:
    preds = predict(_model("serial", T0 / 10), distinct_settings(LAYERS), UNIFORM, SLOT, 1.0)
    order = classes(preds)
    assert [c[0].class_id for c in order] == list(range(len(order)))
    tok = [c[0].tok_s for c in order]
    assert tok == sorted(tok, reverse=True)


@pytest.mark.parametrize("num_layers,max_step", [(0, 3), (8, 0)])
def test_distinct_settings_of_no_layer_or_no_step_are_refused(num_layers: int, max_step: int) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        distinct_settings(num_layers, max_step)


# ----------------------------------------------------------------------------- calibration


def test_calibration_settings_of_eight_layers_are_every_layer_at_step_1_and_half_at_step_3() -> None:
    assert calibration_settings(LAYERS) == (Setting(1, 1, 1), Setting(2, 1, 3))


@pytest.mark.parametrize("num_layers", range(2, 13))
def test_the_second_calibration_setting_offloads_half_the_layers_with_the_largest_window(num_layers: int) -> None:
    every, half = calibration_settings(num_layers)
    assert len(_layers(every, num_layers)) == num_layers
    assert len(_layers(half, num_layers)) == num_layers // 2

    def window(s: Setting) -> float:
        return s.prefetch_step * s.group_size / s.num_in_group

    same = [s for s in distinct_settings(num_layers) if len(_layers(s, num_layers)) == num_layers // 2]
    assert window(half) == max(window(s) for s in same)


def test_calibration_of_one_layer_is_refused() -> None:
    with pytest.raises(ValueError, match="calibration needs >= 2 layers"):
        calibration_settings(1)


def _costs(m: TransferModel, settings: tuple[Setting, Setting]) -> tuple[float, float]:
    """``1 / retention - 1`` of each setting (the copy stall over the baseline step)."""
    a, b = (m.retention(s.group_size, s.num_in_group, s.prefetch_step) for s in settings)
    return 1 / a - 1, 1 / b - 1


@pytest.mark.parametrize("bandwidth", BANDWIDTH_GRID[::50])
def test_the_two_forms_predict_the_calibration_settings_differently_at_every_bandwidth(bandwidth: float) -> None:
    cal = calibration_settings(LAYERS)
    serial, overlapped = (TransferModel(BASELINE, PROMPTS, LAYERS, LAYER, bandwidth, f) for f in FORMS)
    s_every, s_half = _costs(serial, cal)
    o_every, o_half = _costs(overlapped, cal)
    # at one bandwidth, the forms differ at the every-layer setting (serial predicts the larger cost)
    assert s_every > o_every
    # whatever its bandwidth, the serial form predicts twice the half's cost at every layer; the overlapped form,
    # wherever it predicts a cost, never does: no serial bandwidth reproduces an overlapped pair of predictions
    assert s_every == pytest.approx(2 * s_half, rel=1e-9)
    if o_every > 1e-12:
        assert o_half == 0 or o_every / o_half > 2 * (1 + 1e-9)


# ----------------------------------------------------------------------------- choose and front


def _p(setting: Setting, retention: float, half: float, released: int) -> Prediction:
    """A hand-made prediction: baseline 100 tok/s, interval ``retention -+ half``."""
    return Prediction(setting, _layers(setting), released, 100.0 * retention, retention, retention - half,
                      retention + half)


A = _p(Setting(2, 1, 1), 0.90, 0.05, 1000)  # best meeting the need: [0.85, 0.95]
B = _p(Setting(4, 2, 1), 0.90, 0.05, 1000)  # same bytes, same prediction: A's class
C = _p(Setting(3, 1, 1), 0.88, 0.05, 1000)  # reaches A's lower end
D = _p(Setting(3, 2, 1), 0.79, 0.05, 1000)  # does not: [0.74, 0.84]
E = _p(Setting(5, 1, 1), 0.70, 0.30, 1000)  # slower, but its wide interval reaches 0.85
F = _p(Setting(1, 1, 1), 0.95, 0.01, 10)  # the fastest, below the need
PREDS = [F, E, D, C, B, A]
NEED = 500


def test_choose_returns_the_best_class_first_then_only_classes_whose_interval_reaches_its_lower_end() -> None:
    assert choose(PREDS, NEED, budget=5) == [A, C, E]
    assert D not in choose(PREDS, NEED, budget=5) and F not in choose(PREDS, NEED, budget=5)


@pytest.mark.parametrize("budget,want", [(1, [A]), (2, [A, C]), (3, [A, C, E])])
def test_choose_returns_at_most_the_budget(budget: int, want: list[Prediction]) -> None:
    assert choose(PREDS, NEED, budget=budget) == want


def test_choose_verifies_one_representative_per_class() -> None:
    chosen = choose(PREDS, NEED, budget=5)
    assert A in chosen and B not in chosen  # A: the smaller setting of the class


def test_choose_skips_the_class_of_an_excluded_setting_and_measures_from_the_next_best() -> None:
    # B is measured: its class (A's) is not chosen again; C is the best now, and D reaches C's lower end (0.83)
    assert choose(PREDS, NEED, budget=5, exclude=[B.setting]) == [C, D, E]
    assert choose(PREDS, NEED, budget=5, exclude=[A.setting, C.setting]) == [D, E]
    assert choose(PREDS, NEED, budget=5, exclude=[p.setting for p in PREDS]) == []


def test_choose_with_a_need_no_setting_meets_returns_nothing() -> None:
    assert choose(PREDS, 10_000, budget=2) == []


def test_choose_prefers_the_class_that_releases_more_between_equal_predictions() -> None:
    more = _p(Setting(6, 1, 1), 0.90, 0.05, 2000)
    assert choose([A, more], NEED, budget=1) == [more]


def test_choose_refuses_a_budget_below_1() -> None:
    with pytest.raises(ValueError, match=r"verify budget \(0\) must be >= 1"):
        choose(PREDS, NEED, budget=0)


def _dominates(q: Prediction, p: Prediction) -> bool:
    return (q.released_bytes >= p.released_bytes and q.tok_s >= p.tok_s
            and (q.released_bytes > p.released_bytes or q.tok_s > p.tok_s))


def _uneven_layers(seed: int) -> dict[int, int]:
    rng = random.Random(seed)
    return {i: LAYER + rng.randrange(-LAYER // 4, LAYER // 4) for i in range(LAYERS)}


@pytest.mark.parametrize("mode", FORMS)
@pytest.mark.parametrize("copy_fraction", [0.05, 0.5, 2.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_front_is_the_pareto_front_of_the_classes_meeting_the_need(mode: str, copy_fraction: float, seed: int) -> None:
    layer_bytes = _uneven_layers(seed)
    preds = predict(_model(mode, copy_fraction * T0, layer_bytes), distinct_settings(LAYERS), layer_bytes, SLOT, 2.0)
    need = 3 * LAYER
    reps = [c[0] for c in classes(preds) if c[0].released_bytes >= need]
    out = front(preds, need)
    assert out and all(p.released_bytes >= need for p in out)
    assert not any(_dominates(q, p) for p in out for q in reps)  # no member dominated
    assert all(any(_dominates(q, p) for q in out) for p in reps if p not in out)  # every other class is
    assert [p.tok_s for p in out] == sorted((p.tok_s for p in out), reverse=True)  # fastest first


def test_misses_is_true_exactly_outside_the_interval() -> None:
    assert not misses(A, 0.85) and not misses(A, 0.95) and not misses(A, 0.9)
    assert misses(A, 0.849) and misses(A, 0.951)


# ----------------------------------------------------------------------------- the form the data choose


def _inputs(truth: TransferModel, noise_pct: float = 1.0, need: float = 4 * LAYER) -> ChoiceInputs:
    points = [MeasuredPoint(s.group_size, s.num_in_group, s.prefetch_step,
                            truth.predict(s.group_size, s.num_in_group, s.prefetch_step))
              for s in calibration_settings(LAYERS)]
    return ChoiceInputs(num_layers=LAYERS, num_prompts=PROMPTS, layer_bytes=UNIFORM, slot=SLOT, baseline_tok_s=BASELINE,
                        noise_pct=noise_pct, points=points, need_bytes=need, budget=2)


def _grid_steps(a: float, b: float) -> float:
    return abs(math.log10(a / b)) / math.log10(BANDWIDTH_GRID[1] / BANDWIDTH_GRID[0])


def test_points_of_a_serial_model_choose_the_serial_form_and_the_reason_names_it() -> None:
    truth = _model("serial", T0 / 10)  # each copy adds 10% of a step
    ch = compute_choice(_inputs(truth))
    assert ch.form == "serial"
    assert "serial explains the calibration settings" in ch.form_reason
    assert set(ch.fits) == set(FORMS)
    assert _grid_steps(ch.fits["serial"].bandwidth_bytes_s, truth.bandwidth_bytes_s) <= 1
    assert ch.fits["overlapped"].max_point_error_pct > ch.fits["serial"].max_point_error_pct + 1.0
    meeting_need = [p.class_id for p in ch.predictions if p.released_bytes >= 4 * LAYER]
    assert ch.chosen and ch.chosen[0].class_id == min(meeting_need)


def test_points_of_an_overlapped_model_choose_the_overlapped_form_and_the_reason_names_it() -> None:
    truth = _model("overlapped", T0 / 2)  # a copy of 4 layers' compute: every layer at step 1 stalls, step 3 hides
    assert truth.retention(1, 1, 1) < 0.5 and truth.retention(2, 1, 3) == 1.0
    ch = compute_choice(_inputs(truth))
    assert ch.form == "overlapped"
    assert "overlapped explains the calibration settings" in ch.form_reason
    assert _grid_steps(ch.fits["overlapped"].bandwidth_bytes_s, truth.bandwidth_bytes_s) <= 1
    assert all(ch.other_form_tok_s[p.setting] > 0 for p in ch.predictions)


def test_forms_the_noise_floor_does_not_separate_fall_back_to_serial_saying_why() -> None:
    ch = compute_choice(_inputs(_model("overlapped", T0 / 2), noise_pct=500.0))
    assert ch.form == "serial"
    assert "within the probe's noise (500.0%)" in ch.form_reason and "conservative" in ch.form_reason


def test_every_interval_is_the_noise_and_the_worst_point_error_combined() -> None:
    assert interval_half_width_pct(3.0, 4.0) == pytest.approx(5.0)
    ch = compute_choice(_inputs(_model("serial", T0 / 10), noise_pct=2.0))
    h = interval_half_width_pct(2.0, ch.fits["serial"].max_point_error_pct)
    assert ch.half_width_pct == pytest.approx(h)
    for p in ch.predictions:
        assert (p.retention_low, p.retention_high) == pytest.approx((p.retention * (1 - h / 100),
                                                                     p.retention * (1 + h / 100)))


def test_compute_choice_without_an_offloaded_point_is_refused() -> None:
    inp = replace(_inputs(_model("serial", T0 / 10)), points=[MeasuredPoint(0, 0, 1, BASELINE)])
    with pytest.raises(ValueError, match="no measured point offloads a layer"):
        compute_choice(inp)


# ----------------------------------------------------------------------------- bytes


def test_released_bytes_are_the_offloaded_bytes_minus_one_slot_per_prefetch_step() -> None:
    layer_bytes = _uneven_layers(3)
    s = Setting(2, 1, 3)
    assert released_bytes(s, layer_bytes, SLOT, LAYERS) == sum(layer_bytes[i] for i in _layers(s)) - 3 * SLOT
    one = Setting(8, 1, 3)  # one layer offloaded: one slot whatever the step
    assert released_bytes(one, layer_bytes, SLOT, LAYERS) == layer_bytes[_layers(one)[0]] - SLOT


def test_largest_release_is_every_layer_offloaded_with_one_slot() -> None:
    layer_bytes = _uneven_layers(4)
    top = largest_release(LAYERS, layer_bytes, SLOT)
    assert top == sum(layer_bytes.values()) - SLOT
    assert top == released_bytes(Setting(1, 1, 1), layer_bytes, SLOT, LAYERS)
    assert all(released_bytes(s, layer_bytes, SLOT, LAYERS) <= top for s in distinct_settings(LAYERS))


@pytest.mark.parametrize("params,align,want", [
    ([1, 512, 513], 512, 512 + 512 + 1024),
    ([], 512, 0),
    ([0, 512], 512, 512),
    ([1, 4095, 4097], 4096, 4096 + 4096 + 8192),
    ([3, 5], 1, 8),
])
def test_slot_bytes_put_each_parameter_at_an_aligned_offset(params: list[int], align: int, want: int) -> None:
    assert slot_bytes(params, align) == want


def test_slot_bytes_align_to_512_by_default() -> None:
    assert slot_bytes([1]) == 512 and slot_bytes([513, 1]) == 1536
