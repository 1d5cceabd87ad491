"""The "current" prefetch offloader and the synchronous reference offloader.

What is modelled (the contract of vLLM's ``PrefetchOffloader``, vLLM 0.32
``vllm/model_executor/offloader/prefetch.py``, and vLLM-Ascend's NPU port):

* ``wrap_modules`` sees the decoder layers one by one while ``make_layers`` creates them;
  layer ``i`` is selected by :func:`offload.selection.is_layer_selected`; of a selected
  layer, the parameters matching ``offload_params`` (segment match,
  :mod:`offload.matching`) move at once to host storage (``torch.empty_strided`` with the
  parameter's shape/stride/dtype, pinned when the platform supports it), so device memory
  is never held for them during loading. A selected layer with no matching parameter is
  not wrapped (evidence reports selected and wrapped separately).
* ``post_init`` (after ``process_weights_after_loading``) re-reads every parameter (it may
  have been replaced, moved, re-laid-out or deleted), packs each module's host storage into
  one pinned buffer, allocates the static device buffers and points every parameter at
  its slot, then starts the first ``K`` loads. Host copies no longer used are released
  (``pinned_host_bytes`` is what stays: the packed buffers).
* Static buffers (:mod:`offload.arena`): one device arena per slot, ``K = min(prefetch_step, M)``
  slots for ``M`` wrapped modules, each key at a fixed :data:`ALIGN_BYTES` (512) aligned offset; a
  module's parameters are views into its slot's arena, moved by one copy per contiguous run of keys.
* Forward: before wrapped module ``i`` runs, the compute stream waits until ``i`` is in its slot;
  after it ran, the copy stream refills ``i``'s slot with its next user (:mod:`offload.ring`) once
  ``i``'s kernels are queued. A slot serving only ``i`` is never refilled (loaded once). Event
  protocol (``copy_protocol``: ``auto`` picks the first available): the crossing protocol
  (:mod:`offload.crossing`: refills whose consumer is in the next step are issued by the host in
  ``sync_prev_onload`` before each replay, behind external events) or the captured join
  (:mod:`offload.copy_protocol`, upstream's: every refill captured and joined inside the graph);
  evidence records which ran (``copy_protocol``). Both hooks
  always go through the custom ops of :mod:`offload.ops` (vLLM's ``wait_prefetch``/``start_prefetch``
  contract), so ``torch.compile`` keeps them opaque and ordered; a layer without a tensor activation
  passes a per-offloader token tensor instead (never a direct, traceable call).
* If a module is about to run while its slot holds another module (out-of-order execution,
  e.g. a partial pass), it is loaded synchronously instead of silently reading stale weights
  (counted in ``fallback_loads``).
* In-place mode (``in_place``, CPU only, set between rounds by :mod:`offload.inprocess`): the wait / refill ops
  return without a copy (counted in ``in_place_skips``) while the parameters are views into the host buffer.
* ``shutdown()`` joins the copy stream. Garbage collection never synchronizes (it may run
  during another engine's graph capture): the arenas are marked used by the copy stream
  (``record_stream``), so the caching allocator reuses their memory only after the copies.
* Weight formats: plain (ND) strided tensors only; an Ascend ``FRACTAL_NZ`` parameter is refused
  with :class:`UnsupportedWeightFormat` naming it (:mod:`offload.host_storage`).

The :class:`SyncOffloader` reference uses the same host storage and one static slot, with no
side stream and no prefetch: onload on the compute stream right before the module runs,
slot released in ``finally``.

Not modelled: offloading NZ (Ascend fractal) storage formats (refused, see above), pipeline-parallel layer offsets (layer
indices are positions in the ``wrap_modules`` call, as upstream), multimodal towers
(``supports_tower_offload`` is False, as upstream's prefetch offloader).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Hashable, Iterable
from typing import Any

import torch
import torch.nn as nn

from offload import ops, ring
from offload.arena import ParamKey, StaticBufferPool, pack_host
from offload.backend import DeviceBackend, backend_for_device
from offload.base import BaseOffloader
from offload.copy_protocol import CapturedJoin
from offload.crossing import Crossing
from offload.evidence_state import EvidenceMixin
from offload.host_storage import Wrapped, activation, move_to_host
from offload.host_storage import resolve, resync
from offload.matching import select_param_names
from offload.selection import is_layer_selected, select_offload_layers, validate_offload_params

__all__ = ["CurrentPrefetchOffloader", "SyncOffloader"]

logger = logging.getLogger("offload")

COPY_PROTOCOLS = ("auto", "crossing", "captured_join")
"""Values of ``copy_protocol`` (see :class:`CurrentPrefetchOffloader`)."""


class CurrentPrefetchOffloader(EvidenceMixin, BaseOffloader):
    """This project's prefetch offloader (implementation ``current``).

    Args:
        group_size: G (``offload_group_size``), > 0.
        num_in_group: N (``offload_num_in_group``), 1..G.
        prefetch_step: modules loaded ahead = slots per key (``offload_prefetch_step``), >= 1.
        offload_params: dotted-name segments; empty = all parameters of a selected layer.
        backend_factory: device -> :class:`DeviceBackend`; default
            :func:`offload.backend.backend_for_device` (tests inject a fake).
        copy_protocol: ``auto`` (crossing where the backend has external events, else the captured
            join), ``crossing`` (same fallback; the evidence says what ran) or ``captured_join``.

    Raises:
        ValueError: invalid G/N/prefetch_step or copy_protocol (message names the values).
    """

    supports_tower_offload = False
    implementation = "current"

    def __init__(
        self,
        group_size: int,
        num_in_group: int,
        prefetch_step: int = 1,
        offload_params: Iterable[str] | None = None,
        *,
        backend_factory: Callable[[torch.device], DeviceBackend] | None = None,
        copy_protocol: str = "auto",
    ) -> None:
        validate_offload_params(group_size, num_in_group, prefetch_step, "prefetch")
        if copy_protocol not in COPY_PROTOCOLS:
            raise ValueError(f"copy_protocol ({copy_protocol!r}) must be one of {', '.join(COPY_PROTOCOLS)}")
        self.copy_protocol = copy_protocol
        self.protocol: CapturedJoin | Crossing | None = None
        if group_size < 1 or num_in_group < 1:
            raise ValueError(
                f"{type(self).__name__} needs offload_group_size ({group_size}) >= 1 and "
                f"offload_num_in_group ({num_in_group}) >= 1"
            )
        self.group_size = group_size
        self.num_in_group = num_in_group
        self.prefetch_step = prefetch_step
        self.offload_params = tuple(sorted(set(offload_params or ())))
        self._backend_factory = backend_factory
        self.backend: DeviceBackend | None = None
        self.copy_stream: Any = None
        self.num_layers = 0
        self.selected_layers: tuple[int, ...] = ()
        self.wrapped: list[Wrapped] = []
        self.buffer_pool: StaticBufferPool | None = None
        self.post_init_called = False
        self.device_type = ""
        self.fallback_loads = 0
        self.copies_issued = 0
        self.in_place = False  # offload.inprocess: copies off, parameters read from the host buffer (CPU only)
        self.in_place_skips = 0
        self._use_ops = True
        self._op_id = ops.register(self)
        self._token = torch.empty(0)  # placeholder: post_init sets it before installing the hooks
        self._wrap_called = False
        self.released_host_bytes = 0
        self.weight_format = "ND"

    # ------------------------------------------------------------------ wrap
    def wrap_modules(
        self,
        modules_generator: Generator[nn.Module, None, None] | Iterable[nn.Module],
        prefix: str = "",
    ) -> list[nn.Module]:
        """Select layers, move their matching parameters to host storage, return all modules.

        Raises:
            RuntimeError: called again after a call that wrapped modules (a prefetch ring
                spans one decoder stack); a call that wrapped nothing may be followed by
                another, as upstream's ``assert len(self.module_offloaders) == 0`` allows.
        """
        if self.wrapped:
            raise RuntimeError(
                f"{type(self).__name__}.wrap_modules may only be called once with modules to offload "
                f"(the first call wrapped layers {[w.layer for w in self.wrapped]})"
            )
        if self.post_init_called:
            raise RuntimeError(f"{type(self).__name__}.wrap_modules called after post_init")
        self._wrap_called = True
        all_modules: list[nn.Module] = []
        selected: list[int] = []
        for i, module in enumerate(modules_generator):
            all_modules.append(module)
            if not is_layer_selected(i, self.group_size, self.num_in_group):
                continue
            selected.append(i)
            names = select_param_names(
                [n for n, _ in module.named_parameters()], self.offload_params, prefix
            )
            if not names:
                continue
            first = resolve(module, names[0])
            self.wrapped.append(Wrapped(layer=i, module=module, device=first.device, param_names=names))
            self._offload_to_host(self.wrapped[-1])
        self.num_layers = len(all_modules)
        self.selected_layers = tuple(selected)
        assert self.selected_layers == select_offload_layers(self.num_layers, self.group_size, self.num_in_group)
        return all_modules

    def _offload_to_host(self, w: Wrapped) -> None:
        """Move ``w``'s parameters to host storage now (frees device memory during loading)."""
        if self.backend is None:
            factory = self._backend_factory or backend_for_device
            self.backend = factory(w.device)
            self.device_type = w.device.type
        move_to_host(w, self.backend.pin_memory())

    # ------------------------------------------------------------- post_init
    def _num_slots(self) -> int:
        return ring.num_slots(len(self.wrapped), self.prefetch_step)

    def post_init(self) -> None:
        """Re-sync host storage after weight processing, build buffers, point params at slots."""
        if self.post_init_called:
            return
        self.post_init_called = True
        self._resync_host_storage()
        m = len(self.wrapped)
        if m == 0:
            self._log_state()
            return
        assert self.backend is not None
        k = self._num_slots()
        keys: list[ParamKey] = []
        for w in self.wrapped:
            keys.extend(w.keys[n] for n in w.param_names)
        self.buffer_pool = StaticBufferPool(keys, k, self.wrapped[0].device)
        self._token = torch.zeros(1, device=self.wrapped[0].device)
        if self.backend.asynchronous:
            self.copy_stream = self.backend.new_stream()
            for arena in self.buffer_pool.arenas:
                # frees of the arenas wait for the copy stream's queued work (no GC-time sync)
                self.backend.record_stream(arena, self.copy_stream)
        for idx, w in enumerate(self.wrapped):
            w.index = idx
            w.slot, w.next_index = self._ring_position(idx, m)
            self._pack(w)
            w.done_event = self.backend.new_event()
            w.fork_event = self.backend.new_event()
        self.protocol = self._make_protocol(k)
        for w in self.wrapped:
            self._hook(w)
        self._initial_loads()
        self.backend.release_host_cache()
        self._log_state()

    def _ring_position(self, idx: int, m: int) -> tuple[int, int]:
        """``(slot, next refill)`` of wrapped module ``idx`` of ``m`` (:mod:`offload.ring`)."""
        return ring.slot_of(idx, m, self.prefetch_step), ring.next_refill(idx, m, self.prefetch_step)

    def _make_protocol(self, k: int) -> CapturedJoin | Crossing:
        assert self.backend is not None
        if self.copy_protocol != "captured_join" and self.backend.asynchronous \
                and self.backend.supports_external_events():
            return Crossing(self.backend, self.copy_stream, self.wrapped, k, self.wrapped[0].device)
        return CapturedJoin(self.backend, self.copy_stream, self.wrapped, k)

    @property
    def _slot_owner(self) -> list[int | None]:
        """Module whose copy into each slot was issued last (host view)."""
        return self.protocol.owner if self.protocol is not None else []

    def _initial_loads(self) -> None:
        assert self.protocol is not None
        for j in ring.initial_loads(len(self.wrapped), self.prefetch_step):
            self.protocol.load(j)
            self.copies_issued += 1

    def _resync_host_storage(self) -> None:
        """Re-read parameters after ``process_weights_after_loading``; prune deleted ones."""
        for w in self.wrapped:
            resync(w)
        self.wrapped = [w for w in self.wrapped if w.param_names]

    def _pack(self, w: Wrapped) -> None:
        """Pack ``w``'s host storage in arena layout; point its params at its slot's buffers."""
        assert self.buffer_pool is not None and self.backend is not None
        packed = pack_host(self.buffer_pool, w.slot, w.keys, {n: w.host[n] for n in w.param_names},
                           self.backend.pin_memory())
        for name in w.param_names:
            resolve(w.module, name).data = self.buffer_pool.view(w.slot, w.keys[name])
        old = w.host
        w.host = packed.host
        w.host_flat = packed.flat
        flat_ptr = packed.flat.untyped_storage().data_ptr()
        for t in old.values():  # wrap-time / re-pinned copies: drop our references
            if t.untyped_storage().data_ptr() != flat_ptr:
                self.released_host_bytes += t.numel() * t.element_size()
        del old
        w.runs = packed.runs

    def _hook(self, w: Wrapped) -> None:
        """Install the forward wrapper: wait before, refill after (upstream's protocol)."""
        original = w.module.forward
        off = self

        def forward(*args: Any, **kwargs: Any) -> Any:
            off._before(w, activation(args, kwargs))
            try:
                out = original(*args, **kwargs)
            finally:
                off._release(w)
            off._after(w, out[0] if isinstance(out, tuple) else out)
            return out

        w.module.forward = forward

    # --------------------------------------------------------------- runtime
    def _before(self, w: Wrapped, t: torch.Tensor | None) -> None:
        # an activation-less layer passes the token: still an opaque op, never a traced call
        ops.wait_prefetch(t if t is not None else self._token, self._op_id, w.index)

    def _after(self, w: Wrapped, out: Any) -> None:
        if w.next_index == w.index:
            return  # the slot serves only this module: nothing to copy, ever
        ops.start_prefetch(out if isinstance(out, torch.Tensor) else self._token, self._op_id, w.next_index)

    def _release(self, w: Wrapped) -> None:
        """Called in ``finally`` after the module ran (the sync reference frees its slot here)."""

    def _wait_for_layer(self, layer_idx: int) -> None:
        """Make the compute stream wait until module ``layer_idx``'s weights are in its slot."""
        if self.in_place:  # offload.inprocess mode A: the parameters are the host buffer, nothing to load
            self.in_place_skips += 1
            return
        w = self.wrapped[layer_idx]
        p = self.protocol
        assert p is not None
        if p.owner[w.slot] != layer_idx and not p.owes(layer_idx):  # slot holds another module: load now
            self.fallback_loads += 1
            p.load(layer_idx)
            self.copies_issued += 1
        p.wait(layer_idx)

    def _start_prefetch(self, layer_idx: int) -> None:
        """Refill module ``layer_idx``'s slot now that the slot's previous user ran (the protocol's rule)."""
        if self.in_place:  # offload.inprocess mode A: no copy
            self.in_place_skips += 1
            return
        assert self.protocol is not None
        self.protocol.refill(layer_idx)
        self.copies_issued += 1

    def sync_prev_onload(self) -> None:
        """Before graph capture / replay: the protocol's sync (captured join: wait for the copy stream;
        crossing: issue the owed refills)."""
        if self.protocol is not None and self.copy_stream is not None:
            self.protocol.sync_prev_onload()

    def expect_graph(self, key: Hashable) -> None:
        """The next ``sync_prev_onload`` precedes the capture or replay of graph ``key`` (a graph wrapper's hint)."""
        if self.protocol is not None:
            self.protocol.expect_graph(key)

    def join_after_forward(self) -> None:
        """Join copies started during a graph capture but not yet waited on."""
        if self.protocol is not None and self.copy_stream is not None:
            self.protocol.join_after_forward()

    @property
    def stale_reads(self) -> int:
        """Consumers that ran on another module's bytes, counted on the device (crossing protocol; syncs)."""
        return self.protocol.stale_reads if self.protocol is not None else 0

    def shutdown(self) -> None:
        """Block until the copy stream has drained (teardown); idempotent."""
        if self.backend is not None and self.copy_stream is not None:
            self.backend.synchronize(self.copy_stream)



class SyncOffloader(CurrentPrefetchOffloader):
    """Synchronous reference (implementation ``sync``): onload right before forward, no overlap.

    One static slot, no side stream: the copy is queued on the compute stream immediately
    before the module, the slot is released in ``finally``. ``prefetch_step`` is recorded
    for evidence but not used.
    """

    implementation = "sync"

    def _num_slots(self) -> int:
        return 1 if self.wrapped else 0

    def _pack(self, w: Wrapped) -> None:
        w.slot = 0
        super()._pack(w)

    def _initial_loads(self) -> None:
        return None

    def _make_protocol(self, k: int) -> CapturedJoin | Crossing:
        p = CapturedJoin(self.backend or DeviceBackend(), self.copy_stream, self.wrapped, k)
        p.name = "compute_stream" if p.b.asynchronous else "synchronous"
        return p

    def _after(self, w: Wrapped, out: Any) -> None:
        return None

    def _release(self, w: Wrapped) -> None:
        if self._slot_owner:
            self._slot_owner[0] = None

    def _wait_for_layer(self, layer_idx: int) -> None:
        if self.in_place:  # offload.inprocess mode A: the parameters are the host buffer, nothing to load
            self.in_place_skips += 1
            return
        w = self.wrapped[layer_idx]
        b = self.backend
        assert b is not None
        for dst, src in w.runs:  # on the compute stream: the layer's kernels queue after it
            b.copy(dst, src)
        self._slot_owner[0] = layer_idx
        self.copies_issued += 1

    def _start_prefetch(self, layer_idx: int) -> None:
        return None

    def sync_prev_onload(self) -> None:
        return None

    def join_after_forward(self) -> None:
        return None

