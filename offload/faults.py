"""Negative-control faults: deliberate, named corruptions of this project's offloader, for tests only.

What is modelled:

* ``zero_host_copy`` -- right after ``post_init``, the host copy of the first offloaded layer (every
  offloaded parameter of it, packed in ``host_flat``) is set to zero and the initial prefetches are
  issued again, so every later onload of that layer reads the zeros. The layer then runs with zero
  weights while the evidence still reports it offloaded: outputs must differ from the baseline's, and
  an accuracy comparison must fail (``+experiment=negative_control``). In the spirit of
  ``offload_tools.gpu_check_torch --negative-control``.
* ``decode_batch_ge_72`` -- a forward hook on the first offloaded layer that, per forward, reads
  vLLM's forward context (``vllm.forward_context.get_forward_context().attn_metadata``: per request
  its query length from ``query_start_loc`` and its context from ``seq_lens``) and, only when the step
  carries at least ``DECODE_BATCH_K`` (72) *decoding* sequences (query length 1 after a context), flips
  the sign of the layer's hidden-state output. A prefill of 72 tokens has the same tensor shape as 72
  decodes and is never touched: the count comes from the scheduler's metadata, not from the shape.
  The accuracy phase generates one task (64 rows) per call, so its steps carry at most 64 decoding
  sequences and it passes; a serving load that batches 72 or more decodes (96 requests at rate inf)
  corrupts their tokens, and only the per-request output comparison under load can see it
  (``+experiment=negative_control_serving``). Bugs of this shape are public: offload and cache bugs
  that corrupt outputs only at high concurrency (vLLM #31210, #47282).

The fault is selected per case by the runner through ``OFFLOAD_FAULT`` (config: a case's
``fault``) and applied by :mod:`offload.plugin` in the process that loads the model; it prints
one ``OFFLOAD_FAULT applied ...`` line. Unset or empty: nothing happens.

What is deliberately not modelled: faults of other offloaders (the overlay, upstream's).
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Any

FAULT_ENV = "OFFLOAD_FAULT"
"""Environment variable naming the fault of a case (empty or unset: none)."""

class OffloadFault(StrEnum):
    """Negative-control fault of one case: tests only, never a measurement; also the config's value set."""

    zero_host_copy = "zero_host_copy"
    decode_batch_ge_72 = "decode_batch_ge_72"


FAULTS = tuple(f.value for f in OffloadFault)
"""Names of the faults :func:`apply_fault` knows."""

DECODE_BATCH_K = 72
"""Decoding sequences in one step from which ``decode_batch_ge_72`` corrupts (above the accuracy phase's
64 rows per generate call; reached by 96 requests sent at once to an API server)."""


def decoding_sequences(attn_metadata: Any) -> int | None:
    """Requests of a step that decode (query length 1 after a context), from vLLM's attention metadata.

    Args:
        attn_metadata: ``ForwardContext.attn_metadata`` (a ``{layer: metadata}`` dict, a list of them
            for micro-batches, or None in a profile / dummy run); each metadata has ``query_start_loc``
            (``num_reqs + 1`` offsets) and ``seq_lens`` (tokens of each request including this step).

    Returns:
        The count, or None when the step carries no attention metadata.
    """
    meta = attn_metadata[0] if isinstance(attn_metadata, list) and attn_metadata else attn_metadata
    if not meta:
        return None
    m = next(iter(meta.values()))
    qsl = m.query_start_loc.cpu()
    q = qsl[1:] - qsl[:-1]
    ctx = m.seq_lens.cpu()[: q.numel()]
    return int(((q == 1) & (ctx > 1)).sum())


def _forward_decodes() -> int | None:
    """``decoding_sequences`` of the forward running now (None outside a vLLM forward)."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None
    return decoding_sequences(get_forward_context().attn_metadata)


def _decode_batch_hook(name: str, layer: int, k: int) -> Any:
    """The forward hook of ``decode_batch_ge_72``: sign-flip the hidden states when >= k sequences decode."""
    state = {"acted": 0}

    def hook(_module: Any, _args: Any, out: Any) -> Any:
        n = _forward_decodes()
        if n is None or n < k:
            return None
        state["acted"] += 1
        if state["acted"] == 1:
            print(f"OFFLOAD_FAULT {name} acted: layer {layer} output corrupted in a step with {n} decoding "
                  f"sequences (>= {k})", flush=True)
        if isinstance(out, tuple):
            return (-out[0], *out[1:])
        return -out

    return hook


def apply_fault(offloader: Any, name: str) -> str:
    """Apply fault ``name`` to ``offloader`` (ours, after ``post_init``); return the line it printed.

    Raises:
        ValueError: unknown fault name, or an offloader with no wrapped layer (nothing to corrupt).
    """
    if getattr(offloader, "fault_applied", None):
        return str(offloader.fault_applied)
    if name not in FAULTS:
        raise ValueError(f"{FAULT_ENV}={name!r} is not a known fault; allowed: {list(FAULTS)}")
    wrapped = [w for w in getattr(offloader, "wrapped", ()) if w.host_flat is not None]
    if not wrapped:
        raise ValueError(f"{FAULT_ENV}={name!r}: the offloader {type(offloader).__name__} wrapped no layer")
    w = wrapped[0]
    if name == OffloadFault.decode_batch_ge_72:
        w.module.register_forward_hook(_decode_batch_hook(name, w.layer, DECODE_BATCH_K))
        line = (f"OFFLOAD_FAULT applied {name}: layer {w.layer} output sign-flipped in every step with >= "
                f"{DECODE_BATCH_K} decoding sequences (vLLM forward context)")
    else:
        w.host_flat.zero_()
        offloader._initial_loads()  # slots filled before the fault are refilled from the zeroed copy
        line = (f"OFFLOAD_FAULT applied {name}: host copy of layer {w.layer} zeroed "
                f"({w.host_flat.numel() * w.host_flat.element_size()} bytes)")
    print(line, flush=True)
    offloader.fault_applied = line
    return line


def apply_fault_from_env(offloader: Any) -> str | None:
    """:func:`apply_fault` with ``OFFLOAD_FAULT``'s value; None when it is unset or empty."""
    name = os.environ.get(FAULT_ENV, "")
    return apply_fault(offloader, name) if name else None
