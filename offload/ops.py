"""Custom ops ``torch.ops.offload.wait_prefetch`` / ``start_prefetch`` (opaque to ``torch.compile``).

Same contract as vLLM 0.32's ``torch.ops.vllm.wait_prefetch`` / ``start_prefetch``
(``vllm/model_executor/offloader/prefetch_ops.py``): each op declares its tensor argument
mutated, so Dynamo/Inductor keep the op in the graph, run it on every call and order it
after the op that produced the tensor and before every op that reads it. They differ in
one way: they name the offloader (``offloader_id``, from :func:`register`) instead of
calling ``get_offloader()``, so they work without vLLM (the torch-only GPU check) and for
an offloader that is not the process-global one.

Schemas: ``wait_prefetch(Tensor(a!) x, int offloader_id, int layer_idx) -> ()`` and
``start_prefetch(Tensor(a!) x, int offloader_id, int layer_idx) -> ()``. The fake (meta)
implementations do nothing, so tracing never touches streams. Imports only torch (>= 2.4).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch

_REGISTRY: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_ids = itertools.count(1)

_LIB = torch.library.Library("offload", "FRAGMENT")  # noqa: TOR901 - kept alive at module level
_LIB.define("wait_prefetch(Tensor(a!) x, int offloader_id, int layer_idx) -> ()")
_LIB.define("start_prefetch(Tensor(a!) x, int offloader_id, int layer_idx) -> ()")


def register(offloader: Any) -> int:
    """Register ``offloader`` (weakly) and return the id the ops take."""
    oid = next(_ids)
    _REGISTRY[oid] = offloader
    return oid


def _get(offloader_id: int) -> Any:
    off = _REGISTRY.get(offloader_id)
    if off is None:
        raise RuntimeError(f"offload op: no live offloader with id {offloader_id}")
    return off


def _wait_impl(x: torch.Tensor, offloader_id: int, layer_idx: int) -> None:
    _get(offloader_id)._wait_for_layer(layer_idx)


def _start_impl(x: torch.Tensor, offloader_id: int, layer_idx: int) -> None:
    _get(offloader_id)._start_prefetch(layer_idx)


def _fake(x: torch.Tensor, offloader_id: int, layer_idx: int) -> None:
    return None


_LIB.impl("wait_prefetch", _wait_impl, "CompositeExplicitAutograd")
_LIB.impl("start_prefetch", _start_impl, "CompositeExplicitAutograd")
torch.library.register_fake("offload::wait_prefetch", _fake, lib=_LIB)
torch.library.register_fake("offload::start_prefetch", _fake, lib=_LIB)


def wait_prefetch(x: torch.Tensor, offloader_id: int, layer_idx: int) -> None:
    """Compute stream waits for wrapped module ``layer_idx`` of offloader ``offloader_id``."""
    torch.ops.offload.wait_prefetch(x, offloader_id, layer_idx)


def start_prefetch(x: torch.Tensor, offloader_id: int, layer_idx: int) -> None:
    """Start the copy of wrapped module ``layer_idx`` into its slot, after ``x`` is produced."""
    torch.ops.offload.start_prefetch(x, offloader_id, layer_idx)
