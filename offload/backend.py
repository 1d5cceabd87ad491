"""Device backends: the only place that touches streams, events and copies.

The prefetch algorithm (``offload.prefetch``) is written once against
:class:`DeviceBackend`; this module supplies

* :class:`StreamBackend` over ``torch.cuda`` (CUDA / ROCm) or ``torch.npu``
  (Ascend, ``torch_npu``): both namespaces expose ``Stream``, ``Event``,
  ``current_stream``, ``stream(...)`` and ``is_current_stream_capturing``;
* :class:`CpuBackend`: the CPU platform has no asynchronous device, so copies are
  synchronous ``copy_`` calls and streams/events are inert tokens.

Tests substitute a fake backend (same interface) to observe every fork, copy, record
and wait. Not modelled: multiple devices per process (vLLM uses one device per worker).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


class DeviceBackend:
    """Interface of a device backend (CPU semantics: everything synchronous, no-ops)."""

    name = "cpu"
    asynchronous = False

    def new_stream(self) -> Any:
        """A side stream for host-to-device copies."""
        return None

    def new_event(self, external: bool = False) -> Any:
        """An event that can be recorded on a stream and waited on.

        ``external=True``: recorded / waited on inside a graph capture it becomes a record /
        wait node of the graph (``torch.cuda.Event(external=True)``), so a replay records it
        or waits on its most recent record made outside the graph.
        """
        return None

    def supports_external_events(self) -> bool:
        """Whether :meth:`new_event` can make external events (crossing protocol available)."""
        return False

    def current_stream(self) -> Any:
        """The compute stream the caller is running on."""
        return None

    def stream(self, stream: Any) -> contextlib.AbstractContextManager[None]:
        """Context in which kernels/copies are issued on ``stream``."""
        return contextlib.nullcontext()

    def record(self, event: Any, stream: Any) -> None:
        """Record ``event`` on ``stream``."""

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait until ``event`` has completed."""

    def wait_stream(self, stream: Any, other: Any) -> None:
        """Make ``stream`` wait for all work queued so far on ``other``."""

    def synchronize(self, stream: Any) -> None:
        """Block the host until ``stream`` has drained."""

    def is_capturing(self) -> bool:
        """Whether the current stream is capturing a device graph."""
        return False

    def pin_memory(self) -> bool:
        """Whether host storage should be page-locked (pinned)."""
        return False

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy ``src`` (host) into ``dst`` (device buffer) on the current stream."""
        dst.copy_(src, non_blocking=self.asynchronous)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """Mark ``tensor`` as used by ``stream``: its memory is reused only after that work."""

    def count_mismatch(self, counter: torch.Tensor, tag: torch.Tensor, expected: int) -> None:
        """On the current stream: ``counter += (tag != expected)`` (int64 device scalars; no host sync)."""
        counter.add_(tag.ne(expected).sum())

    def release_host_cache(self) -> None:
        """Return cached, no longer used pinned host blocks to the OS (where the runtime can)."""


class CpuBackend(DeviceBackend):
    """CPU platform: host storage and "device" buffers are both host memory; copies block."""

    name = "cpu"


class StreamBackend(DeviceBackend):
    """Backend over a ``torch.cuda``-like namespace (``torch.cuda`` or ``torch.npu``).

    Args:
        name: ``"cuda"`` or ``"npu"``.
        ns: the namespace module; defaults to ``getattr(torch, name)``.
        pin: whether to pin host storage (vLLM ``should_pin_memory()`` when available).
    """

    asynchronous = True

    def __init__(self, name: str, ns: Any | None = None, pin: bool = True) -> None:
        self.name = name
        self.ns = ns if ns is not None else getattr(torch, name)
        self._pin = pin

    def new_stream(self) -> Any:
        return self.ns.Stream()

    def new_event(self, external: bool = False) -> Any:
        return self.ns.Event(external=True) if external else self.ns.Event()

    def supports_external_events(self) -> bool:
        """True when the namespace's ``Event`` takes ``external`` (torch >= 2.6 for CUDA; torch-npu: checked)."""
        import inspect

        try:
            params = inspect.signature(self.ns.Event.__new__).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            return False
        if "external" in params:
            return True
        try:
            return "external" in inspect.signature(self.ns.Event.__init__).parameters
        except (TypeError, ValueError):  # pragma: no cover
            return False

    def current_stream(self) -> Any:
        return self.ns.current_stream()

    def stream(self, stream: Any) -> contextlib.AbstractContextManager[None]:
        return self.ns.stream(stream)

    def record(self, event: Any, stream: Any) -> None:
        event.record(stream)

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def wait_stream(self, stream: Any, other: Any) -> None:
        stream.wait_stream(other)

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()

    def is_capturing(self) -> bool:
        return bool(self.ns.is_current_stream_capturing())

    def pin_memory(self) -> bool:
        return self._pin

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        if tensor.device.type == self.name:  # tests route host tensors through a fake namespace
            tensor.record_stream(stream)

    def release_host_cache(self) -> None:
        # CUDA: torch's pinned-memory caching allocator keeps freed blocks; torch-npu has no
        # public equivalent (nothing to call there).
        empty = getattr(torch._C, "_host_emptyCache", None) if self.name == "cuda" else None
        if empty is not None:
            empty()


def _should_pin_memory() -> bool:
    """vLLM's ``should_pin_memory()`` (platform capability + env override) when importable."""
    try:
        from vllm.model_executor.offloader.base import should_pin_memory
    except ImportError:
        return torch.cuda.is_available()
    return bool(should_pin_memory())


def backend_for_device(device: torch.device | str) -> DeviceBackend:
    """Pick the backend for the device the wrapped parameters live on.

    Args:
        device: device of the model's parameters at ``wrap_modules`` time.

    Returns:
        :class:`StreamBackend` for ``cuda``/``npu``, :class:`CpuBackend` for ``cpu``.

    Raises:
        ValueError: any other device type (named in the message).
    """
    kind = torch.device(device).type
    if kind == "cpu":
        return CpuBackend()
    if kind in ("cuda", "npu"):
        return StreamBackend(kind, pin=_should_pin_memory())
    raise ValueError(f"no offload device backend for device type {kind!r} (supported: cpu, cuda, npu)")
