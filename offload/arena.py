"""Static device buffers of the prefetch offloader: keys, aligned arenas, host packing.

Inside an arena each key ``(name, shape, stride, dtype)`` has a fixed, :data:`ALIGN_BYTES`
(512) aligned offset, so modules sharing a slot and a key share the buffer; a module's host
storage is packed in the same layout so that one host-to-device copy per contiguous run of
keys (normally exactly one) moves the whole module (:mod:`offload.prefetch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

ALIGN_BYTES = 512
"""Offset alignment of every key inside a slot arena, in bytes.

The start alignment a separately allocated tensor gets from the caching allocators:
``kMinBlockSize = 512`` in PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` and in
torch-npu's ``torch_npu/csrc/core/npu/NPUCachingAllocator.cpp`` (every block size is a
multiple of 512 inside 2 MiB-aligned segments). Official allocates one ``empty_strided``
buffer per parameter, so with 512 every view here starts as aligned as official's buffers
(kernels that pick algorithms by pointer alignment see the same alignment)."""


def _align(n: int, a: int = ALIGN_BYTES) -> int:
    return (n + a - 1) // a * a


def _span_elems(shape: Sequence[int], stride: Sequence[int]) -> int:
    """Storage elements a strided tensor spans from its first element (0 if empty)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=False))




@dataclass(frozen=True)
class ParamKey:
    """Buffer-pool key: parameters with equal keys in different modules share a slot buffer."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @property
    def span_bytes(self) -> int:
        return _span_elems(self.shape, self.stride) * self.dtype.itemsize

    @property
    def num_bytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.dtype.itemsize


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



def _contiguous_runs(spans: Sequence[tuple[int, int, str]]) -> list[list[int]]:
    """Contiguous ``[start, end)`` byte runs of sorted arena spans (gaps up to the alignment padding absorbed)."""
    runs: list[list[int]] = []
    for start, end, _ in spans:
        if runs and start <= _align(runs[-1][1]):
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    return runs


@dataclass
class PackedHost:
    """A module's host storage packed in arena layout.

    Attributes:
        flat: the packed host buffer (uint8, pinned when asked).
        host: parameter name -> view of ``flat`` holding that parameter.
        runs: (arena slice, host slice) pairs, one host-to-device copy each.
    """

    flat: torch.Tensor
    host: dict[str, torch.Tensor]
    runs: list[tuple[torch.Tensor, torch.Tensor]]


def pack_host(
    pool: StaticBufferPool, slot: int, keys: dict[str, ParamKey], host: dict[str, torch.Tensor], pin: bool
) -> PackedHost:
    """Copy ``host`` (name -> tensor) into one buffer laid out as ``slot``'s arena.

    Args:
        pool: the static buffers (offsets of every key).
        slot: the module's slot (its copies target ``pool.arenas[slot]``).
        keys: parameter name -> key, for every name of ``host``.
        host: parameter name -> current host (or device) data of the parameter.
        pin: allocate the packed buffer in pinned memory.
    """
    spans = sorted((pool.offsets[keys[n]], pool.offsets[keys[n]] + keys[n].span_bytes, n) for n in host)
    runs = _contiguous_runs(spans)
    host_size = sum(_align(e - s) for s, e in runs)
    flat = torch.empty(host_size, dtype=torch.uint8, device="cpu", pin_memory=pin)
    run_host_off: list[int] = []
    off = 0
    for s, e in runs:
        run_host_off.append(off)
        off += _align(e - s)
    new_host: dict[str, torch.Tensor] = {}
    for start, _end, name in spans:
        r = next(i for i, (s, e) in enumerate(runs) if s <= start <= e)
        hv = _view(flat, run_host_off[r] + (start - runs[r][0]), keys[name])
        hv.copy_(host[name])
        new_host[name] = hv
    arena = pool.arenas[slot]
    pairs = [(arena[s:e], flat[run_host_off[i] : run_host_off[i] + (e - s)]) for i, (s, e) in enumerate(runs)]
    return PackedHost(flat=flat, host=new_host, runs=pairs)
