"""Config helpers of the runner: the run-level switches and the runtimes a run uses.

What is modelled: ``RunOptions`` (the run-level switches of a typed ``conf.schema.Config``) and
``runtimes_used`` (the run's runtime and every phase-specific one, distinct by content).
"""

from __future__ import annotations

from dataclasses import dataclass

from conf.schema import Config
from conf.schema_stack import RuntimeConfig


def runtimes_used(cfg: Config) -> list[RuntimeConfig]:
    """The run's runtime and every phase-specific runtime (distinct by content, in order: a phase runtime
    may keep the run runtime's name with another environment, e.g. the embedded default's thread count)."""
    import json

    from conf.typed import plain

    out: dict[str, RuntimeConfig] = {}
    for rt in [cfg.runtime, *(ph.runtime for ph in cfg.phases.values())]:
        if rt is not None:
            out.setdefault(json.dumps(plain(rt), sort_keys=True, default=str), rt)
    return list(out.values())


@dataclass(frozen=True)
class RunOptions:
    """The run-level switches of ``conf.schema.Config``, typed (meanings and defaults: that class).

    Built from a typed config (``conf.typed.load_config`` / ``load_saved_config``): no default is restated here.
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
    def of(cls, cfg: Config) -> "RunOptions":
        """The options of ``cfg``."""
        def argv(value: list[str] | None) -> tuple[str, ...] | None:
            return None if value is None else tuple(str(a) for a in value)

        return cls(experiment_name=cfg.experiment_name, results_root=cfg.results_root, run_id=cfg.run_id,
                   resume=cfg.resume, dry_run=cfg.dry_run, formal=cfg.formal, bench_command=argv(cfg.bench_command),
                   bench_module=cfg.bench_module, accuracy_command=argv(cfg.accuracy_command), analyze=cfg.analyze,
                   progress=cfg.progress)
