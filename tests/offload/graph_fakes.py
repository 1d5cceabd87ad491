"""A device fake that records stream/event dependencies, with graph capture and replay.

``HbBackend`` implements :class:`offload.backend.DeviceBackend` and executes nothing: every
copy, layer read, event record and wait becomes a node with its predecessors (stream order,
event waits, graph edges), and the analysis works on the happens-before relation (transitive
closure of those edges, kept as bit sets). CUDA's capture rules are enforced:

* a stream capturing a graph records *template* nodes; a stream that waits on an event recorded
  inside the capture joins it; at the end of capture every joined stream must have been joined
  back into the origin stream (else :class:`CaptureError`, CUDA's ``StreamCaptureUnjoined``);
* inside a capture, waiting on a non-external event recorded outside it, or ``wait_stream`` on a
  stream outside it, is an error (``StreamCaptureIsolation``); outside a capture, waiting on a
  non-external event whose last record was inside a capture is an error;
* an external event recorded (waited on) inside a capture becomes a record (wait) node.

:meth:`HbBackend.replay` instantiates a graph's template on a stream without running Python:
its nodes depend on the stream's prior work, external wait nodes on the event's most recent
record at launch, and the stream's later work on the whole graph; copies captured on the copy
stream stay graph nodes (they are not ordered with the copy stream's other work).

:func:`analyse` checks every read of an offloaded slot (and every read of a slot tag by the
stale-read guard): all writes into that memory are ordered with the read, and the latest write
before it carries the reader's own module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from offload.backend import DeviceBackend


class CaptureError(RuntimeError):
    """A CUDA capture rule was broken (unjoined stream, isolation)."""


@dataclass(eq=False)
class Stream:
    name: str
    last: int | None = None  # last real node
    graph: Graph | None = None  # capture this stream takes part in
    cap_last: int | None = None  # last template node in that capture


@dataclass(eq=False)
class Event:
    external: bool
    node: int | None = None  # last real record
    graph: Graph | None = None  # capture of the last (template) record, non-external events
    tnode: int | None = None


@dataclass
class TNode:
    kind: str
    info: tuple
    preds: list[int]
    wait_ext: Event | None = None
    record_ext: Event | None = None


@dataclass(eq=False)
class Graph:
    origin: Stream
    nodes: list[TNode] = field(default_factory=list)
    anc: list[int] = field(default_factory=list)
    streams: set = field(default_factory=set)
    open: bool = True


class HbBackend(DeviceBackend):
    """Happens-before recording backend (module docstring)."""

    name = "hb"
    asynchronous = True

    def __init__(self, external: bool = True) -> None:
        self.external = external
        self.compute = Stream("compute")
        self.cur = self.compute
        self.kinds: list[str] = []
        self.infos: list[tuple] = []
        self.anc: list[int] = []  # bit set of ancestors per real node
        self.streams: list[Stream] = []

    # ------------------------------------------------------------ resources
    def new_stream(self) -> Stream:
        s = Stream(f"copy{len(self.streams)}")
        self.streams.append(s)
        return s

    def new_event(self, external: bool = False) -> Event:
        assert self.external or not external
        return Event(external)

    def supports_external_events(self) -> bool:
        return self.external

    def current_stream(self) -> Stream:
        return self.cur

    @contextlib.contextmanager
    def stream(self, stream: Stream) -> Iterator[None]:
        prev, self.cur = self.cur, stream
        try:
            yield
        finally:
            self.cur = prev

    def is_capturing(self) -> bool:
        return self.cur.graph is not None

    # ---------------------------------------------------------------- nodes
    def _real(self, stream: Stream, kind: str, info: tuple, extra: list[int | None] = ()) -> int:  # type: ignore[assignment]
        nid = len(self.kinds)
        bits = 0
        for p in [stream.last, *extra]:
            if p is not None:
                bits |= self.anc[p] | (1 << p)
        self.kinds.append(kind)
        self.infos.append(info)
        self.anc.append(bits)
        stream.last = nid
        return nid

    def _template(self, stream: Stream, kind: str, info: tuple, extra: list[int | None] = (),  # type: ignore[assignment]
                  **kw: Any) -> int:
        g = stream.graph
        assert g is not None
        preds = [p for p in [stream.cap_last, *extra] if p is not None]
        tid = len(g.nodes)
        g.nodes.append(TNode(kind, info, preds, **kw))
        bits = 0
        for p in preds:
            bits |= g.anc[p] | (1 << p)
        g.anc.append(bits)
        stream.cap_last = tid
        return tid

    def _emit(self, kind: str, info: tuple, **kw: Any) -> None:
        s = self.cur
        if s.graph is not None:
            self._template(s, kind, info, **kw)
        else:
            self._real(s, kind, info)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        n = dst.numel() * dst.element_size()
        self._emit("write", (dst.data_ptr(), dst.data_ptr() + n, src.data_ptr()))

    def read(self, t: torch.Tensor, expected: Any) -> None:
        """A kernel on the current stream reads ``t`` and needs ``expected`` there."""
        self._emit("read", (t.data_ptr(), expected))

    def count_mismatch(self, counter: torch.Tensor, tag: torch.Tensor, expected: int) -> None:
        self._emit("read", (tag.data_ptr(), ("tag", expected)))

    # --------------------------------------------------------------- events
    def record(self, event: Event, stream: Stream) -> None:
        if stream.graph is not None:
            if event.external:
                self._template(stream, "record", (), record_ext=event)
            else:
                event.graph, event.tnode = stream.graph, stream.cap_last
        else:
            event.node, event.graph, event.tnode = stream.last, None, None

    def wait_event(self, stream: Stream, event: Event) -> None:
        g = stream.graph
        if event.graph is not None:  # last record inside a capture (non-external)
            if not event.graph.open:
                raise CaptureError("waiting on an event recorded inside a finished capture")
            if g is None:  # the stream joins the capture
                g = stream.graph = event.graph
                g.streams.add(stream)
                stream.cap_last = None
            elif g is not event.graph:
                raise CaptureError("waiting on an event of another capture")
            self._template(stream, "wait", (), extra=[event.tnode])
            return
        if g is not None:
            if not event.external:
                if event.node is not None:
                    raise CaptureError("capture waits on a non-external event recorded outside it (isolation)")
                return
            self._template(stream, "wait", (), wait_ext=event)
            return
        self._real(stream, "wait", (), extra=[event.node])

    def wait_stream(self, stream: Stream, other: Stream) -> None:
        if stream.graph is not None or other.graph is not None:
            if stream.graph is not other.graph:
                raise CaptureError("wait_stream across a capture boundary (isolation)")
            self._template(stream, "wait", (), extra=[other.cap_last])
            return
        self._real(stream, "wait", (), extra=[other.last])

    def synchronize(self, stream: Stream) -> None:
        return None

    # --------------------------------------------------------------- graphs
    def capture(self, fn: Callable[[], Any]) -> tuple[Graph, Any]:
        """Capture ``fn()`` on the current stream; enforce that every joined stream rejoined."""
        s = self.cur
        g = Graph(origin=s)
        s.graph, s.cap_last = g, None
        g.streams.add(s)
        try:
            out = fn()
        finally:
            g.open = False
            for t in g.streams:
                t.graph = None
        end = s.cap_last
        for t in g.streams:
            if t is not s and t.cap_last is not None and (end is None or not (g.anc[end] >> t.cap_last) & 1):
                raise CaptureError(f"stream {t.name} not joined back into the capture (StreamCaptureUnjoined)")
            t.cap_last = None
        return g, out

    def replay(self, g: Graph) -> None:
        """Launch ``g`` on the current stream (no Python of the captured code runs)."""
        s = self.cur
        launch = self._real(s, "launch", ())
        real: list[int] = []
        for t in g.nodes:
            extra: list[int | None] = [real[p] for p in t.preds] or [launch]
            if t.wait_ext is not None:
                extra.append(t.wait_ext.node)
            tmp = Stream("graph")
            real.append(self._real(tmp, t.kind, t.info, extra=extra))
            if t.record_ext is not None:
                t.record_ext.node, t.record_ext.graph = real[-1], None
        self._real(s, "graph_end", (), extra=[launch, *real])


class HbLayer(torch.nn.Module):
    """A layer that reads its weights through the backend (one read node per parameter)."""

    def __init__(self, index: int, backend: HbBackend, width: int = 8) -> None:
        super().__init__()
        self.index = index
        self.backend = backend
        self.weight = torch.nn.Parameter(torch.full((width,), float(index + 1)), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.full((3,), float(-(index + 1))), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.backend.read(self.weight, ("layer", self.index))
        self.backend.read(self.bias, ("layer", self.index))
        return x + 1


@dataclass
class Report:
    reads: int = 0
    wrong: list = field(default_factory=list)  # (node, expected, got)
    races: list = field(default_factory=list)  # (read node, write node)
    stale_tags: int = 0  # tag reads that saw another module: what the device counter counts
    writes_per_range: dict = field(default_factory=dict)


def _writes_by_range(writes: list[tuple[int, int, int, int]]) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """``(write node, dst start, dst end, src)`` grouped by destination range: ``(start, end) -> [(node, start, src)]``."""
    by_range: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for wn, d0, d1, s0 in writes:
        by_range.setdefault((d0, d1), []).append((wn, d0, s0))
    return by_range


def _writes_to(by_range: dict[tuple[int, int], list[tuple[int, int, int]]], addr: int) -> list[tuple[int, int, int]]:
    """The writes whose destination holds ``addr``, in write order."""
    hits = [ws for (d0, d1), ws in by_range.items() if d0 <= addr < d1]
    return hits[0] if len(hits) == 1 else sorted(x for ws in hits for x in ws)


def _latest(prior: list[tuple[int, int, int]], anc: Any) -> list[tuple[int, int, int]]:
    """The writes of ``prior`` (``(write node, ...)``) that happen before no other write of ``prior``: a write is
    dropped when its bit is in another one's ancestor mask ``anc[node]`` (prefix and suffix unions of the masks:
    linear in ``len(prior)``, not quadratic)."""
    masks = [anc[x[0]] for x in prior]
    suffix = [0] * (len(masks) + 1)
    for i in range(len(masks) - 1, -1, -1):
        suffix[i] = suffix[i + 1] | masks[i]
    latest, before = [], 0
    for i, x in enumerate(prior):
        if not ((before | suffix[i + 1]) >> x[0]) & 1:
            latest.append(x)
        before |= masks[i]
    return latest


def analyse(b: HbBackend, off: Any) -> Report:
    """Check every slot / tag read of ``off``'s modules against the happens-before relation."""
    host: list[tuple[int, int, int]] = []  # (start, end, module index) of the packed host copies
    for w in off.wrapped:
        start = w.host_flat.data_ptr()
        host.append((start, start + w.host_flat.numel() * w.host_flat.element_size(), w.index))
    layer_of = {w.layer: w.index for w in off.wrapped}
    p = off.protocol
    ids = getattr(p, "ids", None)
    writes = [(n, *b.infos[n]) for n, k in enumerate(b.kinds) if k == "write"]
    rep = Report()
    for d0, d1, _ in [(wi[1], wi[2], 0) for wi in writes]:
        rep.writes_per_range[(d0, d1)] = rep.writes_per_range.get((d0, d1), 0) + 1

    def content(src: int) -> Any:
        if ids is not None and ids.data_ptr() <= src < ids.data_ptr() + 8 * ids.numel():
            return ("tag", (src - ids.data_ptr()) // 8)
        for h0, h1, m in host:
            if h0 <= src < h1:
                return ("module", m, src - h0)
        return ("other", src)

    by_range = _writes_by_range(writes)
    for n, k in enumerate(b.kinds):
        if k != "read":
            continue
        addr, expected = b.infos[n]
        before = _writes_to(by_range, addr)
        if not before:
            continue  # a resident layer's own weights
        rep.reads += 1
        prior = []
        for wn, d0, s0 in before:
            if (b.anc[n] >> wn) & 1:
                prior.append((wn, d0, s0))
            elif not (b.anc[wn] >> n) & 1:
                rep.races.append((n, wn))
        if not prior:
            rep.wrong.append((n, expected, None))
            continue
        latest = _latest(prior, b.anc)
        if len(latest) != 1:
            rep.races.append((n, tuple(x[0] for x in latest)))
            continue
        wn, d0, s0 = latest[0]
        got = content(s0 + (addr - d0))
        if expected[0] == "tag":
            if got != expected:
                rep.stale_tags += 1
            continue
        want = layer_of[expected[1]]
        if got[0] != "module" or got[1] != want:
            rep.wrong.append((n, want, got))
    return rep
