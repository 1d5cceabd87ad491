"""Predictions of the transfer-bound model for settings a run did not measure (the recommender's list).

What is modelled: which settings exist and what each releases is one rule, ``offload_tools.choice`` (the choose
run's): every distinct ``(G, N, prefetch_step in 1..3)`` of the model's layer count (``distinct_settings``:
settings offloading the same layers into the same number of slots are one), its offloaded layers
(``offload.selection``) and its released bytes (``released_bytes``: offloaded layer bytes minus
``min(prefetch_step, offloaded)`` static slots, ``offload.ring.num_slots``, as the offloader allocates them and
its evidence accounts them). Here: the bytes of one static slot, read from the run's evidence (``slot_from_evidence``),
the settings of the implementation already measured, and the model's predicted throughput
(``offload_tools.transfer_model.TransferModel.predict``).

What is deliberately not modelled: whether the model may be believed (``analysis.model.trust``; the
caller shows these only for a trusted model); layers of different sizes (every layer has the model's
``bytes_per_layer``, the median evidence bytes per wrapped layer).
"""

from __future__ import annotations

import pandas as pd

from offload.ring import num_slots
from offload.selection import select_offload_layers
from offload_tools.choice import Setting, distinct_settings, released_bytes, setting_key
from offload_tools.transfer_model import TransferModel
from results_schema.units import GIB


def predict_unmeasured(model: TransferModel, ph: pd.DataFrame, implementation: str, need: float) -> list[dict]:
    """Model predictions of every distinct unmeasured setting of ``implementation`` releasing at least ``need``
    GiB, best predicted throughput first (ties: less released).

    Args:
        model: the fitted model (``num_layers``, ``bytes_per_layer``, ``predict``).
        ph: the phase's summary rows (``analysis.aggregate``: ``implementation``, ``group_size``,
            ``num_in_group``, ``prefetch_step``, ``wrapped_count``, ``static_buffer_bytes``).
        implementation: whose unmeasured settings are predicted; a setting is measured when a row of
            ``implementation`` offloads the same layers into the same number of slots (``setting_key``).
        need: released GiB (2**30 bytes) a prediction must reach.

    Returns:
        One dict per setting: ``group_size``, ``num_in_group``, ``prefetch_step``, ``offloaded_layers`` (count),
        ``predicted_released_bytes`` (B), ``predicted_released_gib``, ``predicted_tok_s``.
    """
    n = model.num_layers
    measured = {setting_key(n, int(r["group_size"]), int(r["num_in_group"]), int(r["prefetch_step"]))
                for _, r in ph.iterrows() if r["implementation"] == implementation and int(r["group_size"]) > 0}
    bpl = round(model.bytes_per_layer)
    slot = slot_from_evidence(ph, default=bpl)
    layer_bytes = dict.fromkeys(range(n), bpl)
    preds = []
    for s in distinct_settings(n):
        released = released_bytes(s, layer_bytes, slot, n)
        if setting_key(n, s.group_size, s.num_in_group, s.prefetch_step) in measured or released / GIB < need - 1e-12:
            continue
        preds.append({"group_size": s.group_size, "num_in_group": s.num_in_group, "prefetch_step": s.prefetch_step,
                      "offloaded_layers": len(select_offload_layers(n, s.group_size, s.num_in_group)),
                      "predicted_released_bytes": released, "predicted_released_gib": released / GIB,
                      "predicted_tok_s": model.predict(s.group_size, s.num_in_group, s.prefetch_step)})
    preds.sort(key=lambda d: (-d["predicted_tok_s"], d["predicted_released_gib"]))
    return preds


def slot_from_evidence(ph: pd.DataFrame, default: int) -> int:
    """Bytes of one static slot: the median over the rows with static buffers of ``static_buffer_bytes`` divided by
    the slots the offloader allocated, ``offload.ring.num_slots(wrapped_count, prefetch_step)``; ``default`` (B)
    when no row has a static buffer."""
    s = ph[(ph["static_buffer_bytes"] > 0) & (ph["prefetch_step"] > 0) & (ph["wrapped_count"] > 0)]
    if s.empty:
        return int(default)
    per = [int(r["static_buffer_bytes"]) / num_slots(int(r["wrapped_count"]), int(r["prefetch_step"]))
           for _, r in s.iterrows()]
    return round(float(pd.Series(per).median()))


__all__ = ["Setting", "predict_unmeasured", "slot_from_evidence"]
