"""Factory honouring vLLM's ``offload_backend`` contract, for the ``current``/``sync``/``overlay`` offloaders.

Contract (vLLM 0.32 ``vllm/model_executor/offloader/base.py`` ``create_offloader`` and
``vllm/config/offload.py``), decided *before* any model weight is loaded:

==================  =========================  =======================================
offload_backend     G, N                        result
==================  =========================  =======================================
``uva``             any                         the runner's own offloader (unchanged)
``auto``            G == 0 or N == 0            the runner's own offloader (Noop / UVA)
``auto``            valid, G > 0 and N > 0      ours (``overlay``: the published class)
``prefetch``        valid, G > 0 and N > 0      ours (``overlay``: the published class)
``prefetch``        G == 0 or N == 0            ValueError (upstream would divide by 0)
anything else       --                          ValueError naming the value
==================  =========================  =======================================

Validation (:func:`offload.selection.validate_offload_params`): negatives,
``num_in_group > group_size``, ``prefetch_step < 1`` while enabled, unknown backend; every
message names the values. Works with vLLM's nested ``OffloadConfig`` (``.prefetch``)
and the older flat layout (``offload_group_size`` on the config itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from offload import ACTIVE_IMPLEMENTATIONS, IMPL_ENV
from offload.selection import validate_offload_params

IMPLEMENTATIONS = ACTIVE_IMPLEMENTATIONS


@dataclass(frozen=True)
class PrefetchSettings:
    """The prefetch-relevant part of a vLLM ``OffloadConfig``."""

    backend: str
    group_size: int
    num_in_group: int
    prefetch_step: int
    offload_params: tuple[str, ...]

    @property
    def enabled(self) -> bool:
        return self.group_size > 0 and self.num_in_group > 0


def read_offload_config(offload_config: Any) -> PrefetchSettings:
    """Extract backend/G/N/step/params from a vLLM ``OffloadConfig`` (nested or flat).

    Args:
        offload_config: ``vllm_config.offload_config`` (or ``None`` = offload disabled).
    """
    if offload_config is None:
        return PrefetchSettings("auto", 0, 0, 1, ())
    pre = getattr(offload_config, "prefetch", None) or offload_config
    return PrefetchSettings(
        backend=getattr(offload_config, "offload_backend", "auto") or "auto",
        group_size=getattr(pre, "offload_group_size", 0),
        num_in_group=getattr(pre, "offload_num_in_group", 0),
        prefetch_step=getattr(pre, "offload_prefetch_step", 1),
        offload_params=tuple(sorted(getattr(pre, "offload_params", None) or ())),
    )


def validate_settings(s: PrefetchSettings) -> None:
    """Raise ``ValueError`` for any setting the factory would reject (names the values)."""
    validate_offload_params(s.group_size, s.num_in_group, s.prefetch_step, s.backend)
    if s.backend == "prefetch" and not s.enabled:
        raise ValueError(
            f"offload_backend 'prefetch' needs offload_group_size ({s.group_size}) >= 1 and "
            f"offload_num_in_group ({s.num_in_group}) >= 1"
        )


def wants_our_offloader(offload_config: Any) -> bool:
    """Whether the factory would create ours (validates first).

    Raises:
        ValueError: invalid settings.
    """
    s = read_offload_config(offload_config)
    validate_settings(s)
    return s.backend in ("auto", "prefetch") and s.enabled


def create_offloader(
    offload_config: Any,
    runner_factory: Callable[[Any], Any] | None = None,
    implementation: str = "current",
) -> Any:
    """Create the offloader for ``offload_config``.

    Args:
        offload_config: vLLM ``OffloadConfig``.
        runner_factory: the factory the runner would have used (kept for ``uva`` and for
            ``auto`` with offload disabled); ``None`` means vLLM's own ``create_offloader``.
        implementation: ``current`` (prefetch), ``sync`` (reference) or ``overlay`` (the class named by
            ``OFFLOAD_OVERLAY_CLASS``, :func:`offload.overlay.create_overlay`).

    Returns:
        :class:`offload.prefetch.CurrentPrefetchOffloader`, :class:`offload.prefetch.SyncOffloader`,
        the overlay instance or whatever ``runner_factory`` returns.

    Raises:
        ValueError: invalid settings or unknown ``implementation``, or an overlay class that cannot be
            loaded or constructed (:mod:`offload.overlay`), before any weight is loaded.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation ({implementation!r}) must be one of {IMPLEMENTATIONS}")
    s = read_offload_config(offload_config)
    validate_settings(s)
    if not (s.backend in ("auto", "prefetch") and s.enabled):
        if runner_factory is not None:
            return runner_factory(offload_config)
        from vllm.model_executor.offloader.base import create_offloader as vllm_create_offloader

        return vllm_create_offloader(offload_config)
    if implementation == "overlay":
        from offload.overlay import create_overlay

        return create_overlay(s.group_size, s.num_in_group, s.prefetch_step, s.offload_params)
    from offload.prefetch import CurrentPrefetchOffloader, SyncOffloader

    cls = SyncOffloader if implementation == "sync" else CurrentPrefetchOffloader
    return cls(s.group_size, s.num_in_group, s.prefetch_step, s.offload_params)


def make_factory(runner_factory: Callable[[Any], Any], implementation: str) -> Callable[[Any], Any]:
    """A drop-in replacement for a runner's ``create_offloader(offload_config)``.

    ``OFFLOAD_IMPL`` is read again at call time (default: ``implementation``, the value
    the plugin was registered with): ``current``/``sync``/``overlay`` pick ours, any other value hands
    the call to ``runner_factory`` unchanged. A process that builds several engines
    in-process can therefore switch implementation per engine.
    """

    def create_offloader_patched(offload_config: Any) -> Any:
        impl = os.environ.get(IMPL_ENV, implementation)
        if impl not in ACTIVE_IMPLEMENTATIONS:
            return runner_factory(offload_config)
        return create_offloader(offload_config, runner_factory, impl)

    create_offloader_patched.__wrapped__ = runner_factory  # type: ignore[attr-defined]
    create_offloader_patched._offload_impl = implementation  # type: ignore[attr-defined]
    return create_offloader_patched
