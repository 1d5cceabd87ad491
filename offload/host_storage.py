"""Host storage of the modules the prefetch offloader wraps (:mod:`offload.prefetch`).

A selected module's parameters matching ``offload_params`` move to host storage at wrap time
(``torch.empty_strided`` with the parameter's shape/stride/dtype, pinned when the platform
supports it); after weight processing they are re-read (a parameter may have been replaced,
moved, re-laid-out or deleted). Plain (ND) strided tensors only: an Ascend parameter stored
as ``FRACTAL_NZ`` is refused with :class:`UnsupportedWeightFormat` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from offload.arena import ParamKey

ACL_FORMAT_ND = 2
"""torch-npu format id of plain (ND) tensors (``vllm_ascend/utils.py``: ``ACL_FORMAT_FRACTAL_ND = 2``)."""


class UnsupportedWeightFormat(ValueError):
    """A parameter to offload is stored in a format the arena cannot hold (e.g. FRACTAL_NZ)."""


def npu_format(t: torch.Tensor) -> int | None:
    """torch-npu storage format id of a device tensor (``None`` off Ascend)."""
    if t.device.type != "npu":
        return None
    try:
        import torch_npu
    except ImportError:  # pragma: no cover - an npu tensor implies torch_npu
        return None
    return int(torch_npu.get_npu_format(t))


def resolve(module: nn.Module, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def owner_and_leaf(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    parent, _, leaf = dotted.rpartition(".")
    return (resolve(module, parent) if parent else module), leaf


def activation(args: tuple, kwargs: dict) -> torch.Tensor | None:
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


@dataclass
class Wrapped:
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



def move_to_host(w: Wrapped, pin: bool) -> None:
    """Move ``w``'s parameters to host storage now (frees device memory during loading).

    Args:
        w: the wrapped module; ``w.host`` receives name -> host tensor.
        pin: host storage must be pinned (the backend's ``pin_memory()``).
    """
    for name in w.param_names:
        p = resolve(w.module, name)
        data = p.data
        if data.device.type == "cpu" and (data.is_pinned() or not pin):
            w.host[name] = data  # already host memory of the right kind
        else:
            host = torch.empty_strided(data.size(), data.stride(), dtype=data.dtype, device="cpu", pin_memory=pin)
            host.copy_(data)
            p.data = host
            w.host[name] = host
        if w.device.type == "cpu":
            # vLLM's CPU UnquantizedLinearMethod packs weights into oneDNN handles and
            # empties the Parameter unless this flag is set: keep plain weights so the
            # layer really reads the buffers this offloader fills.
            owner, _ = owner_and_leaf(w.module, name)
            if hasattr(owner, "quant_method"):
                # setattr: nn.Module's __getattr__ types attributes as Tensor | Module
                setattr(owner, "_cpu_skip_gemm_dispatch", True)  # noqa: B010


def resync(w: Wrapped) -> None:
    """Re-read ``w``'s parameters after ``process_weights_after_loading``; prune deleted ones.

    Keeps in ``w.param_names`` / ``w.host`` / ``w.keys`` the parameters still strided
    tensors; a parameter deleted or no longer strided is dropped (moved back to the device).

    Raises:
        UnsupportedWeightFormat: a parameter stored in an Ascend format other than ND.
    """
    names: list[str] = []
    for name in w.param_names:
        try:
            p = resolve(w.module, name)
        except AttributeError:  # deleted by weight processing (e.g. k_scale)
            w.host.pop(name, None)
            continue
        if not isinstance(p, torch.Tensor) or p.layout != torch.strided:
            w.host.pop(name, None)
            if isinstance(p, torch.Tensor) and p.device != w.device:
                p.data = p.data.to(w.device)  # not offloaded: back on the device
            continue
        fmt = npu_format(p.data)
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
