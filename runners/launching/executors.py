"""Executors: where case processes run. Both start a fresh process (group) per case.

What is modelled:
* ``LocalExecutor``: cases one after another on this host, a cooldown between
  two processes, each through ``runners.incase.process_group.run_case_process``.
* ``RayExecutor``: each case is a Ray task pinned to one node
  (``NodeAffinitySchedulingStrategy``, hard) chosen by the driver, asking for one
  accelerator (``num_gpus=1`` for ``GPU``, a custom resource such as ``NPU``) or only
  ``num_cpus`` on CPU; inside the worker the task still launches the case as a fresh
  process group (same function as local). Outcomes stream back to the driver in
  completion order through the same ``on_done`` callback, so the run directory is
  written by one finalizer. A private head on loopback is started when no address
  is configured.

Placement rule (``executor.ray.performance_sharing``): performance cases (timings are
the result) run at most one per node at a time by default (``per_node``): two cases on
two accelerators of one node share the host-to-device link and host memory
bandwidth that offloading depends on. ``per_accelerator`` (opt-in) runs one case per
accelerator of a node (CPU nodes: one per ``num_cpus_per_case`` CPUs). Accuracy cases
(outputs only) are spread over the eligible nodes and Ray queues them by resources.
The driver keeps the per-node count itself, so no custom resource has to be declared
on an existing cluster.

Evidence: every attempt is appended to ``<run_dir>/<phase>-placements.jsonl``
(``results_schema.records.placement.CasePlacement``: node, device, start/end wall time,
sharing rule, outcome). Before the first case, ``prepare`` runs the identity gate on
every node that can run the run's cases (one Ray task per node, the same pins as the
driver's gate, observed in that node's runtime) and writes ``cluster-manifest.jsonl``;
a node that differs stops the run or is excluded (``executor.ray.on_node_failure``).
``health_gate`` runs the runtime's health command on each such node, not on the driver.

Faults: a node (or its worker) lost mid-case is an attempt with ``outcome=node_lost``
and its Ray error as cause; the case is queued again, for another node when one is
alive, at most ``max_node_retries`` times (the lost attempt's log, evidence and record move to
``quarantine/node-lost/``); after that the case is a ``launch_error``
failure record naming the lost node(s). A Ray error raised by the task body itself is
not retried.

What is deliberately not modelled: placement groups, gang scheduling, autoscaling,
moving a case between nodes mid-run.
"""

from __future__ import annotations

import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from conf.ranges import check_numbers
from conf.schema import Config, ConfigError
from conf.schema_stack import ExecutorConfig, RuntimeConfig
from results_schema.records.base import ExecutorKind
from results_schema.records.placement import Sharing
from runners.launching.executor_base import (
    NODE_FAILURE_ACTIONS,
    SHARING_MODES,
    LaunchSpec,
    OnDone,
    append_placement,
    launch_case,
    placement,
)
from runners.incase.process_group import raise_if_interrupted
from runners.cases import ScheduledCase
from runners.launching.ray_scheduling import RayScheduler
from runners.launching.ray_tasks import (
    identity_line,
    node_problems,
    ray_case,
    ray_health,
    ray_node_identity,
    unanswered,
)
from results_schema.records.manifest import PinCheck
from runners.errors import EXIT_HEALTH, EXIT_IDENTITY, RunnerError
from runners.identity.case_code import case_code_sha256
from runners.identity.gates import health_gate

__all__ = ["LocalExecutor", "RayExecutor", "check_executor_config", "make_executor"]


class LocalExecutor:
    """Runs cases sequentially in this process's host."""

    name = "local"

    def __init__(self, sleep: Callable[[float], None] = time.sleep, run_dir: Path | None = None) -> None:
        self._sleep = sleep
        self._run_dir = run_dir
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0  # spawn + reap time outside the case's own wall time

    def prepare(self, cfg: Config, identity: Any) -> None:
        """Nothing to do: the driver's identity gate covered this host."""

    def health_gate(self, runtime: RuntimeConfig, out_path: Path) -> None:
        """The runtime's health command on this host (``runners.identity.gates.health_gate``)."""

        health_gate(runtime, out_path)

    def execute(self, items: Sequence[tuple[ScheduledCase, LaunchSpec]], on_done: OnDone,
                on_start: Callable[[ScheduledCase], None] | None = None) -> None:
        first = True
        host = socket.gethostname()
        for sc, spec in items:
            if not first and spec.cooldown_s > 0:
                t = time.monotonic()
                self._sleep(spec.cooldown_s)
                self.cooldown_total_s += time.monotonic() - t
            first = False
            if on_start is not None:
                on_start(sc)
            t = time.monotonic()
            t_wall = time.time()
            outcome = launch_case(spec)
            info = {"hostname": host, "node_id": f"local:{host}", "node_ip": None, "device": spec.accelerator or "cpu",
                    "accelerator_ids": (), "start_unix_s": t_wall, "end_unix_s": time.time(), "times_from": "node",
                    "pid": outcome.pid}
            append_placement(self._run_dir, placement(sc, attempt=0, executor=ExecutorKind.local,
                                                      sharing="sequential", info=info))
            self.launch_overhead_s += (time.monotonic() - t) - outcome.wall_s
            if not on_done(sc, spec, outcome):
                return
            raise_if_interrupted()  # a SIGINT/SIGTERM whose exception was swallowed (see launch)

    def close(self) -> None:
        pass


class RayExecutor(RayScheduler):
    """Runs each case as a Ray task on a driver-chosen node (see module docstring)."""

    name = "ray"

    def __init__(self, *, address: str | None, num_cpus_per_case: float, head_num_cpus: int | None,
                 object_store_memory_bytes: int, repo_root: Path, performance_sharing: str = "per_node",
                 on_node_failure: str = "stop", max_node_retries: int = 2, run_dir: Path | None = None) -> None:
        if performance_sharing not in SHARING_MODES:
            raise ValueError(f"executor.ray.performance_sharing {performance_sharing!r} must be one of {SHARING_MODES}")
        if on_node_failure not in NODE_FAILURE_ACTIONS:
            raise ValueError(f"executor.ray.on_node_failure {on_node_failure!r} must be one of {NODE_FAILURE_ACTIONS}")
        if max_node_retries < 0:
            raise ValueError(f"executor.ray.max_node_retries {max_node_retries} must be >= 0")
        import ray

        self._ray = ray
        self._owns_cluster = address is None
        runtime_env = {"env_vars": {"PYTHONPATH": str(repo_root)}}
        if address is None:  # "local": a private head even when RAY_ADDRESS or a `ray start` cluster is present
            ray.init(address="local", num_cpus=head_num_cpus, include_dashboard=False, object_store_memory=object_store_memory_bytes,
                     _node_ip_address="127.0.0.1", runtime_env=runtime_env, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, configure_logging=False)
        self.num_cpus_per_case = num_cpus_per_case
        self.sharing = cast(Sharing, performance_sharing)
        self.on_node_failure = on_node_failure
        self.max_node_retries = max_node_retries
        self._run_dir = run_dir
        self._remote = ray.remote(ray_case)
        self._excluded: set[str] = set()
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0

    # -- gates

    def prepare(self, cfg: Config, identity: Any) -> None:
        """Identity gate on every alive node that can run this run's cases; writes ``cluster-manifest.jsonl``.

        A node passes when every pin is ok and every observed value (pins, ``offload/`` tree,
        case code, model ``SHA256SUMS``) equals the driver's observation.

        Raises:
            runners.errors.RunnerError: (identity, exit 3) a node failed and ``on_node_failure=stop``,
                or no node is left to run the cases.
        """

        ray = self._ray
        accels = {rt.ray_resource for rt in identity.runtimes}
        nodes = {nid: n for nid, n in self._alive_nodes().items()
                 if any(self._capacity(n, a, "accuracy") > 0 for a in accels)}
        if not nodes:
            raise RunnerError(f"identity gate: no alive Ray node offers {sorted(map(str, accels))} with "
                              f"{self.num_cpus_per_case} CPU(s) per case", EXIT_IDENTITY)
        pins = [rt.pins for rt in identity.runtimes]
        sums = str(Path(identity.model_dir) / "SHA256SUMS")
        task = ray.remote(ray_node_identity)
        refs = {nid: task.options(num_cpus=0, max_retries=0, scheduling_strategy=self._affinity(nid)).remote(pins, sums)
                for nid in nodes}
        driver_pins = [(c.kind, c.name, c.actual) for c in identity.checks if c.kind not in
                       ("model_sha256sums", "model_revision", "offload_tree")]
        driver_code = case_code_sha256()
        now = datetime.now(timezone.utc).isoformat()
        lines, failed = [], []
        for nid, ref in refs.items():
            n = nodes[nid]
            try:
                got = ray.get(ref, timeout=300)
            except Exception as exc:  # noqa: BLE001 - a node that cannot answer fails its gate
                got = unanswered(n, exc)
            checks = tuple(PinCheck(**c) for c in got["pins"])
            problems = node_problems(got, checks, driver_pins=driver_pins, driver_code=driver_code,
                                     identity=identity, sums=sums)
            if problems:
                failed.append(f"{got['hostname']} ({nid[:12]}): {'; '.join(problems)}")
                self._excluded.add(nid)
            lines.append(identity_line(nid, n, got, checks, problems, checked_utc=now,
                                       on_failure="excluded" if self.on_node_failure == "exclude" else "stopped_run"))
        if self._run_dir is not None:
            from results_schema.codec.io import append_jsonl

            for line in lines:
                append_jsonl(self._run_dir / "cluster-manifest.jsonl", line)
        if failed and self.on_node_failure == "stop":
            raise RunnerError("identity gate (cluster): node(s) differ from the driver: " + " | ".join(failed)
                              + " (executor.ray.on_node_failure=exclude leaves them out)", EXIT_IDENTITY)
        if len(self._excluded) == len(nodes):
            raise RunnerError("identity gate (cluster): every node failed: " + " | ".join(failed), EXIT_IDENTITY)

    def health_gate(self, runtime: RuntimeConfig, out_path: Path) -> None:
        """Run the runtime's health command on every node that can run it (a Ray task per node).

        Output per node in ``<out_path stem>-<node id 12>.txt``. A failing node stops the run
        (``on_node_failure=stop``) or is excluded.

        Raises:
            runners.errors.RunnerError: (health, exit 42) a node failed and the run stops, or none is left.
        """

        cmd = runtime.health_command
        if not cmd:
            return
        ray = self._ray
        acc = runtime.ray_resource
        nodes = {nid: n for nid, n in self._alive_nodes().items()
                 if nid not in self._excluded and self._capacity(n, acc, "accuracy") > 0}
        task = ray.remote(ray_health)
        timeout = runtime.health_timeout_s
        out_path.parent.mkdir(parents=True, exist_ok=True)
        failed = []
        for nid in nodes:
            opts = {k: v for k, v in self._options(acc).items() if k != "num_cpus"}
            ref = task.options(num_cpus=0, scheduling_strategy=self._affinity(nid), **opts).remote(list(cmd), timeout)
            try:
                rc, text, host = ray.get(ref, timeout=timeout + 60)
            except Exception as exc:  # noqa: BLE001
                rc, text, host = 125, f"{type(exc).__name__}: {exc}\n", nodes[nid].get("NodeManagerHostname", "?")
            p = out_path.with_name(f"{out_path.stem}-{nid[:12]}.txt")
            p.write_text(f"# node {host} {nid}\n$ {' '.join(cmd)}\n# exit {rc}\n{text}")
            if rc != 0:
                failed.append(f"{host} ({nid[:12]}) exited {rc} (output in {p})")
                if self.on_node_failure == "exclude":
                    self._excluded.add(nid)
        if failed and (self.on_node_failure == "stop" or not set(nodes) - self._excluded):
            raise RunnerError(f"health gate for runtime {runtime.name!r} failed on " + "; ".join(failed),
                              EXIT_HEALTH)

    def close(self) -> None:
        """Stop the private head, or disconnect this driver from an existing cluster (which keeps running)."""
        self._ray.shutdown()


def make_executor(cfg: ExecutorConfig, repo_root: Path, run_dir: Path | None = None) -> LocalExecutor | RayExecutor:
    """Executor for ``cfg``; ``run_dir`` receives the placement evidence.

    Raises:
        ValueError: a Ray option value out of range (naming the value and what is allowed).
    """
    if cfg.name == "local":
        return LocalExecutor(run_dir=run_dir)
    r = cfg.ray
    return RayExecutor(address=r.address, num_cpus_per_case=r.num_cpus_per_case, head_num_cpus=r.head_num_cpus,
                       object_store_memory_bytes=r.object_store_memory_bytes, repo_root=repo_root,
                       performance_sharing=str(r.performance_sharing), on_node_failure=str(r.on_node_failure),
                       max_node_retries=r.max_node_retries, run_dir=run_dir)


def check_executor_config(cfg: ExecutorConfig) -> str | None:
    """The first invalid executor setting as a one-line message naming the value and what is allowed, else None.

    The names and Ray modes are enums of the schema (refused when the config is composed); what is left is
    the ranges of the Ray numbers (Ray itself would refuse them only after the run directory and its head exist),
    stated once in ``conf.ranges`` (``"executor.ray.head_num_cpus=0: must be a whole number >= 1"``)."""
    try:
        check_numbers(cfg, "executor")
    except ConfigError as exc:
        return str(exc)
    return None
