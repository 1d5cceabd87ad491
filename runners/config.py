"""The runtimes a run uses, read from its typed config (``conf.schema.Config``).

What is modelled: ``distinct_runtimes`` (runtimes distinct by content: typed values compared, so a
phase runtime that keeps the run runtime's name with another environment counts apart) and
``runtimes_used`` (the run's runtime and every phase-specific one). A run computes
``runtimes_used`` once (``runners.orchestration.stages.make_plan``) and passes it on.

What is deliberately not modelled: the run-level switches (``experiment_name``, ``dry_run``,
``analyze``, ...): the typed ``Config`` carries them and is passed as it is.
"""

from __future__ import annotations

from typing import Iterable

from conf.schema import Config
from conf.schema_stack import RuntimeConfig


def distinct_runtimes(runtimes: Iterable[RuntimeConfig | None]) -> list[RuntimeConfig]:
    """The runtimes distinct by content, each at its first occurrence (``None`` entries left out).

    Two runtimes are the same when their typed values are equal (dataclass equality over every
    field, ``env`` and ``pins`` included).
    """
    out: list[RuntimeConfig] = []
    for rt in runtimes:
        if rt is not None and rt not in out:
            out.append(rt)
    return out


def runtimes_used(cfg: Config) -> tuple[RuntimeConfig, ...]:
    """The run's runtime and every phase-specific runtime, distinct by content, in order (``distinct_runtimes``)."""
    return tuple(distinct_runtimes([cfg.runtime, *(ph.runtime for ph in cfg.phases.values())]))
