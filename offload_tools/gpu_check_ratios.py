"""What a GPU check's step times are measured against: the physical ceiling, the event model's bound, no offload.

Per protocol, mode and point (``python -m offload_tools.gpu_check_torch``):

* **ceiling** ``max(t_base, M_c * b / BW)`` (reported first): no step can beat the un-offloaded step
  ``t_base`` (same mode, timed beside it) nor the copy engine moving the ``M_c`` layers copied per step
  (:func:`offload_tools.step_model.copied_per_step`: a slot serving one module is loaded once, so
  ``current`` copies nothing at (28,1)). Where nothing is copied the ceiling does not apply: the
  record says :data:`NOTHING_COPIED` instead of a ratio (it would read above 1).
* **bound** and **model**: the event model of :mod:`offload_tools.step_model` for the protocol's step
  boundary (a crossing refill owed to the next replay starts with the next step: the protocol's limit
  at G = 8). The device's layer time ``t_dev / L`` comes from the un-offloaded step of graph mode
  (CUDA graphs: no launch overhead) where it ran, else from the mode's own. Eager and compiled steps
  are launch-bound on a fast GPU, so their bound is ``max(t_base, device bound)``: no faster than the
  un-offloaded step timed the same way, no faster than the device moving the bytes.
* **no offload** (:func:`faster_than_baseline`): the un-offloaded step is timed at every point, before
  and after the protocols, by the same function on the same clock. An offloaded step whose median is
  below the baselines' median by more than their step-to-step spread (``(max - min) / median`` of the
  baseline steps of that point and mode, at least :data:`MIN_SPREAD`) is a timing no copy protocol
  allows: the check fails naming the point.

Not modelled: host launch time inside the event model (it enters only through ``t_base`` of a mode).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from offload_tools.step_model import boundary, bound_step_s, copied_per_step, simulate_step_s

NOTHING_COPIED = "ceiling n/a: nothing copied"
"""The ceiling's note where the protocol copies no byte per step (its slot is never refilled)."""
MIN_SPREAD = 0.01
"""Least relative step-to-step spread of the baseline a faster offloaded step must exceed (1 %)."""

__all__ = ["MIN_SPREAD", "NOTHING_COPIED", "baseline_spread", "faster_than_baseline", "mode_ratios",
           "recompute"]


def mode_ratios(*, mode: str, copy_protocol: str, skip_resident: bool, num_layers: int,
                offloaded: Sequence[int], prefetch_step: int, step_sync: str, t_base_s: float,
                device_t_base_s: float, copy_s: float, step_s: float) -> dict[str, Any]:
    """Ceiling, bound and model of one measured step (module docstring).

    Args:
        mode: ``eager``, ``graph`` or ``compile``.
        copy_protocol: the protocol that ran (``crossing``, ``captured_join``, ``synchronous``, ...).
        skip_resident: a slot serving one module is never refilled (``current``).
        num_layers: layers per step ``L``.
        offloaded: offloaded layer indices, ascending.
        prefetch_step: ``offload_prefetch_step``.
        step_sync: ``stream`` or ``device`` (the end of a timed step).
        t_base_s: the un-offloaded step of this mode, seconds.
        device_t_base_s: the un-offloaded step on the device alone (graph mode's), seconds.
        copy_s: seconds per layer copy, ``b / BW``.
        step_s: the measured step, seconds (> 0).

    Returns:
        ``copied_per_step``, ``transfer_s``, ``ceiling_step_s`` / ``ceiling_ratio`` (``None`` with
        ``ceiling_note`` :data:`NOTHING_COPIED` where nothing is copied), ``bound_step_s``,
        ``bound_ratio`` (bound / step), ``model_step_s``, ``device_layer_s``, ``joined_boundary``,
        ``deferred_boundary``.

    Raises:
        ValueError: ``step_s <= 0``, or as :func:`offload_tools.step_model.simulate_step_s`.
    """
    if step_s <= 0:
        raise ValueError(f"step_s ({step_s}) must be > 0")
    kw = boundary(copy_protocol, mode, step_sync)
    m_c = copied_per_step(len(offloaded), prefetch_step, skip_resident)
    sel = list(offloaded)
    bound = bound_step_s(num_layers, sel, device_t_base_s, copy_s, prefetch_step, skip_resident=skip_resident, **kw)
    model = simulate_step_s(num_layers, sel, device_t_base_s, copy_s, prefetch_step, skip_resident=skip_resident,
                            **kw)
    if mode != "graph":  # launch-bound: no faster than the un-offloaded step of this mode
        bound, model = max(t_base_s, bound), max(t_base_s, model)
    ceiling = max(t_base_s, m_c * copy_s) if m_c else None
    return {"copied_per_step": m_c, "transfer_s": m_c * copy_s, "ceiling_step_s": ceiling,
            "ceiling_ratio": None if ceiling is None else ceiling / step_s,
            "ceiling_note": NOTHING_COPIED if ceiling is None else None,
            "bound_step_s": bound, "bound_ratio": bound / step_s, "model_step_s": model,
            "device_layer_s": device_t_base_s / num_layers, **kw}


def baseline_spread(times_s: Sequence[float]) -> float:
    """Relative step-to-step spread of baseline steps: ``(max - min) / median``, at least :data:`MIN_SPREAD`.

    Raises:
        ValueError: no times.
    """
    if not times_s:
        raise ValueError("baseline_spread needs at least one step time")
    med = statistics.median(times_s)
    return max(MIN_SPREAD, (max(times_s) - min(times_s)) / med if med > 0 else MIN_SPREAD)


def faster_than_baseline(step_s: float, baseline_times_s: Sequence[float]) -> dict[str, Any]:
    """Whether an offloaded step's median beats the interleaved baselines beyond their spread.

    Args:
        step_s: the offloaded step's median, seconds.
        baseline_times_s: every timed step of the un-offloaded stack at the same point and mode
            (both blocks, before and after the protocols).

    Returns:
        ``baseline_step_s`` (median), ``spread`` (:func:`baseline_spread`), ``below_baseline``
        (``1 - step / baseline``, negative when slower) and ``faster`` (``below_baseline > spread``).

    Raises:
        ValueError: no baseline times.
    """
    spread = baseline_spread(baseline_times_s)
    base = statistics.median(baseline_times_s)
    below = 1.0 - step_s / base
    return {"baseline_step_s": base, "spread": spread, "below_baseline": below, "faster": below > spread}


def _device_t_base(data: dict[str, Any], point: dict[str, Any], m: dict[str, Any]) -> float:
    """The un-offloaded graph step of this point (interleaved, else the protocols' records), else the run's
    graph step, else the record's own un-offloaded step (no graph mode ran)."""
    graph = point.get("baseline", {}).get("graph")
    if graph is not None:
        return float(graph["step_s"])
    for rec in point.get("protocols", {}).values():
        g = rec.get("modes", {}).get("graph")
        if g is not None:
            return float(g["baseline_step_s"])
    return float(data.get("baseline_step_s", {}).get("graph", m["baseline_step_s"]))


def recompute(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Both ratios of every (point, protocol, mode) of a ``gpu_check_torch`` JSON, from its recorded times.

    Uses the record's ``t_base`` (``baseline_step_s`` per mode), bytes per layer, bandwidth, offloaded
    layers, prefetch step, step sync and copy protocol; ``skip_resident`` is ``protocol == "current"``.
    Points that did not run (no ``protocols``) are left out.

    Returns:
        One row per measured step: ``group_size``, ``num_in_group``, ``protocol``, ``mode``, ``step_s``
        and the fields of :func:`mode_ratios`.

    Raises:
        KeyError: a field the ratios need is missing.
    """
    copy_s = float(data["bytes_per_layer"]) / float(data["h2d_bandwidth_bytes_s"])
    layers = int(data["shapes"]["layers"])
    rows = []
    for p in data["points"]:
        for name, rec in p.get("protocols", {}).items():
            for mode, m in rec["modes"].items():
                r = mode_ratios(mode=mode, copy_protocol=rec["copy_protocol"], skip_resident=name == "current",
                                num_layers=layers, offloaded=p["offloaded_layers"],
                                prefetch_step=int(p["prefetch_step"]), step_sync=str(data["step_sync"]),
                                t_base_s=float(m["baseline_step_s"]),
                                device_t_base_s=_device_t_base(data, p, m), copy_s=copy_s,
                                step_s=float(m["step_s"]))
                rows.append({"group_size": p["group_size"], "num_in_group": p["num_in_group"], "protocol": name,
                             "mode": mode, "step_s": float(m["step_s"]), **r})
    return rows
