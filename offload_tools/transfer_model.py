"""Transfer-bound decode-step model of layer offload in two forms, and its one-parameter fit.

What is modelled: a decode step of the baseline takes ``t0 = P / T0`` seconds (``P`` prompts per
round each gaining one token per step, ``T0`` the baseline throughput in tok/s), spread evenly over
``num_layers`` layers (``c = t0 / num_layers`` per layer). Offloading ``L`` layers of ``b`` bytes each
moves ``L * b`` bytes host->device per step at bandwidth ``BW`` (bytes/s), one copy ``x = b / BW``:

* ``serial`` (copies share the cores with compute: the CPU runtime, the sync offloader):
  ``t = t0 + L * x`` (``compute + copy``);
* ``overlapped`` (prefetch on a copy engine): each group of ``G`` layers holds ``N`` offloaded layers
  whose copies hide behind ``prefetch_step * G`` layers of compute; a group's window takes
  ``max(compute, copy)``, so the step stalls for what does not fit:
  ``t = t0 + (L / N) * max(0, N * x - prefetch_step * G * c)``.

Predicted throughput is ``T0 * t0 / t``; retention is ``t0 / t``. The fit chooses ``BW`` minimising the
squared relative throughput error over measured points on a logarithmic grid (``BANDWIDTH_GRID``:
1 MB/s .. 10 TB/s, 200 values per decade); a best value on an edge of the grid, or a best error shared by every
bandwidth up to an edge (the overlapped form when every copy hides), is reported as that edge (the data do not
pin the bandwidth down), never as fitted.

The runner's choose-then-confirm phase (``runners.orchestration.choose``) uses this module while a run
goes; ``analysis.model.fit`` uses it on finished runs: one implementation.

What is deliberately not modelled: prefill separately from decode, copy/compute bandwidth contention,
cache effects (a copied layer then read from cache), uneven layer times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, Sequence

import numpy as np

from offload.selection import select_offload_layers

BANDWIDTH_GRID = np.logspace(6, 13, 1401)
"""Bandwidths tried by the fit (bytes/s): 1 MB/s .. 10 TB/s, 200 per decade."""

Form = Literal["serial", "overlapped"]
FORMS: tuple[Form, ...] = ("serial", "overlapped")
"""The two model forms, in the order a tie is broken (serial predicts the larger cost)."""


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured offload setting: ``(G, N, prefetch_step)`` and its throughput (tok/s)."""

    group_size: int
    num_in_group: int
    prefetch_step: int
    throughput_tok_s: float


@dataclass(frozen=True)
class TransferModel:
    """Parameters of the transfer-bound model (see the module docstring).

    Attributes:
        baseline_tok_s: ``T0``, baseline throughput (tok/s).
        num_prompts: ``P``, tokens gained per decode step.
        num_layers: decoder layers of the model.
        bytes_per_layer: ``b``, bytes copied per offloaded layer.
        bandwidth_bytes_s: ``BW`` (bytes/s; ``inf`` = no copy cost).
        mode: ``serial`` or ``overlapped``.
        bandwidth_source: ``given``, ``fitted``, ``grid edge (lowest)`` or ``grid edge (highest)``.
        fit_rms_error_pct, max_point_error_pct: RMS and worst |predicted - measured| / measured (percent) over
            the fitted points; None when nothing was fitted.
        fit_points: points fitted.
        bench_bandwidth_bytes_s: the run's in-run copy bench (bytes/s), if any (``analysis.model.trust``).
    """

    baseline_tok_s: float
    num_prompts: int
    num_layers: int
    bytes_per_layer: float
    bandwidth_bytes_s: float
    mode: str
    bandwidth_source: str = "given"
    fit_rms_error_pct: float | None = None
    fit_points: int = 0
    max_point_error_pct: float | None = None
    bench_bandwidth_bytes_s: float | None = None

    def fit_note(self) -> str:
        """One line on the bandwidth and the fit, e.g. ``bandwidth 1.23 GB/s (fitted; RMS error 3.1% over 4 point(s))``."""
        err = "" if self.fit_rms_error_pct is None else \
            f"; RMS error {self.fit_rms_error_pct:.1f}% over {self.fit_points} point(s)"
        return f"bandwidth {self.bandwidth_bytes_s / 1e9:.4g} GB/s ({self.bandwidth_source}{err})"

    @property
    def t0(self) -> float:
        """Baseline seconds per decode step."""
        return self.num_prompts / self.baseline_tok_s

    def step_seconds(self, group_size: int, num_in_group: int, prefetch_step: int = 1) -> float:
        """Predicted seconds per decode step of ``(G, N, prefetch_step)``."""
        L = len(select_offload_layers(self.num_layers, group_size, num_in_group))
        if L == 0 or math.isinf(self.bandwidth_bytes_s):
            return self.t0
        return float(step_seconds(self.t0, self.num_layers, L, group_size, num_in_group, prefetch_step,
                                  self.bytes_per_layer / self.bandwidth_bytes_s, self.mode))

    def predict(self, group_size: int, num_in_group: int, prefetch_step: int = 1) -> float:
        """Predicted throughput (tok/s)."""
        return self.baseline_tok_s * self.t0 / self.step_seconds(group_size, num_in_group, prefetch_step)

    def retention(self, group_size: int, num_in_group: int, prefetch_step: int = 1) -> float:
        """Predicted throughput / baseline throughput."""
        return self.t0 / self.step_seconds(group_size, num_in_group, prefetch_step)


def step_seconds(t0: float, num_layers: int, offloaded: int, group_size: int, num_in_group: int,
                 prefetch_step: int, copy_s: float | np.ndarray, mode: str) -> float | np.ndarray:
    """Seconds per decode step (module docstring) for one copy time or an array of them.

    Raises:
        ValueError: ``mode`` is not one of ``FORMS``.
    """
    if mode == "serial":
        return t0 + offloaded * copy_s
    if mode == "overlapped":
        c = t0 / num_layers
        return t0 + (offloaded / num_in_group) * np.maximum(0.0, num_in_group * copy_s - prefetch_step * group_size * c)
    raise ValueError(f"mode {mode!r}; allowed: {', '.join(FORMS)}")


def fit(points: Sequence[MeasuredPoint], *, baseline_tok_s: float, num_prompts: int, num_layers: int,
        bytes_per_layer: float, mode: str, bench_bandwidth_bytes_s: float | None = None) -> TransferModel:
    """The model of ``mode`` whose bandwidth minimises the squared relative error over ``points``.

    Args:
        points: measured offload settings (at least one with an offloaded layer).
        baseline_tok_s, num_prompts, num_layers, bytes_per_layer: as ``TransferModel``.
        mode: ``serial`` or ``overlapped``.
        bench_bandwidth_bytes_s: carried into the model (trust check), not fitted.

    Raises:
        ValueError: no point offloads a layer, or ``mode`` unknown.
    """
    t0 = num_prompts / baseline_tok_s
    grid = BANDWIDTH_GRID
    err = np.zeros_like(grid)
    used = 0
    for p in points:
        L = len(select_offload_layers(num_layers, p.group_size, p.num_in_group))
        if L == 0:
            continue
        used += 1
        step = step_seconds(t0, num_layers, L, p.group_size, p.num_in_group, p.prefetch_step,
                            bytes_per_layer / grid, mode)
        pred = baseline_tok_s * t0 / step
        err += ((pred - p.throughput_tok_s) / p.throughput_tok_s) ** 2
    if used == 0:
        raise ValueError("no measured point offloads a layer: nothing to fit")
    i = int(np.argmin(err))
    flat = np.isclose(err, err[i], rtol=1e-9, atol=1e-15)  # every bandwidth as good as the best
    if flat[-1]:  # e.g. overlapped copies all hidden: any bandwidth above a bound fits, none is pinned down
        i = len(grid) - 1
    elif flat[0]:
        i = 0
    source = "grid edge (lowest)" if i == 0 else "grid edge (highest)" if i == len(grid) - 1 else "fitted"
    m = TransferModel(baseline_tok_s, num_prompts, num_layers, bytes_per_layer, float(grid[i]), mode,
                      bandwidth_source=source)
    return with_errors(m, points, bench_bandwidth_bytes_s)


def point_errors_pct(m: TransferModel, points: Sequence[MeasuredPoint]) -> list[float]:
    """``(predicted - measured) / measured * 100`` of every point."""
    return [(m.predict(p.group_size, p.num_in_group, p.prefetch_step) - p.throughput_tok_s) / p.throughput_tok_s * 100.0
            for p in points]


def with_errors(m: TransferModel, points: Sequence[MeasuredPoint], bench: float | None) -> TransferModel:
    """``m`` with its RMS and worst relative error (percent) over ``points`` and the bench bandwidth."""
    errs = point_errors_pct(m, points)
    rms = float(np.sqrt(np.mean(np.square(errs)))) if errs else float("nan")
    return replace(m, fit_rms_error_pct=rms, fit_points=len(points), bench_bandwidth_bytes_s=bench,
                   max_point_error_pct=max(abs(e) for e in errs) if errs else None)
