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
* Static buffers: one device arena per slot, ``K = min(prefetch_step, M)`` slots for ``M``
  wrapped modules; inside an arena each key ``(name, shape, stride, dtype)`` has a fixed,
  :data:`ALIGN_BYTES` (512) aligned offset, so modules sharing a slot and a key share the buffer. A module's
  parameters are views into its slot's arena, and one host-to-device copy per contiguous
  run of keys (normally exactly one) moves the whole module.
* Forward: before wrapped module ``i`` runs, the compute stream waits on ``i``'s copy-done
  event; after it ran, a fork event recorded on the compute stream makes the copy stream
  wait until ``i``'s kernels are queued before refilling ``i``'s slot with its next user
  (:mod:`offload.ring`). Both hooks always go through the custom ops of :mod:`offload.ops`
  (same contract as vLLM's ``wait_prefetch``/``start_prefetch``), so ``torch.compile``
  keeps them opaque and ordered (as upstream does); a layer without a tensor activation
  passes a per-offloader token tensor instead (never a direct, traceable call). CUDA/ACL
  graph capture follows upstream's event protocol (``sync_prev_onload`` before capture
  and replay, ``join_after_forward`` inside capture).
* If a module is about to run while its slot holds another module (out-of-order execution,
  e.g. a partial pass), it is loaded synchronously instead of silently reading stale weights
  (counted in ``fallback_loads``).
* ``shutdown()`` joins the copy stream. Garbage collection never synchronizes (it may run
  during another engine's graph capture): the arenas are marked used by the copy stream
  (``record_stream``), so the caching allocator reuses their memory only after the copies.
* Weight formats: plain (ND) strided tensors only. On Ascend, a parameter that weight
  processing cast to ``FRACTAL_NZ`` (``VLLM_ASCEND_ENABLE_NZ``: quantized weights by default,
  bf16/fp16 too when it is 2) is refused with :class:`UnsupportedWeightFormat` naming it.

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
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from offload import ops, ring
from offload.backend import DeviceBackend, backend_for_device
from offload.matching import select_param_names
from offload.selection import is_layer_selected, select_offload_layers, validate_offload_params

logger = logging.getLogger("offload")

ALIGN_BYTES = 512
"""Offset alignment of every key inside a slot arena, in bytes.

The start alignment a separately allocated tensor gets from the caching allocators:
``kMinBlockSize = 512`` in PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` and in
torch-npu's ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (every block size is a
multiple of 512 inside 2 MiB-aligned segments). Official allocates one ``empty_strided``
buffer per parameter, so with 512 every view here starts as aligned as official's buffers
(kernels that pick algorithms by pointer alignment see the same alignment)."""

ACL_FORMAT_ND = 2
"""torch-npu format id of plain (ND) tensors (``vllm_ascend/utils.py``: ``ACL_FORMAT_FRACTAL_ND = 2``)."""


class UnsupportedWeightFormat(ValueError):
    """A parameter to offload is stored in a format the arena cannot hold (e.g. FRACTAL_NZ)."""


def _npu_format(t: torch.Tensor) -> int | None:
    """torch-npu storage format id of a device tensor (``None`` off Ascend)."""
    if t.device.type != "npu":
        return None
    try:
        import torch_npu  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - an npu tensor implies torch_npu
        return None
    return int(torch_npu.get_npu_format(t))

try:  # vLLM present: subclass its BaseOffloader so isinstance checks in vLLM hold.
    from vllm.model_executor.offloader.base import BaseOffloader as _Base
except ImportError:  # pragma: no cover - vLLM is installed wherever models run

    class _Base:  # type: ignore[no-redef]
        """Stand-in for ``vllm.model_executor.offloader.base.BaseOffloader``."""

        supports_tower_offload = False

        def post_init(self) -> None:
            return None

        def sync_prev_onload(self) -> None:
            return None

        def join_after_forward(self) -> None:
            return None


def _align(n: int, a: int = ALIGN_BYTES) -> int:
    return (n + a - 1) // a * a


def _span_elems(shape: Sequence[int], stride: Sequence[int]) -> int:
    """Storage elements a strided tensor spans from its first element (0 if empty)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def _resolve(module: nn.Module, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _owner_and_leaf(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    parent, _, leaf = dotted.rpartition(".")
    return (_resolve(module, parent) if parent else module), leaf


def _activation(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The layer's activation input: ``hidden_states`` or the first floating-point tensor.

    The wait op declares this tensor mutated, so under ``torch.compile`` every op of the layer
    (its first op consumes the activation) is ordered after the wait. ``positions`` (the
    first argument of vLLM decoder layers) would not order the weight reads.
    """
    hs = kwargs.get("hidden_states")
    if isinstance(hs, torch.Tensor):
        return hs
    fallback = None
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                return v
            fallback = fallback if fallback is not None else v
    return fallback


@dataclass(frozen=True)
class ParamKey:
    """Buffer-pool key: parameters with equal keys in different modules share a slot buffer."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @property
    def span_bytes(self) -> int:
        return _span_elems(self.shape, self.stride) * torch.empty((), dtype=self.dtype).element_size()

    @property
    def num_bytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * torch.empty((), dtype=self.dtype).element_size()


def _view(flat: torch.Tensor, offset: int, key: ParamKey) -> torch.Tensor:
    """A tensor with ``key``'s shape/stride/dtype over ``flat`` (uint8) bytes at ``offset``."""
    nbytes = key.span_bytes
    if nbytes == 0:
        return torch.empty_strided(key.shape, key.stride, dtype=key.dtype, device=flat.device)
    return flat[offset : offset + nbytes].view(key.dtype).as_strided(key.shape, key.stride)


class StaticBufferPool:
    """``num_slots`` device arenas; every key has the same aligned offset in each arena.

    Args:
        keys: unique keys in first-seen order.
        num_slots: K (``min(prefetch_step, M)``).
        device: device of the arenas.
    """

    def __init__(self, keys: Iterable[ParamKey], num_slots: int, device: torch.device) -> None:
        self.offsets: dict[ParamKey, int] = {}
        size = 0
        for key in keys:
            if key in self.offsets:
                continue
            self.offsets[key] = size
            size = _align(size + key.span_bytes)
        self.arena_bytes = size
        self.num_slots = num_slots
        self.arenas = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(num_slots)]
        self._views: dict[tuple[int, ParamKey], torch.Tensor] = {}

    @property
    def total_bytes(self) -> int:
        """Device bytes allocated for all slots (including alignment padding)."""
        return self.arena_bytes * self.num_slots

    def view(self, slot: int, key: ParamKey) -> torch.Tensor:
        """The buffer of ``key`` in ``slot`` (cached, so every module of a slot shares it)."""
        got = self._views.get((slot, key))
        if got is None:
            got = _view(self.arenas[slot], self.offsets[key], key)
            self._views[(slot, key)] = got
        return got


@dataclass
class _Wrapped:
    """One wrapped module: its parameters' host storage and its copy plan."""

    layer: int
    module: nn.Module
    device: torch.device
    param_names: list[str]
    host: dict[str, torch.Tensor] = field(default_factory=dict)
    keys: dict[str, ParamKey] = field(default_factory=dict)
    index: int = -1
    slot: int = 0
    next_index: int = 0
    host_flat: torch.Tensor | None = None
    runs: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    done_event: Any = None
    fork_event: Any = None
    event_valid: bool = False
    in_capture: bool = False

    @property
    def offloaded_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.host.values())


class CurrentPrefetchOffloader(_Base):
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
        self.wrapped: list[_Wrapped] = []
        self.buffer_pool: StaticBufferPool | None = None
        self.post_init_called = False
        self.device_type = ""
        self.fallback_loads = 0
        self.copies_issued = 0
        self._slot_owner: list[int | None] = []
        self._use_ops = True
        self._op_id = ops.register(self)
        self._token: torch.Tensor | None = None
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
            first = _resolve(module, names[0])
            self.wrapped.append(_Wrapped(layer=i, module=module, device=first.device, param_names=names))
            self._offload_to_host(self.wrapped[-1])
        self.num_layers = len(all_modules)
        self.selected_layers = tuple(selected)
        assert self.selected_layers == select_offload_layers(self.num_layers, self.group_size, self.num_in_group)
        return all_modules

    def _offload_to_host(self, w: _Wrapped) -> None:
        """Move ``w``'s parameters to host storage now (frees device memory during loading)."""
        if self.backend is None:
            factory = self._backend_factory or backend_for_device
            self.backend = factory(w.device)
            self.device_type = w.device.type
        pin = self.backend.pin_memory()
        for name in w.param_names:
            p = _resolve(w.module, name)
            data = p.data
            if data.device.type == "cpu" and (data.is_pinned() or not pin):
                w.host[name] = data  # already host memory of the right kind
            else:
                host = torch.empty_strided(
                    data.size(), data.stride(), dtype=data.dtype, device="cpu", pin_memory=pin
                )
                host.copy_(data)
                p.data = host
                w.host[name] = host
            if w.device.type == "cpu":
                # vLLM's CPU UnquantizedLinearMethod packs weights into oneDNN handles and
                # empties the Parameter unless this flag is set: keep plain weights so the
                # layer really reads the buffers this offloader fills.
                owner, _ = _owner_and_leaf(w.module, name)
                if hasattr(owner, "quant_method"):
                    owner._cpu_skip_gemm_dispatch = True

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
        keep: list[_Wrapped] = []
        for w in self.wrapped:
            names: list[str] = []
            for name in w.param_names:
                try:
                    p = _resolve(w.module, name)
                except AttributeError:  # deleted by weight processing (e.g. k_scale)
                    w.host.pop(name, None)
                    continue
                if not isinstance(p, torch.Tensor) or p.layout != torch.strided:
                    w.host.pop(name, None)
                    if isinstance(p, torch.Tensor) and p.device != w.device:
                        p.data = p.data.to(w.device)  # not offloaded: back on the device
                    continue
                fmt = _npu_format(p.data)
                if fmt is not None and fmt != ACL_FORMAT_ND:
                    raise UnsupportedWeightFormat(
                        f"layer {w.layer} parameter {name!r} is stored in npu format {fmt} "
                        f"(29 = FRACTAL_NZ); this offloader supports plain ND weights only "
                        f"(set VLLM_ASCEND_ENABLE_NZ=0, or 1 with unquantized bf16/fp16 weights)"
                    )
                data = p.data
                w.keys[name] = ParamKey(name, tuple(data.shape), tuple(data.stride()), data.dtype)
                w.host[name] = data  # current data; packed into pinned storage by _pack
                names.append(name)
            w.param_names = names
            if names:
                keep.append(w)
        self.wrapped = keep

    def _pack(self, w: _Wrapped) -> None:
        """Pack ``w``'s host storage in arena layout; point its params at its slot's buffers."""
        assert self.buffer_pool is not None and self.backend is not None
        pool = self.buffer_pool
        spans = sorted(
            ((pool.offsets[w.keys[n]], pool.offsets[w.keys[n]] + w.keys[n].span_bytes, n) for n in w.param_names)
        )
        # contiguous runs of the arena (gaps up to the alignment padding are absorbed)
        runs: list[list[int]] = []
        for start, end, _ in spans:
            if runs and start <= _align(runs[-1][1]):
                runs[-1][1] = max(runs[-1][1], end)
            else:
                runs.append([start, end])
        host_size = sum(_align(e - s) for s, e in runs)
        flat = torch.empty(host_size, dtype=torch.uint8, device="cpu", pin_memory=self.backend.pin_memory())
        run_host_off: list[int] = []
        off = 0
        for s, e in runs:
            run_host_off.append(off)
            off += _align(e - s)
        new_host: dict[str, torch.Tensor] = {}
        for start, _end, name in spans:
            r = next(i for i, (s, e) in enumerate(runs) if s <= start <= e)
            key = w.keys[name]
            hv = _view(flat, run_host_off[r] + (start - runs[r][0]), key)
            hv.copy_(w.host[name])
            new_host[name] = hv
            _resolve(w.module, name).data = pool.view(w.slot, key)
        old = w.host
        w.host = new_host
        w.host_flat = flat
        for name, t in old.items():  # wrap-time / re-pinned copies: drop our references
            if t.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr():
                self.released_host_bytes += t.numel() * t.element_size()
        del old
        arena = pool.arenas[w.slot]
        w.runs = [
            (arena[s:e], flat[run_host_off[i] : run_host_off[i] + (e - s)]) for i, (s, e) in enumerate(runs)
        ]

    def _hook(self, w: _Wrapped) -> None:
        """Install the forward wrapper: wait before, refill after (upstream's protocol)."""
        original = w.module.forward
        off = self

        def forward(*args: Any, **kwargs: Any) -> Any:
            off._before(w, _activation(args, kwargs))
            try:
                out = original(*args, **kwargs)
            finally:
                off._release(w)
            off._after(w, out[0] if isinstance(out, tuple) else out)
            return out

        w.module.forward = forward

    # --------------------------------------------------------------- runtime
    def _before(self, w: _Wrapped, t: torch.Tensor | None) -> None:
        # an activation-less layer passes the token: still an opaque op, never a traced call
        ops.wait_prefetch(t if t is not None else self._token, self._op_id, w.index)

    def _after(self, w: _Wrapped, out: Any) -> None:
        ops.start_prefetch(out if isinstance(out, torch.Tensor) else self._token, self._op_id, w.next_index)

    def _release(self, w: _Wrapped) -> None:
        """Called in ``finally`` after the module ran (the sync reference frees its slot here)."""

    def _wait_for_layer(self, layer_idx: int) -> None:
        """Make the compute stream wait until module ``layer_idx``'s weights are in its slot."""
        w = self.wrapped[layer_idx]
        b = self.backend
        assert b is not None
        if self._slot_owner[w.slot] != layer_idx:  # slot holds another module: load now
            self.fallback_loads += 1
            self._start_prefetch(layer_idx)
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
            b.wait_stream(cur, self.copy_stream)

    def _start_prefetch(self, layer_idx: int) -> None:
        """Copy module ``layer_idx`` into its slot on the copy stream, after queued compute."""
        w = self.wrapped[layer_idx]
        b = self.backend
        assert b is not None
        if not b.asynchronous:  # synchronous backend (CPU): no streams, no events
            for dst, src in w.runs:
                dst.copy_(src)
            self._slot_owner[w.slot] = layer_idx
            self.copies_issued += 1
            return
        capturing = b.is_capturing()
        w.in_capture = capturing
        cur = b.current_stream()
        fork = b.new_event() if capturing else w.fork_event
        b.record(fork, cur)
        b.wait_event(self.copy_stream, fork)
        with b.stream(self.copy_stream):
            for dst, src in w.runs:
                b.copy(dst, src)
        b.record(w.done_event, self.copy_stream)
        w.event_valid = not capturing
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

    def _pack(self, w: _Wrapped) -> None:
        w.slot = 0
        super()._pack(w)

    def _initial_loads(self) -> None:
        return None

    def _after(self, w: _Wrapped, out: Any) -> None:
        return None

    def _release(self, w: _Wrapped) -> None:
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

