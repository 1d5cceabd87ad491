"""Claims about the one-parameter fit of the transfer-bound model (``offload_tools.transfer_model``): exact data give
back their bandwidth in either form, data that pin nothing down are reported as a grid edge, and a fit with no
offloaded layer is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offload_tools.transfer_model import BANDWIDTH_GRID, FORMS, MeasuredPoint, TransferModel, fit, step_seconds

BASELINE, PROMPTS, LAYERS, LAYER_BYTES = 512.0, 4, 8, 295_936.0
GRID_STEP = math.log10(BANDWIDTH_GRID[1] / BANDWIDTH_GRID[0])
"""One step of the bandwidth grid, in decades (1/200)."""

SETTINGS = ((1, 1, 1), (2, 1, 1), (4, 2, 1), (2, 1, 3), (8, 3, 1))
"""(G, N, prefetch_step): every layer, half, two of four, half with step 3, three of eight."""


def _model(bandwidth: float, mode: str) -> TransferModel:
    return TransferModel(BASELINE, PROMPTS, LAYERS, LAYER_BYTES, bandwidth, mode)


def _points(truth: TransferModel) -> list[MeasuredPoint]:
    return [MeasuredPoint(g, n, k, truth.predict(g, n, k)) for g, n, k in SETTINGS]


def _fit(points: list[MeasuredPoint], mode: str) -> TransferModel:
    return fit(points, baseline_tok_s=BASELINE, num_prompts=PROMPTS, num_layers=LAYERS, bytes_per_layer=LAYER_BYTES,
               mode=mode)


# A copy of 10 ms against a step of 7.8 ms (0.98 ms per layer): both forms predict a cost at (1,1,1), so the
# data pin the bandwidth down in either form; the value lies between two grid points.
TRUE_BANDWIDTH = LAYER_BYTES / 0.010 * 1.0037


@pytest.mark.parametrize("mode", FORMS)
def test_fit_recovers_the_bandwidth_of_exact_points_within_one_grid_step(mode: str) -> None:
    truth = _model(TRUE_BANDWIDTH, mode)
    assert truth.retention(1, 1, 1) < 0.5  # the data carry a cost to fit
    m = _fit(_points(truth), mode)
    assert m.mode == mode and m.bandwidth_source == "fitted"
    assert abs(math.log10(m.bandwidth_bytes_s / TRUE_BANDWIDTH)) <= GRID_STEP
    assert m.fit_points == len(SETTINGS) and m.max_point_error_pct is not None and m.max_point_error_pct < 1.0
    assert m.fit_rms_error_pct is not None and m.fit_rms_error_pct <= m.max_point_error_pct


@pytest.mark.parametrize("mode", ["serial", "overlapped"])
def test_points_at_the_baseline_throughput_are_reported_as_the_highest_grid_edge_not_as_fitted(mode: str) -> None:
    m = _fit([MeasuredPoint(g, n, k, BASELINE) for g, n, k in SETTINGS], mode)
    assert m.bandwidth_source == "grid edge (highest)" and m.bandwidth_bytes_s == BANDWIDTH_GRID[-1]
    assert "grid edge (highest)" in m.fit_note()


def test_points_slower_than_any_grid_bandwidth_explains_are_reported_as_the_lowest_grid_edge() -> None:
    m = _fit([MeasuredPoint(1, 1, 1, BASELINE * 1e-6)], "serial")
    assert m.bandwidth_source == "grid edge (lowest)" and m.bandwidth_bytes_s == BANDWIDTH_GRID[0]


@pytest.mark.parametrize("points", [
    [],
    [MeasuredPoint(0, 0, 1, BASELINE)],  # the baseline: no layer offloaded
    [MeasuredPoint(0, 0, 1, BASELINE), MeasuredPoint(0, 0, 1, BASELINE * 0.9)],
])
@pytest.mark.parametrize("mode", FORMS)
def test_a_fit_without_a_point_that_offloads_a_layer_is_refused(points: list[MeasuredPoint], mode: str) -> None:
    with pytest.raises(ValueError, match="no measured point offloads a layer: nothing to fit"):
        _fit(points, mode)


def test_baseline_points_beside_offloaded_ones_do_not_count_as_fitted_points_of_the_bandwidth() -> None:
    truth = _model(TRUE_BANDWIDTH, "serial")
    with_baseline = _fit([MeasuredPoint(0, 0, 1, BASELINE), *_points(truth)], "serial")
    assert with_baseline.bandwidth_bytes_s == _fit(_points(truth), "serial").bandwidth_bytes_s


def test_an_unknown_form_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="mode 'parallel'; allowed: serial, overlapped"):
        step_seconds(0.01, 8, 4, 2, 1, 1, 0.001, "parallel")
    with pytest.raises(ValueError, match="allowed: serial, overlapped"):
        _fit(_points(_model(TRUE_BANDWIDTH, "serial")), "parallel")


def test_step_seconds_of_an_array_of_copy_times_matches_each_scalar() -> None:
    copies = np.array([1e-4, 1e-3, 1e-2])
    for mode in FORMS:
        arr = step_seconds(0.008, 8, 4, 2, 1, 3, copies, mode)
        assert list(arr) == pytest.approx([step_seconds(0.008, 8, 4, 2, 1, 3, float(c), mode) for c in copies])
