"""Config helpers of the runner: the resolved plain config and the runtimes a run uses.

What is modelled: ``to_plain`` (a composed ``DictConfig`` as a resolved plain dict, ``???`` kept)
and ``runtimes_used`` (the run's runtime and every phase-specific one, distinct by name).
"""

from __future__ import annotations

from typing import Any, Mapping


def to_plain(cfg: Any) -> dict[str, Any]:
    """Resolved plain dict of a DictConfig (``???`` kept as the string ``???``)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]


def runtimes_used(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's runtime and every phase-specific runtime (distinct by name, in order)."""
    out: dict[str, dict[str, Any]] = {cfg["runtime"]["name"]: cfg["runtime"]}
    for ph in (cfg.get("phases") or {}).values():
        if ph.get("runtime"):
            out.setdefault(ph["runtime"]["name"], ph["runtime"])
    return list(out.values())
