"""A fake device boundary: streams, events and copies that are observable and adversarial.

``FakeBackend`` implements :class:`offload.backend.DeviceBackend`. The compute stream runs
work immediately (the host *is* the compute stream). Copies issued on the side stream are
queued and executed according to ``mode``:

* ``"eager"``: at issue time (the earliest moment a real device could run them, since every
  fork wait is on already-finished compute). A slot refilled before its current owner ran
  is then visible as wrong data in that owner.
* ``"lazy"``: only when the compute stream waits for an event covering them (or the whole
  stream). A layer that runs without waiting for its copy then sees stale data.

Every operation is appended to ``trace`` for protocol checks.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from offload.backend import DeviceBackend

_ids = itertools.count()


@dataclass(eq=False)
class FakeStream:
    name: str
    queue: list[tuple[int, Any]] = field(default_factory=list)  # (op id, callable)
    issued: int = 0


@dataclass(eq=False)
class FakeEvent:
    id: int = field(default_factory=lambda: next(_ids))
    stream: FakeStream | None = None
    upto: int = -1  # ops issued on ``stream`` before the record


class FakeBackend(DeviceBackend):
    name = "fake"
    asynchronous = True

    def __init__(self, mode: str = "lazy", ns_name: str = "fake", external: bool = False) -> None:
        assert mode in ("eager", "lazy")
        self.mode = mode
        self.external = external
        self.compute = FakeStream("compute")
        self.cur = self.compute
        self.trace: list[tuple] = []
        self.streams: list[FakeStream] = []
        self.events: list[FakeEvent] = []
        self.ns_name = ns_name

    def new_stream(self) -> FakeStream:
        s = FakeStream(f"copy{len(self.streams)}")
        self.streams.append(s)
        return s

    def supports_external_events(self) -> bool:
        return self.external

    def new_event(self, external: bool = False) -> FakeEvent:
        assert self.external or not external, "external event asked of a backend without them"
        e = FakeEvent()
        self.events.append(e)
        return e

    def current_stream(self) -> FakeStream:
        return self.cur

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        prev, self.cur = self.cur, stream
        try:
            yield
        finally:
            self.cur = prev

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        event.stream, event.upto = stream, stream.issued
        self.trace.append(("record", event.id, stream.name))

    def _drain(self, stream: FakeStream, upto: int) -> None:
        keep = []
        for op_id, fn in stream.queue:
            if op_id < upto:
                fn()
            else:
                keep.append((op_id, fn))
        stream.queue = keep

    def wait_event(self, stream: FakeStream, event: FakeEvent) -> None:
        self.trace.append(("wait_event", stream.name, event.id))
        if stream is self.compute and event.stream is not None:
            self._drain(event.stream, event.upto)

    def wait_stream(self, stream: FakeStream, other: FakeStream) -> None:
        self.trace.append(("wait_stream", stream.name, other.name))
        if stream is self.compute and other is not None:
            self._drain(other, other.issued)

    def synchronize(self, stream: FakeStream) -> None:
        self.trace.append(("synchronize", stream.name))
        self._drain(stream, stream.issued)

    def record_stream(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.trace.append(("record_stream", stream.name, tensor.data_ptr()))

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        s = self.cur
        op = s.issued
        s.issued += 1
        self.trace.append(("copy", s.name, dst.data_ptr()))
        if s is self.compute or self.mode == "eager":
            dst.copy_(src)
        else:
            s.queue.append((op, lambda: dst.copy_(src)))


class ProbeLayer(torch.nn.Module):
    """A decoder-layer stand-in: records the weight values it sees when it runs."""

    def __init__(self, layer: int, log: list, width: int = 8) -> None:
        super().__init__()
        self.layer = layer
        self.log = log
        self.weight = torch.nn.Parameter(torch.full((width,), float(layer + 1)), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.full((3,), float(-(layer + 1))), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append(("forward", self.layer, self.weight.data_ptr(), float(self.weight[0]), float(self.bias[0])))
        return x + self.weight.sum() + self.bias.sum()
