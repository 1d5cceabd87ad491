"""Executors: where case processes run. Both start a fresh process (group) per case.

What is modelled:
* ``LocalExecutor``: cases one after another on this host, a cooldown between
  two processes, each through ``runners.launch.run_case_process``.
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
(``results_schema.placement.CasePlacement``: node, device, start/end wall time,
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
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from runners.launch import ProcessOutcome, raise_if_interrupted, run_case_process
from runners.plan import ScheduledCase

SHARING_MODES = ("per_node", "per_accelerator")
NODE_FAILURE_ACTIONS = ("stop", "exclude")


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


def _kind(sc: ScheduledCase) -> str:
    return "accuracy" if sc.case.kind == "accuracy" else "performance"


def _append_placement(run_dir: Path | None, placement: Any) -> None:
    if run_dir is None:
        return
    from results_schema.io import append_jsonl

    append_jsonl(run_dir / f"{placement.phase}-placements.jsonl", placement)


def _placement(sc: ScheduledCase, *, attempt: int, executor: str, sharing: str, info: Mapping[str, Any],
               outcome: str = "finished", cause: str | None = None) -> Any:
    from results_schema.placement import CasePlacement

    c = sc.case
    return CasePlacement(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
                         attempt=attempt, kind=_kind(sc), executor=executor, sharing=sharing,
                         hostname=info["hostname"], node_id=info["node_id"], node_ip=info.get("node_ip"),
                         device=info["device"], accelerator_ids=tuple(info.get("accelerator_ids", ())),
                         start_unix_s=info["start_unix_s"], end_unix_s=max(info["end_unix_s"], info["start_unix_s"]),
                         times_from=info.get("times_from", "node"), outcome=outcome, cause=cause, pid=info.get("pid"))


class LocalExecutor:
    """Runs cases sequentially in this process's host."""

    name = "local"

    def __init__(self, sleep: Callable[[float], None] = time.sleep, run_dir: Path | None = None) -> None:
        self._sleep = sleep
        self._run_dir = run_dir
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0  # spawn + reap time outside the case's own wall time

    def prepare(self, cfg: Mapping[str, Any], identity: Any) -> None:
        """Nothing to do: the driver's identity gate covered this host."""

    def health_gate(self, runtime: Mapping[str, Any], out_path: Path) -> None:
        """The runtime's health command on this host (``runners.matrix.health_gate``)."""
        from runners.gates import health_gate

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
            outcome = _launch(spec)
            info = {"hostname": host, "node_id": f"local:{host}", "device": spec.accelerator or "cpu",
                    "start_unix_s": t_wall, "end_unix_s": time.time(), "pid": outcome.pid}
            _append_placement(self._run_dir, _placement(sc, attempt=0, executor="local", sharing="sequential",
                                                        info=info))
            self.launch_overhead_s += (time.monotonic() - t) - outcome.wall_s
            if not on_done(sc, spec, outcome):
                return
            raise_if_interrupted()  # a SIGINT/SIGTERM whose exception was swallowed (see launch)

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------- Ray task bodies


def _node_info() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    ids = ctx.get_accelerator_ids()
    granted = {k: [str(i) for i in v] for k, v in ids.items() if v}
    device = ";".join(f"{k}:{','.join(v)}" for k, v in sorted(granted.items())) or "cpu"
    return {"hostname": socket.gethostname(), "node_id": ctx.get_node_id(), "device": device,
            "accelerator_ids": tuple(i for v in granted.values() for i in v)}


def _ray_case(spec: LaunchSpec) -> tuple[ProcessOutcome, dict[str, Any]]:
    """Body of the Ray task: one fresh case process inside the worker, then the cooldown.

    Returns the outcome and where/when it ran (node clock, Unix seconds).
    """
    info = _node_info()
    info["start_unix_s"] = time.time()
    outcome = _launch(spec)
    info["end_unix_s"] = time.time()
    info["pid"] = outcome.pid
    if spec.cooldown_s > 0:
        time.sleep(spec.cooldown_s)
    return outcome, info


def _ray_node_identity(pins: Sequence[Mapping[str, Any]], model_sums: str | None) -> dict[str, Any]:
    """Body of the per-node identity task: the driver's pins, evaluated in this node's runtime."""
    from runners.identity import REPO_ROOT, case_code_sha256, check_pins, sha256_file, tree_sha256

    offload = tree_sha256(REPO_ROOT / "offload")
    checks = []
    for p in pins:
        checks += check_pins(p, model_dir=None, model_pin=None, model_revision=None, observed_revision=None,
                             offload_pin=None, offload_actual=offload)
    sums = Path(model_sums) if model_sums else None
    return {"hostname": socket.gethostname(), "python_version": sys.version,
            "pins": [c.model_dump(mode="json") for c in checks], "offload_tree_sha256": offload,
            "case_code_sha256": case_code_sha256(),
            "model_sha256sums_sha256": sha256_file(sums) if sums is not None and sums.is_file() else None}


def _ray_health(cmd: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Body of the per-node health task: ``(exit code, output, hostname)``."""
    import subprocess

    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
        return r.returncode, r.stdout + r.stderr, socket.gethostname()
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found\n", socket.gethostname()
    except subprocess.TimeoutExpired:
        return 124, "health command timed out\n", socket.gethostname()


# ----------------------------------------------------------------------------- Ray executor


@dataclass
class _Running:
    sc: ScheduledCase
    spec: LaunchSpec
    attempt: int
    node_id: str
    submitted_unix_s: float


class RayExecutor:
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
        if address is None:
            ray.init(num_cpus=head_num_cpus, include_dashboard=False, object_store_memory=object_store_memory_bytes,
                     _node_ip_address="127.0.0.1", runtime_env=runtime_env, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, configure_logging=False)
        self.num_cpus_per_case = num_cpus_per_case
        self.sharing = performance_sharing
        self.on_node_failure = on_node_failure
        self.max_node_retries = max_node_retries
        self._run_dir = run_dir
        self._remote = ray.remote(_ray_case)
        self._excluded: set[str] = set()
        self.cooldown_total_s = 0.0
        self.launch_overhead_s = 0.0

    # -- nodes

    def _alive_nodes(self) -> dict[str, dict[str, Any]]:
        return {n["NodeID"]: n for n in self._ray.nodes() if n.get("Alive")}

    def _demand(self, accelerator: str | None) -> tuple[str, float]:
        if accelerator:
            return accelerator, 1.0
        return "CPU", self.num_cpus_per_case

    def _capacity(self, node: Mapping[str, Any], accelerator: str | None, kind: str) -> int:
        """How many cases of this kind the driver lets run on ``node`` at once (0 = cannot run them)."""
        res, need = self._demand(accelerator)
        have = float(node.get("Resources", {}).get(res, 0.0))
        fits = int(have // need) if need > 0 else 1 << 30
        if fits < 1:
            return 0
        if kind == "performance" and self.sharing == "per_node":
            return 1
        return fits

    def _affinity(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    def _options(self, accelerator: str | None) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.num_cpus_per_case, "max_retries": 0}
        if accelerator == "GPU":
            opts["num_gpus"] = 1
        elif accelerator:
            opts["resources"] = {accelerator: 1}
        return opts

    # -- gates

    def prepare(self, cfg: Mapping[str, Any], identity: Any) -> None:
        """Identity gate on every alive node that can run this run's cases; writes ``cluster-manifest.jsonl``.

        A node passes when every pin is ok and every observed value (pins, ``offload/`` tree,
        case code, model ``SHA256SUMS``) equals the driver's observation.

        Raises:
            runners.matrix.RunnerError: (identity, exit 3) a node failed and ``on_node_failure=stop``,
                or no node is left to run the cases.
        """
        from results_schema.manifest import PinCheck
        from results_schema.placement import NodeIdentity
        from runners.identity import case_code_sha256
        from runners.config import runtimes_used
        from runners.errors import EXIT_IDENTITY, RunnerError

        ray = self._ray
        accels = {rt.get("ray_resource") for rt in runtimes_used(cfg)}
        nodes = {nid: n for nid, n in self._alive_nodes().items()
                 if any(self._capacity(n, a, "accuracy") > 0 for a in accels)}
        if not nodes:
            raise RunnerError(f"identity gate: no alive Ray node offers {sorted(map(str, accels))} with "
                              f"{self.num_cpus_per_case} CPU(s) per case", EXIT_IDENTITY)
        pins = [dict(rt.get("pins") or {}) for rt in runtimes_used(cfg)]
        sums = str(Path(identity.model_dir) / "SHA256SUMS")
        task = ray.remote(_ray_node_identity)
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
                got = {"hostname": n.get("NodeManagerHostname", "?"), "python_version": "?", "pins": [],
                       "offload_tree_sha256": "?", "case_code_sha256": "?", "model_sha256sums_sha256": None,
                       "error": f"{type(exc).__name__}: {exc}"}
            checks = tuple(PinCheck(**c) for c in got["pins"])
            problems = [got["error"]] if "error" in got else []
            problems += [f"pin {c.kind} {c.name!r}: expected {c.expected}, observed {c.actual!r}" for c in checks
                         if not c.ok]
            if "error" not in got:
                seen = [(c.kind, c.name, c.actual) for c in checks]
                if seen != driver_pins:
                    problems.append(f"pins observed {seen} differ from the driver's {driver_pins}")
                if got["offload_tree_sha256"] != identity.offload_tree:
                    problems.append("offload/ tree differs from the driver's")
                if got["case_code_sha256"] != driver_code:
                    problems.append("case code (offload/, runners/, results_schema/) differs from the driver's")
                if got["model_sha256sums_sha256"] != identity.model_sums:
                    problems.append(f"model SHA256SUMS at {sums}: {got['model_sha256sums_sha256']} != driver's "
                                    f"{identity.model_sums}")
            action = "used" if not problems else ("excluded" if self.on_node_failure == "exclude" else "stopped_run")
            if problems:
                failed.append(f"{got['hostname']} ({nid[:12]}): {'; '.join(problems)}")
                self._excluded.add(nid)
            lines.append(NodeIdentity(checked_utc=now, node_id=nid, hostname=got["hostname"],
                                      node_ip=n.get("NodeManagerAddress"),
                                      resources={k: float(v) for k, v in (n.get("Resources") or {}).items()},
                                      python_version=got["python_version"], pins=checks,
                                      offload_tree_sha256=got["offload_tree_sha256"],
                                      case_code_sha256=got["case_code_sha256"],
                                      model_sha256sums_sha256=got["model_sha256sums_sha256"],
                                      problems=tuple(problems), action=action))
        if self._run_dir is not None:
            from results_schema.io import append_jsonl

            for line in lines:
                append_jsonl(self._run_dir / "cluster-manifest.jsonl", line)
        if failed and self.on_node_failure == "stop":
            raise RunnerError("identity gate (cluster): node(s) differ from the driver: " + " | ".join(failed)
                              + " (executor.ray.on_node_failure=exclude leaves them out)", EXIT_IDENTITY)
        if len(self._excluded) == len(nodes):
            raise RunnerError("identity gate (cluster): every node failed: " + " | ".join(failed), EXIT_IDENTITY)

    def health_gate(self, runtime: Mapping[str, Any], out_path: Path) -> None:
        """Run the runtime's health command on every node that can run it (a Ray task per node).

        Output per node in ``<out_path stem>-<node id 12>.txt``. A failing node stops the run
        (``on_node_failure=stop``) or is excluded.

        Raises:
            runners.matrix.RunnerError: (health, exit 42) a node failed and the run stops, or none is left.
        """
        from runners.errors import EXIT_HEALTH, RunnerError

        cmd = runtime.get("health_command")
        if not cmd:
            return
        ray = self._ray
        acc = runtime.get("ray_resource")
        nodes = {nid: n for nid, n in self._alive_nodes().items()
                 if nid not in self._excluded and self._capacity(n, acc, "accuracy") > 0}
        task = ray.remote(_ray_health)
        timeout = float(runtime.get("health_timeout_s", 60))
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
            raise RunnerError(f"health gate for runtime {runtime['name']!r} failed on " + "; ".join(failed),
                              EXIT_HEALTH)

    # -- cases

    def _pick(self, sc: ScheduledCase, spec: LaunchSpec, busy: Mapping[str, int], nodes: Mapping[str, Any],
              avoid: set[str]) -> str | None:
        """Node for the next case, or None (wait). ``avoid``: nodes that lost this case; used only when no
        other node could ever run it (a lost node may still be listed alive until the GCS notices)."""
        kind = _kind(sc)
        able = [nid for nid in sorted(nodes) if nid not in self._excluded
                and self._capacity(nodes[nid], spec.accelerator, kind) >= 1]
        if any(nid not in avoid for nid in able):
            able = [nid for nid in able if nid not in avoid]
        best = None
        for nid in able:
            if kind == "performance" and busy.get(nid, 0) >= self._capacity(nodes[nid], spec.accelerator, kind):
                continue
            if best is None or busy.get(nid, 0) < best[0]:
                best = (busy.get(nid, 0), nid)
        return None if best is None else best[1]

    def execute(self, items: Sequence[tuple[ScheduledCase, LaunchSpec]], on_done: OnDone,
                on_start: Callable[[ScheduledCase], None] | None = None) -> None:
        ray = self._ray
        queue: deque[tuple[ScheduledCase, LaunchSpec, int, set[str]]] = deque((sc, spec, 0, set()) for sc, spec in items)
        running: dict[Any, _Running] = {}
        busy: dict[str, int] = {}
        try:
            while queue or running:
                nodes = self._alive_nodes()
                while queue:
                    sc, spec, attempt, avoid = queue[0]
                    nid = self._pick(sc, spec, busy, nodes, avoid)
                    if nid is None:
                        break
                    queue.popleft()
                    opts = {**self._options(spec.accelerator), "scheduling_strategy": self._affinity(nid)}
                    ref = self._remote.options(**opts).remote(spec)
                    running[ref] = _Running(sc, spec, attempt, nid, time.time())
                    busy[nid] = busy.get(nid, 0) + 1
                    if on_start is not None and attempt == 0:
                        on_start(sc)
                if not running:  # nothing runs and the head of the queue fits no node
                    sc, spec, attempt, _ = queue.popleft()
                    msg = (f"no alive, gated Ray node can run case {sc.case.phase}/{sc.case.label} r{sc.repeat} "
                           f"(needs {self._demand(spec.accelerator)}; excluded {sorted(self._excluded)})")
                    if not on_done(sc, spec, ProcessOutcome(None, None, False, 0.0, None, launch_error=msg)):
                        return
                    continue
                done, _ = ray.wait(list(running), num_returns=1, timeout=5.0)
                for ref in done:
                    r = running.pop(ref)
                    busy[r.node_id] -= 1
                    stop = self._finish(ref, r, queue, on_done)
                    if stop:
                        return
        finally:
            for ref in running:
                ray.cancel(ref, force=False)  # the task's context manager reaps its process group

    def _finish(self, ref: Any, r: _Running, queue: deque, on_done: OnDone) -> bool:
        """Handle one finished task; returns True to stop launching."""
        ray = self._ray
        try:
            outcome, info = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the task body raised: not a node fault
            info = self._driver_info(r)
            cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            _append_placement(self._run_dir, _placement(r.sc, attempt=r.attempt, executor="ray", sharing=self.sharing,
                                                        info=info, outcome="task_error", cause=cause))
            return not on_done(r.sc, r.spec, ProcessOutcome(None, None, False, info["end_unix_s"] - info["start_unix_s"],
                                                            None, launch_error=f"Ray task failed: {cause}"))
        except ray.exceptions.RayError as exc:  # node or worker lost (raylet killed, host down, OOM kill)
            info = self._driver_info(r)
            alive = r.node_id in self._alive_nodes() and not isinstance(exc, ray.exceptions.NodeDiedError)
            cause = (f"{type(exc).__name__}: node {info['hostname']} {r.node_id[:12]} "
                     f"{'alive (worker lost)' if alive else 'lost'}: {str(exc).splitlines()[0] if str(exc) else ''}")
            _append_placement(self._run_dir, _placement(r.sc, attempt=r.attempt, executor="ray", sharing=self.sharing,
                                                        info=info, outcome="node_lost", cause=cause))
            if r.attempt < self.max_node_retries:
                self._set_aside(r)
                queue.appendleft((r.sc, r.spec, r.attempt + 1, {r.node_id}))
                return False
            msg = (f"Ray node lost mid-case {self.max_node_retries + 1} time(s); last: {cause} "
                   f"(executor.ray.max_node_retries={self.max_node_retries})")
            return not on_done(r.sc, r.spec, ProcessOutcome(None, None, False, info["end_unix_s"] - info["start_unix_s"],
                                                            None, launch_error=msg))
        info = {**info, "node_ip": self._alive_nodes().get(info["node_id"], {}).get("NodeManagerAddress")}
        _append_placement(self._run_dir, _placement(r.sc, attempt=r.attempt, executor="ray", sharing=self.sharing,
                                                    info=info))
        if r.spec.cooldown_s > 0:
            self.cooldown_total_s += r.spec.cooldown_s
        return not on_done(r.sc, r.spec, outcome)

    def _set_aside(self, r: _Running) -> None:
        """Move the lost attempt's log / evidence / record to ``quarantine/node-lost/`` (never counted)
        so the retry starts with fresh files (the launcher refuses to overwrite a case log)."""
        if self._run_dir is None:
            return
        import shutil

        qdir = self._run_dir / "quarantine" / "node-lost" / f"{r.sc.case.phase}-{r.sc.stem}-attempt{r.attempt}"
        for p in (Path(r.spec.log_path), Path(r.spec.evidence_path), Path(r.spec.record_path)):
            if p.exists():
                try:
                    dest = qdir / p.relative_to(self._run_dir)
                except ValueError:
                    dest = qdir / p.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(p), str(dest))

    def _driver_info(self, r: _Running) -> dict[str, Any]:
        node = next((n for n in self._ray.nodes() if n["NodeID"] == r.node_id), {})
        return {"hostname": node.get("NodeManagerHostname", "?"), "node_id": r.node_id,
                "node_ip": node.get("NodeManagerAddress"), "device": r.spec.accelerator or "cpu",
                "start_unix_s": r.submitted_unix_s, "end_unix_s": time.time(), "times_from": "driver"}

    def close(self) -> None:
        """Stop the private head, or disconnect this driver from an existing cluster (which keeps running)."""
        self._ray.shutdown()


def make_executor(cfg: Mapping[str, Any], repo_root: Path, run_dir: Path | None = None) -> LocalExecutor | RayExecutor:
    """Executor for an ``ExecutorConfig`` (plain dict); ``run_dir`` receives the placement evidence.

    Raises:
        ValueError: unknown executor name or Ray option value (naming the value and what is allowed).
    """
    name = cfg.get("name", "local")
    if name == "local":
        return LocalExecutor(run_dir=run_dir)
    if name == "ray":
        r = cfg.get("ray", {}) or {}
        return RayExecutor(address=r.get("address"), num_cpus_per_case=float(r.get("num_cpus_per_case", 1.0)),
                           head_num_cpus=r.get("head_num_cpus"),
                           object_store_memory_bytes=int(r.get("object_store_memory_bytes", 100_000_000)),
                           repo_root=repo_root, performance_sharing=str(r.get("performance_sharing", "per_node")),
                           on_node_failure=str(r.get("on_node_failure", "stop")),
                           max_node_retries=int(r.get("max_node_retries", 2)), run_dir=run_dir)
    raise ValueError(f"executor.name {name!r} must be 'local' or 'ray'")


def check_executor_config(cfg: Mapping[str, Any]) -> str | None:
    """The first invalid executor setting as a one-line message naming the value and what is allowed, else None."""
    name = cfg.get("name", "local")
    if name not in ("local", "ray"):
        return f"executor.name {name!r} must be 'local' or 'ray'"
    r = cfg.get("ray", {}) or {}
    sharing = r.get("performance_sharing", "per_node")
    if sharing not in SHARING_MODES:
        return f"executor.ray.performance_sharing {sharing!r} must be one of {', '.join(SHARING_MODES)}"
    action = r.get("on_node_failure", "stop")
    if action not in NODE_FAILURE_ACTIONS:
        return f"executor.ray.on_node_failure {action!r} must be one of {', '.join(NODE_FAILURE_ACTIONS)}"
    retries = r.get("max_node_retries", 2)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        return f"executor.ray.max_node_retries {retries!r} must be an integer >= 0"
    return None
