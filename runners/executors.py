"""Executors: where case processes run. Both start a fresh process (group) per case.

What is modelled:
* ``LocalExecutor``: cases one after another on this host, a cooldown between
  two processes, each through ``runners.launch.run_case_process``.
* ``RayExecutor``: each case is a Ray task that asks for one accelerator
  (``num_gpus=1`` for ``GPU``, a custom resource such as ``NPU``) or only
  ``num_cpus`` on CPU; inside the worker the task still launches the case as a
  fresh process group (same function as local). Outcomes stream back to the
  driver in completion order through the same ``on_done`` callback, so the run
  directory is written by one finalizer. A private head on loopback is started
  when no address is configured.

What is deliberately not modelled: scheduling policy (the schedule is given),
placement groups, retries (a failed case is a record, not a retry).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from runners.launch import ProcessOutcome, raise_if_interrupted, run_case_process
from runners.plan import ScheduledCase


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one case process (picklable: travels to Ray workers)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: str
    evidence_path: str
    record_path: str
    timeout_s: float
    kill_grace_s: float
    cooldown_s: float
    accelerator: str | None
    pid_file: str | None = None
    """Kept while the case runs (``runners.launch.end_recorded_cases`` ends leftovers at resume)."""
    record_env: tuple[str, ...] = ()
    """The runtime's declared env names, recorded in the case log header besides the allow-list."""


OnDone = Callable[[ScheduledCase, LaunchSpec, ProcessOutcome], bool]
"""Called once per finished case; returns False to stop launching further cases."""


def _launch(spec: LaunchSpec) -> ProcessOutcome:
    return run_case_process(spec.argv, spec.env, Path(spec.log_path), Path(spec.cwd), timeout_s=spec.timeout_s,
                            kill_grace_s=spec.kill_grace_s, pid_file=Path(spec.pid_file) if spec.pid_file else None,
                            record_env=spec.record_env)


class LocalExecutor:
    """Runs cases sequentially in this process's host."""

    name = "local"

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0  # spawn + reap time outside the case's own wall time

    def execute(self, items: Sequence[tuple[ScheduledCase, LaunchSpec]], on_done: OnDone,
                on_start: Callable[[ScheduledCase], None] | None = None) -> None:
        first = True
        for sc, spec in items:
            if not first and spec.cooldown_s > 0:
                t = time.monotonic()
                self._sleep(spec.cooldown_s)
                self.cooldown_total_s += time.monotonic() - t
            first = False
            if on_start is not None:
                on_start(sc)
            t = time.monotonic()
            outcome = _launch(spec)
            self.launch_overhead_s += (time.monotonic() - t) - outcome.wall_s
            if not on_done(sc, spec, outcome):
                return
            raise_if_interrupted()  # a SIGINT/SIGTERM whose exception was swallowed (see launch)

    def close(self) -> None:
        pass


def _ray_case(spec: LaunchSpec) -> ProcessOutcome:
    """Body of the Ray task: one fresh case process inside the worker, then the cooldown."""
    outcome = _launch(spec)
    if spec.cooldown_s > 0:
        time.sleep(spec.cooldown_s)
    return outcome


class RayExecutor:
    """Runs each case as a Ray task (see module docstring)."""

    name = "ray"

    def __init__(self, *, address: str | None, num_cpus_per_case: float, head_num_cpus: int | None,
                 object_store_memory_bytes: int, repo_root: Path) -> None:
        import ray

        self._ray = ray
        self._owns_cluster = address is None
        runtime_env = {"env_vars": {"PYTHONPATH": str(repo_root)}}
        if address is None:
            ray.init(num_cpus=head_num_cpus, include_dashboard=False, object_store_memory=object_store_memory_bytes,
                     _node_ip_address="127.0.0.1", runtime_env=runtime_env, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, configure_logging=False)
        self.num_cpus_per_case = num_cpus_per_case
        self._remote = ray.remote(_ray_case)
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0

    def _options(self, accelerator: str | None) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.num_cpus_per_case, "max_retries": 0}
        if accelerator == "GPU":
            opts["num_gpus"] = 1
        elif accelerator:
            opts["resources"] = {accelerator: 1}
        return opts

    def execute(self, items: Sequence[tuple[ScheduledCase, LaunchSpec]], on_done: OnDone,
                on_start: Callable[[ScheduledCase], None] | None = None) -> None:
        ray = self._ray
        pending: dict[Any, tuple[ScheduledCase, LaunchSpec]] = {}
        for sc, spec in items:
            ref = self._remote.options(**self._options(spec.accelerator)).remote(spec)
            pending[ref] = (sc, spec)
            if on_start is not None:
                on_start(sc)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    sc, spec = pending.pop(ref)
                    outcome = ray.get(ref)
                    if not on_done(sc, spec, outcome):
                        return
        finally:
            for ref in pending:
                ray.cancel(ref, force=False)  # the task's context manager reaps its process group

    def close(self) -> None:
        if self._owns_cluster:
            self._ray.shutdown()


def make_executor(cfg: Mapping[str, Any], repo_root: Path) -> LocalExecutor | RayExecutor:
    """Executor for an ``ExecutorConfig`` (plain dict)."""
    name = cfg.get("name", "local")
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        r = cfg.get("ray", {}) or {}
        return RayExecutor(address=r.get("address"), num_cpus_per_case=float(r.get("num_cpus_per_case", 1.0)),
                           head_num_cpus=r.get("head_num_cpus"),
                           object_store_memory_bytes=int(r.get("object_store_memory_bytes", 100_000_000)),
                           repo_root=repo_root)
    raise ValueError(f"executor.name {name!r} must be 'local' or 'ray'")
