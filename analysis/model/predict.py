"""Predictions of the transfer-bound model for settings a run did not measure (the recommender's list).

What is modelled: every (G, N, prefetch_step in 1..3) of the model's layer count not measured for the
implementation, its offloaded layers (``offload.selection``), the released bytes they would account
(offloaded layers x bytes per layer minus the static buffer per prefetch slot measured in the run) and
the model's predicted throughput (``analysis.model.fit.TransferModel.predict``).

What is deliberately not modelled: whether the model may be believed (``analysis.model.trust``; the
caller shows these only for a trusted model).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from offload.selection import select_offload_layers

GIB = 1 << 30


def predict_unmeasured(model: Any, ph: pd.DataFrame, implementation: str, need: float) -> list[dict]:
    """Model predictions of every unmeasured (G, N, prefetch_step in 1..3) of ``implementation`` releasing
    at least ``need`` GiB, best predicted throughput first (ties: less released).

    Args:
        model: an ``analysis.model.fit.TransferModel`` (``num_layers``, ``bytes_per_layer``, ``predict``).
        ph: the phase's summary rows (measured settings, static buffer bytes per prefetch slot).
        implementation: whose unmeasured settings are predicted.
        need: released GiB (2**30 bytes) a prediction must reach.
    """
    measured = {(int(r["group_size"]), int(r["num_in_group"]), int(r["prefetch_step"]))
                for _, r in ph.iterrows() if r["implementation"] == implementation}
    static_per_slot = _static_per_slot(ph, model.bytes_per_layer)
    preds = []
    for g in range(1, model.num_layers + 1):
        for n in range(1, g + 1):
            L = len(select_offload_layers(model.num_layers, g, n))
            for k in (1, 2, 3) if L else ():
                released = L * model.bytes_per_layer - k * static_per_slot
                if (g, n, k) in measured or released / GIB < need - 1e-12:
                    continue
                preds.append({"group_size": g, "num_in_group": n, "prefetch_step": k, "offloaded_layers": L,
                              "predicted_released_gib": released / GIB,
                              "predicted_tok_s": model.predict(g, n, k)})
    preds.sort(key=lambda d: (-d["predicted_tok_s"], d["predicted_released_gib"]))
    return preds


def _static_per_slot(ph: pd.DataFrame, default: float) -> float:
    s = ph[(ph["static_buffer_bytes"] > 0) & (ph["prefetch_step"] > 0)]
    if s.empty:
        return default
    return float((s["static_buffer_bytes"] / s["prefetch_step"]).median())
