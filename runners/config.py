"""Config helpers of the runner: the resolved plain config and the runtimes a run uses.

What is modelled: ``RunOptions`` (the run-level switches, typed), ``to_plain`` (a composed ``DictConfig`` as a resolved plain dict, ``???`` kept)
and ``runtimes_used`` (the run's runtime and every phase-specific one, distinct by content).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


def to_plain(cfg: Any) -> dict[str, Any]:
    """Resolved plain dict of a DictConfig (``???`` kept as the string ``???``; overlay source roots declared
    as ``pins.source_trees`` pins, ``conf.schema.declare_overlay_pins``)."""
    from omegaconf import OmegaConf

    from conf.schema import declare_overlay_pins

    plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
    return declare_overlay_pins(plain)  # type: ignore[arg-type]  # a config's container is a dict


def runtimes_used(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's runtime and every phase-specific runtime (distinct by content, in order: a phase runtime
    may keep the run runtime's name with another environment, e.g. the embedded default's thread count)."""
    import json

    out: dict[str, dict[str, Any]] = {}
    for rt in [cfg["runtime"], *((ph.get("runtime") for ph in (cfg.get("phases") or {}).values()))]:
        if rt:
            out.setdefault(json.dumps(rt, sort_keys=True, default=str), rt)
    return list(out.values())


@dataclass(frozen=True)
class RunOptions:
    """The run-level switches of ``conf.schema.Config``, typed (meanings and defaults: that class).

    Built from a schema-checked config (``conf.schema.checked_plain_config`` /
    ``checked_saved_config``), where every key is present: no default is restated here.
    """

    experiment_name: str
    results_root: str
    run_id: str | None
    resume: str | None
    dry_run: bool
    formal: bool
    bench_command: tuple[str, ...] | None
    bench_module: str
    accuracy_command: tuple[str, ...] | None
    analyze: bool
    progress: bool

    @classmethod
    def of(cls, cfg: Mapping[str, Any]) -> "RunOptions":
        """The options of ``cfg``.

        Raises:
            KeyError: ``cfg`` was not checked against the schema (a key is missing).
        """
        values = {f.name: cfg[f.name] for f in fields(cls)}
        for key in ("bench_command", "accuracy_command"):
            if values[key] is not None:
                values[key] = tuple(str(a) for a in values[key])
        return cls(**values)
