"""Evidence of the prefetch offloaders (:mod:`offload.prefetch`): the ``RuntimeEvidence`` fields
(``results_schema.records.models.RuntimeEvidence`` minus ``schema_version``, ``implementation``, ``pid``)
and the one ``OFFLOAD_STATE`` log line printed after ``post_init`` (with the slot arenas' and host buffers' addresses
modulo 2 MiB: ``EvidenceMixin.placement_state``)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

logger = logging.getLogger("offload")

PLACEMENT_MODULUS = 2 * 1024 * 1024
"""Addresses are logged modulo this (2 MiB: an x86-64 transparent huge page)."""


class EvidenceMixin:
    """``evidence_state`` / ``_log_state`` / ``pinned_host_bytes`` over a prefetch offloader's attributes."""

    wrapped: Any
    buffer_pool: Any
    protocol: Any
    backend: Any
    group_size: int
    num_in_group: int
    prefetch_step: int
    offload_params: tuple[str, ...]
    num_layers: int
    selected_layers: tuple[int, ...]
    post_init_called: bool
    device_type: str
    released_host_bytes: int
    weight_format: str
    _use_ops: bool

    @property
    def pinned_host_bytes(self) -> int:
        """Host bytes this offloader still holds: the packed buffers (pinned where supported)."""
        return sum(w.host_flat.numel() for w in self.wrapped if w.host_flat is not None)

    def placement_state(self) -> dict[str, list[int]]:
        """Where this offloader's memory landed, a candidate source of between-process variance: each slot arena's
        and each packed host buffer's address modulo ``PLACEMENT_MODULUS`` (2 MiB, the x86-64 huge page: 0 means
        huge-page aligned; a cache-set conflict between a slot and the weights it stands in for depends on these
        low bits). Empty lists where there is no buffer."""
        pool = self.buffer_pool
        slots = [int(a.data_ptr()) % PLACEMENT_MODULUS for a in pool.arenas] if pool is not None else []
        host = [int(w.host_flat.data_ptr()) % PLACEMENT_MODULUS for w in self.wrapped if w.host_flat is not None]
        return {"slot_address_mod_2mib": slots, "host_buffer_address_mod_2mib": host}

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
            "copy_protocol": self.protocol.name if self.protocol is not None else None,
        }

    def _log_state(self) -> None:
        state = dict(self.evidence_state())
        state["slots"] = len(self.protocol.owner) if self.protocol is not None else 0
        state["backend"] = self.backend.name if self.backend is not None else None
        state["custom_ops"] = self._use_ops
        state["pinned_host_bytes"] = self.pinned_host_bytes
        state["released_host_bytes"] = self.released_host_bytes
        state["weight_format"] = self.weight_format
        state.update(self.placement_state())
        line = "OFFLOAD_STATE " + json.dumps(state, sort_keys=True)
        if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(line)
        else:
            print(line, file=sys.stderr, flush=True)
