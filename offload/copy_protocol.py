"""Upstream's event protocol for one wrapped module's host-to-device copy (:mod:`offload.prefetch`).

The contract of vLLM's ``PrefetchOffloader`` (vLLM 0.32 ``vllm/model_executor/offloader/prefetch.py``):
a fork event recorded on the compute stream makes the copy stream wait until the queued
kernels (the previous user of the slot) are issued; a done event recorded after the copy is
what the compute stream waits on before the module runs. During CUDA/ACL graph capture a fresh
fork event is used and the done event is joined inside the capture (``in_capture``). On a
synchronous backend (CPU) the copies run at once and nothing is waited on.
"""

from __future__ import annotations

from typing import Any

from offload.backend import DeviceBackend
from offload.host_storage import Wrapped


def issue_copy(b: DeviceBackend, copy_stream: Any, w: Wrapped) -> None:
    """Copy ``w``'s runs into its slot: on ``copy_stream`` after queued compute (asynchronous backends)."""
    if not b.asynchronous:  # synchronous backend (CPU): no streams, no events
        for dst, src in w.runs:
            dst.copy_(src)
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
