"""``python -m analysis transfer-check FILE.json``: the step model against a GPU check's measurements.

Reads the JSON of ``python -m offload_tools.gpu_check_torch`` and predicts every measured step time
with the event model of :mod:`offload_tools.step_model` (the step boundary of each protocol,
:func:`offload_tools.step_model.boundary`: captured join in graphs, or a device-wide sync per step,
joins the boundary refill; the crossing protocol, or eager steps timed on the compute stream,
let it cross; the crossing protocol under graphs with a device sync starts it with the next
step), from the record's own
``t_base`` (un-offloaded step, same mode), bytes per layer, measured bandwidth, offloaded layers
and prefetch step. Records written before the check ran several protocols (no ``protocols`` per
point) ran the captured join, copied every refill and synchronised the device after each step.

Output: one JSON object with per-point ``predicted_step_s``, ``measured_step_s``, ``error_pct``
(``(predicted - measured) / measured * 100``), ``max_abs_error_pct`` and ``ok``
(``max_abs_error_pct <= threshold_pct``). Exit status 0 when ok, 1 when the largest error exceeds
the threshold (or nothing was compared), 2 for an unreadable file or an unknown mode.

Not modelled: host launch overhead, which dominates eager steps on a fast GPU (``t_base`` of
eager measures the host), so eager points are expected to miss; ``--modes graph`` restricts the
comparison to CUDA-graph points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offload_tools.step_model import boundary, simulate_step_s

DEFAULT_THRESHOLD_PCT = 5.0
MODES = ("eager", "graph", "compile")


class TransferCheckInputError(ValueError):
    """The file is not a GPU check JSON this command can read (message names what is missing)."""


def _protocol_runs(point: dict[str, Any], step_sync: str) -> list[tuple[str, str, bool, dict[str, Any]]]:
    """``(protocol, copy_protocol, skips resident slots, modes)`` of a point, old or new layout."""
    if "protocols" not in point:  # one protocol, before the crossing protocol and the skip existed
        return [("current", "captured_join", False, point.get("modes", {}))]
    out = []
    for name, rec in point["protocols"].items():
        proto = rec.get("copy_protocol") or "captured_join"
        out.append((name, proto, name == "current", rec.get("modes", {})))
    return out


def check(data: dict[str, Any], modes: tuple[str, ...] = MODES,
          threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> dict[str, Any]:
    """Compare every measured (point, protocol, mode) of ``data`` with the step model.

    Args:
        data: the parsed GPU check JSON.
        modes: modes to compare.
        threshold_pct: largest absolute error (percent of the measured step) for ``ok``.

    Raises:
        TransferCheckInputError: a field the model needs is missing.
    """
    try:
        layers = int(data["shapes"]["layers"])
        copy_s = float(data["bytes_per_layer"]) / float(data["h2d_bandwidth_bytes_s"])
        points = [p for p in data["points"] if "group_size" in p]
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise TransferCheckInputError(f"not a gpu_check_torch JSON with shapes.layers, bytes_per_layer, "
                                      f"h2d_bandwidth_bytes_s and points: {exc!r}") from None
    step_sync = str(data.get("step_sync", "device"))
    rows = []
    for p in points:
        for name, proto, skip, pmodes in _protocol_runs(p, step_sync):
            for mode, m in pmodes.items():
                if mode not in modes:
                    continue
                kw = boundary(proto, mode, step_sync)
                joined = kw["joined_boundary"]
                pred = simulate_step_s(layers, p["offloaded_layers"], float(m["baseline_step_s"]), copy_s,
                                       int(p.get("prefetch_step", 1)), skip_resident=skip, **kw)
                meas = float(m["step_s"])
                rows.append({"group_size": p["group_size"], "num_in_group": p["num_in_group"],
                             "prefetch_step": p.get("prefetch_step", 1), "protocol": name, "copy_protocol": proto,
                             "mode": mode, "joined_boundary": joined, "predicted_step_s": pred,
                             "measured_step_s": meas, "error_pct": (pred - meas) / meas * 100.0})
    worst = max((abs(r["error_pct"]) for r in rows), default=None)
    return {"check": "transfer_check", "modes": list(modes), "step_sync": step_sync, "copy_s": copy_s,
            "threshold_pct": threshold_pct, "compared": len(rows), "max_abs_error_pct": worst,
            "ok": worst is not None and worst <= threshold_pct, "points": rows}


def main(path: Path, modes: tuple[str, ...] | None, threshold_pct: float) -> int:
    """Print the comparison of ``path`` as one JSON line; exit status as the module docstring."""
    import sys

    chosen = tuple(modes) if modes else MODES
    bad = [m for m in chosen if m not in MODES]
    if bad:
        print(f"error: --modes {' '.join(bad)}: unknown; choices: {', '.join(MODES)}", file=sys.stderr)
        return 2
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        out = check(data, chosen, threshold_pct)
    except (OSError, json.JSONDecodeError, TransferCheckInputError) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, sort_keys=True))
    return 0 if out["ok"] else 1
