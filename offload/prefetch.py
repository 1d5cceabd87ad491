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
* Forward: before wrapped module ``i`` runs, the compute stream waits on ``i``'s copy-done
  event; after it ran, the copy stream refills ``i``'s slot with its next user (:mod:`offload.ring`)
  once ``i``'s kernels are queued (:mod:`offload.copy_protocol`, also for CUDA/ACL graph capture:
  ``sync_prev_onload`` before capture and replay, ``join_after_forward`` inside capture). Both hooks
  always go through the custom ops of :mod:`offload.ops` (vLLM's ``wait_prefetch``/``start_prefetch``
  contract), so ``torch.compile`` keeps them opaque and ordered; a layer without a tensor activation
  passes a per-offloader token tensor instead (never a direct, traceable call).
* If a module is about to run while its slot holds another module (out-of-order execution,
  e.g. a partial pass), it is loaded synchronously instead of silently reading stale weights
  (counted in ``fallback_loads``).
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

import json
import logging
import sys
from collections.abc import Callable, Generator, Iterable
from typing import Any

import torch
import torch.nn as nn

from offload import ops, ring
from offload.arena import ALIGN_BYTES, ParamKey, StaticBufferPool, pack_host
from offload.backend import DeviceBackend, backend_for_device
from offload.base import BaseOffloader
from offload.copy_protocol import issue_copy, wait_copy
from offload.host_storage import ACL_FORMAT_ND, UnsupportedWeightFormat, Wrapped, activation, move_to_host
from offload.host_storage import resolve, resync
from offload.matching import select_param_names
from offload.selection import is_layer_selected, select_offload_layers, validate_offload_params

__all__ = ["ACL_FORMAT_ND", "ALIGN_BYTES", "CurrentPrefetchOffloader", "ParamKey", "StaticBufferPool", "SyncOffloader",
           "UnsupportedWeightFormat"]

logger = logging.getLogger("offload")


class CurrentPrefetchOffloader(BaseOffloader):
    """This project's prefetch offloader (implementation ``current``).

    Args:
        group_size: G (``offload_group_size``), > 0.
        num_in_group: N (``offload_num_in_group``), 1..G.
        prefetch_step: modules loaded ahead = slots per key (``offload_prefetch_step``), >= 1.
        offload_params: dotted-name segments; empty = all parameters of a selected layer.
        backend_factory: device -> :class:`DeviceBackend`; default
            :func:`offload.backend.backend_for_device` (tests inject a fake).

    Raises:
        ValueError: invalid G/N/prefetch_step (message names the values).
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
    ) -> None:
        validate_offload_params(group_size, num_in_group, prefetch_step, "prefetch")
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
        self._slot_owner: list[int | None] = []
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
            w.slot = ring.slot_of(idx, m, self.prefetch_step) if k else 0
            w.next_index = ring.next_refill(idx, m, self.prefetch_step)
            self._pack(w)
            w.done_event = self.backend.new_event()
            w.fork_event = self.backend.new_event()
        self._slot_owner = [None] * k
        for w in self.wrapped:
            self._hook(w)
        self._initial_loads()
        self.backend.release_host_cache()
        self._log_state()

    def _initial_loads(self) -> None:
        for j in ring.initial_loads(len(self.wrapped), self.prefetch_step):
            self._start_prefetch(j)

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
        ops.start_prefetch(out if isinstance(out, torch.Tensor) else self._token, self._op_id, w.next_index)

    def _release(self, w: Wrapped) -> None:
        """Called in ``finally`` after the module ran (the sync reference frees its slot here)."""

    def _wait_for_layer(self, layer_idx: int) -> None:
        """Make the compute stream wait until module ``layer_idx``'s weights are in its slot."""
        w = self.wrapped[layer_idx]
        assert self.backend is not None
        if self._slot_owner[w.slot] != layer_idx:  # slot holds another module: load now
            self.fallback_loads += 1
            self._start_prefetch(layer_idx)
        wait_copy(self.backend, self.copy_stream, w)

    def _start_prefetch(self, layer_idx: int) -> None:
        """Copy module ``layer_idx`` into its slot on the copy stream, after queued compute."""
        w = self.wrapped[layer_idx]
        assert self.backend is not None
        issue_copy(self.backend, self.copy_stream, w)
        self._slot_owner[w.slot] = layer_idx
        self.copies_issued += 1

    def sync_prev_onload(self) -> None:
        """Compute stream waits for every queued copy (before graph capture/replay)."""
        if self.backend is not None and self.copy_stream is not None:
            self.backend.wait_stream(self.backend.current_stream(), self.copy_stream)

    def join_after_forward(self) -> None:
        """Join copies started during a graph capture but not yet waited on."""
        if self.backend is None:
            return
        for w in self.wrapped:
            if w.in_capture:
                self.backend.wait_event(self.backend.current_stream(), w.done_event)
                w.in_capture = False

    def shutdown(self) -> None:
        """Block until the copy stream has drained (teardown); idempotent."""
        if self.backend is not None and self.copy_stream is not None:
            self.backend.synchronize(self.copy_stream)

    @property
    def pinned_host_bytes(self) -> int:
        """Host bytes this offloader still holds: the packed buffers (pinned where supported)."""
        return sum(w.host_flat.numel() for w in self.wrapped if w.host_flat is not None)

    # --------------------------------------------------------------- evidence
    def evidence_state(self) -> dict[str, Any]:
        """RuntimeEvidence fields minus ``schema_version``, ``implementation``, ``pid``."""
        cls = type(self)
        offloaded = sum(w.offloaded_bytes for w in self.wrapped)
        static = self.buffer_pool.total_bytes if self.buffer_pool is not None else 0
        wrapped_layers = tuple(w.layer for w in self.wrapped)
        return {
            "offloader_class": f"{cls.__module__}.{cls.__qualname__}",
            "offload_group_size": self.group_size,
            "offload_num_in_group": self.num_in_group,
            "offload_prefetch_step": self.prefetch_step,
            "offload_params": self.offload_params,
            "num_layers": self.num_layers,
            "selected_layers": self.selected_layers,
            "wrapped_layers": wrapped_layers,
            "wrapped_count": len(wrapped_layers),
            "offloaded_bytes": offloaded,
            "static_buffer_bytes": static,
            "released_bytes": offloaded - static,
            "post_init_called": self.post_init_called,
            "device": self.device_type or "cpu",
        }

    def _log_state(self) -> None:
        state = dict(self.evidence_state())
        state["slots"] = len(self._slot_owner)
        state["backend"] = self.backend.name if self.backend is not None else None
        state["custom_ops"] = self._use_ops
        state["pinned_host_bytes"] = self.pinned_host_bytes
        state["released_host_bytes"] = self.released_host_bytes
        state["weight_format"] = self.weight_format
        line = "OFFLOAD_STATE " + json.dumps(state, sort_keys=True)
        if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(line)
        else:
            print(line, file=sys.stderr, flush=True)


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

    def _after(self, w: Wrapped, out: Any) -> None:
        return None

    def _release(self, w: Wrapped) -> None:
        if self._slot_owner:
            self._slot_owner[0] = None

    def _wait_for_layer(self, layer_idx: int) -> None:
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

