"""Negative-control faults: deliberate, named corruptions of this project's offloader, for tests only.

What is modelled: ``zero_host_copy`` -- right after ``post_init``, the host copy of the first
offloaded layer (every offloaded parameter of it, packed in ``host_flat``) is set to zero and the
initial prefetches are issued again, so every later onload of that layer reads the zeros. The
layer then runs with zero weights while the evidence still reports it offloaded: outputs must
differ from the baseline's, and an accuracy comparison must fail (``+experiment=negative_control``).
In the spirit of ``offload_tools.gpu_check_torch --negative-control``.

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


FAULTS = tuple(f.value for f in OffloadFault)
"""Names of the faults :func:`apply_fault` knows."""


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
