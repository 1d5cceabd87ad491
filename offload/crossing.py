"""The crossing protocol: refills whose consumer is in the next step cross the step boundary.

Slots and refills follow :mod:`offload.ring` (``K`` slots, module ``i`` in slot ``i % K``).
A refill of module ``j`` after module ``i`` ran is

* **in-step** when ``j > i`` (its consumer runs later in the same pass): issued as in the captured
  join (:mod:`offload.copy_protocol`: fork event, copy, done event; captured in a graph and waited
  on inside it, or joined by ``join_after_forward`` at the end of a piece);
* **crossing** when ``j < i`` (``j`` is the first user of the slot, in the next pass): never
  captured. The slot's last reader records the slot's external *free* event on the compute
  stream (inside a capture: a record node); the consumer waits on module ``j``'s external
  *ready* event (inside a capture: a wait node). Outside a graph (eager) the refill is issued
  inline: copy stream waits on *free*, copies, records *ready*. Under graphs the refill is
  *owed*: ``sync_prev_onload`` (which vLLM's ``CUDAGraphWrapper`` calls before every replay)
  issues it on the copy stream after *free* and records *ready*, so the copy overlaps the next
  step's compute up to its consumer and the graph never waits for it at its end;
* **skipped** when ``j == i``: the slot serves only module ``i``, which is already there
  (loaded once, in ``post_init``).

Host bookkeeping. A replay runs no Python, so after ``sync_prev_onload`` has issued what is
owed the host *arms* the debts the next replay will leave (recorded per graph at capture:
slot -> (last reader, first user)). A graph wrapper may name the graph about to be captured
or replayed (:meth:`Crossing.expect_graph`: vLLM's piecewise pieces each call
``sync_prev_onload``, and only the piece holding a slot's last reader leaves that slot's debt);
without a name every recorded debt is armed (one graph per forward, as FULL graphs and the
torch-only check). Events live as long as the offloader: every graph of every batch size
records and waits on the same ones.

Safety. Every copy into a slot also copies the module's id into a device tag of the slot;
after its wait a crossing consumer adds ``tag != j`` to a device counter (two tiny kernels,
captured in graphs), so a replay whose owed refill was not issued is counted
(:attr:`Crossing.stale_reads`) instead of passing silently on the previous module's weights.

Not modelled: several copy streams; graphs replayed concurrently on several streams.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from offload.backend import DeviceBackend
from offload.copy_protocol import TagRun, issue_copy, wait_copy
from offload.host_storage import Wrapped


class Crossing:
    """Crossing protocol over an offloader's wrapped modules (module docstring).

    Args:
        backend: an asynchronous backend with external events
            (:meth:`offload.backend.DeviceBackend.supports_external_events`).
        copy_stream: the copy side stream.
        wrapped: wrapped modules by index, ``slot`` and ``next_index`` assigned (:mod:`offload.ring`).
        num_slots: ``K``.
        device: where the slot tags and the stale-read counter live.

    Raises:
        ValueError: the backend is synchronous or has no external events.
    """

    name = "crossing"

    def __init__(self, backend: DeviceBackend, copy_stream: Any, wrapped: list[Wrapped], num_slots: int,
                 device: torch.device) -> None:
        if not (backend.asynchronous and backend.supports_external_events()):
            raise ValueError(f"the crossing protocol needs an asynchronous backend with external events "
                             f"(backend {backend.name!r} has none); use the captured join")
        self.b = backend
        self.copy_stream = copy_stream
        self.wrapped = wrapped
        users: list[list[int]] = [[] for _ in range(num_slots)]
        for w in wrapped:
            users[w.slot].append(w.index)
        self.multi = [len(u) > 1 for u in users]
        self.free = [backend.new_event(external=True) if m else None for m in self.multi]
        self.ready = {u[0]: backend.new_event(external=True) for u, m in zip(users, self.multi, strict=True) if m}
        cur = backend.current_stream()
        for e in [*(f for f in self.free if f is not None), *self.ready.values()]:
            backend.record(e, cur)  # torch creates events at their first record; an uncreated one is not waited on
        self.owner: list[int | None] = [None] * num_slots
        self.owed: dict[int, int] = {}  # slot -> module owed to it before its next use
        self.debts: dict[Hashable, dict[int, tuple[int, int]]] = {}  # graph -> slot -> (last reader, first user)
        self.unjoined: set[int] = set()  # non-crossing loads outside graphs not yet waited on
        self._note: Hashable = None
        self._capture_key: Hashable = None
        self.owed_issued = 0
        pin = backend.pin_memory()
        self.ids = torch.arange(len(wrapped), dtype=torch.int64).pin_memory() if pin else \
            torch.arange(len(wrapped), dtype=torch.int64)
        self.tag = torch.full((num_slots,), -1, dtype=torch.int64, device=device)
        self.stale = torch.zeros((), dtype=torch.int64, device=device)

    # ----------------------------------------------------------------- copies
    def _tag(self, j: int) -> TagRun:
        s = self.wrapped[j].slot
        return self.tag[s:s + 1], self.ids[j:j + 1]

    def load(self, j: int) -> None:
        """Initial or fallback load of module ``j``: fork from the compute stream, done event."""
        w = self.wrapped[j]
        issue_copy(self.b, self.copy_stream, w, self._tag(j))
        self.owner[w.slot] = j
        if not w.in_capture:
            self.unjoined.add(j)
        self.owed.pop(w.slot, None)

    def _issue_crossing(self, s: int, j: int, fork: bool) -> None:
        """Copy module ``j`` into slot ``s`` after the slot's free event; record ``j``'s ready event."""
        b, w = self.b, self.wrapped[j]
        if fork:  # eager: the free event is recorded now, after the last reader's queued kernels
            b.record(self.free[s], b.current_stream())
        b.wait_event(self.copy_stream, self.free[s])
        with b.stream(self.copy_stream):
            for dst, src in w.runs:
                b.copy(dst, src)
            tag_dst, tag_src = self._tag(j)
            b.copy(tag_dst, tag_src)
        b.record(self.ready[j], self.copy_stream)
        self.owner[s] = j
        self.owed.pop(s, None)
        self.unjoined.discard(j)

    def refill(self, j: int) -> None:
        """The refill of module ``j`` right after the last reader of its slot ran (forward hook)."""
        w = self.wrapped[j]
        s = w.slot
        if not self.multi[s]:
            return  # the slot serves only j: its bytes are already there (the offloader skips it too)
        if j not in self.ready:  # in-step: the consumer is later in this pass
            issue_copy(self.b, self.copy_stream, w, self._tag(j))
            self.owner[s] = j
            if not w.in_capture:
                self.unjoined.add(j)
            return
        if not self.b.is_capturing():
            self._issue_crossing(s, j, fork=True)
            return
        last = self.owner[s]
        self.b.record(self.free[s], self.b.current_stream())  # a record node of the graph
        self.owed[s] = j
        self.debts.setdefault(self._capture_key, {})[s] = (j if last is None else last, j)

    # ------------------------------------------------------------------ waits
    def wait(self, j: int) -> None:
        """Compute stream waits until module ``j`` is in its slot (the offloader checked ownership)."""
        w, b = self.wrapped[j], self.b
        s = w.slot
        if j not in self.ready:  # in-step refill or a slot serving one module: the captured join's waits
            self.unjoined.discard(j)
            wait_copy(b, self.copy_stream, w)
            return
        if b.is_capturing():
            if w.in_capture:  # a fallback load inside this capture
                wait_copy(b, self.copy_stream, w)
        elif j in self.unjoined:  # the last load was an initial / fallback load: its done event
            self.unjoined.discard(j)
            wait_copy(b, self.copy_stream, w)
            return
        elif self.owed.get(s) == j:
            self._issue_crossing(s, j, fork=False)  # after a replay, an eager step issues what is owed
        b.wait_event(b.current_stream(), self.ready[j])  # inside a capture: a wait node
        b.count_mismatch(self.stale, self.tag[s:s + 1], j)

    def owes(self, j: int) -> bool:
        """Whether module ``j`` is owed to its slot (its consumer may run: the refill is pending)."""
        return self.owed.get(self.wrapped[j].slot) == j

    # ------------------------------------------------------------ graph hooks
    def expect_graph(self, key: Hashable) -> None:
        """The next ``sync_prev_onload`` precedes the capture or replay of graph ``key``."""
        self._note = key

    def sync_prev_onload(self) -> None:
        """Before a capture or replay: join earlier loads, issue owed refills, arm the graph's debts."""
        b = self.b
        cur = b.current_stream()
        for j in sorted(self.unjoined):
            w = self.wrapped[j]
            if w.event_valid:
                b.wait_event(cur, w.done_event)
            else:
                b.wait_stream(cur, self.copy_stream)
        self.unjoined.clear()
        for s, j in sorted(self.owed.items()):
            self._issue_crossing(s, j, fork=False)
            self.owed_issued += 1
        key, self._note = self._note, None
        self._capture_key = key
        debts = self.debts.get(key, {}) if key is not None else \
            {s: d for graph in self.debts.values() for s, d in graph.items()}
        for s, (last, first) in debts.items():
            self.owner[s] = last
            self.owed[s] = first

    def join_after_forward(self) -> None:
        """Inside a capture: join in-step copies started in it and not yet waited on (piecewise)."""
        for w in self.wrapped:
            if w.in_capture:
                self.b.wait_event(self.b.current_stream(), w.done_event)
                w.in_capture = False

    @property
    def stale_reads(self) -> int:
        """Crossing consumers that ran on another module's bytes (reads the device counter: syncs)."""
        return int(self.stale.item())
