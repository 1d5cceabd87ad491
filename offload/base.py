"""vLLM's ``BaseOffloader`` (so that isinstance checks in vLLM hold), or a stand-in without vLLM."""

from __future__ import annotations

__all__ = ["BaseOffloader"]

try:  # vLLM present: subclass its BaseOffloader so isinstance checks in vLLM hold.
    from vllm.model_executor.offloader.base import BaseOffloader
except ImportError:  # pragma: no cover - vLLM is installed wherever models run

    class BaseOffloader:  # type: ignore[no-redef]
        """Stand-in for ``vllm.model_executor.offloader.base.BaseOffloader``."""

        supports_tower_offload = False

        def post_init(self) -> None:
            return None

        def sync_prev_onload(self) -> None:
            return None

        def join_after_forward(self) -> None:
            return None
