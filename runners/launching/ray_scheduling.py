"""Driver side of the Ray executor: which node runs the next case, and what a finished task means.

What is modelled (see ``runners.launching.executors`` for the placement rule and the faults):
node capacity per case kind (``per_node``: one performance case per node at a time;
``per_accelerator``: one per accelerator, or per ``num_cpus_per_case`` CPUs), the Ray
task options (hard ``NodeAffinitySchedulingStrategy``, ``num_gpus`` or a custom
resource), the queue of cases (least-busy node first, a node that lost the case avoided
while another can run it), and a finished task: its outcome, a task error (not
retried) or a lost node (the attempt is set aside in ``quarantine/node-lost/`` and the
case queued again, at most ``max_node_retries`` times). Every attempt gets its
``CasePlacement`` line.

What is deliberately not modelled: starting Ray and the gates (``runners.launching.executors``),
the task bodies (``runners.launching.ray_tasks``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from results_schema.records.base import ExecutorKind
from results_schema.records.placement import Sharing
from runners.cases import LaunchSpec
from runners.launching.executor_base import OnDone, append_placement, case_kind, placement
from runners.incase.process_group import ProcessOutcome
from runners.cases import ScheduledCase


@dataclass
class _Running:
    """A case whose Ray task was submitted: on which node, which attempt, since when (driver clock)."""

    sc: ScheduledCase
    spec: LaunchSpec
    attempt: int
    node_id: str
    submitted_unix_s: float


def _not_run(info: Mapping[str, Any], launch_error: str) -> ProcessOutcome:
    """The outcome of a case whose Ray task did not run it to the end (``launch_error`` names why)."""
    return ProcessOutcome(None, None, False, info["end_unix_s"] - info["start_unix_s"], None,
                          launch_error=launch_error)


class RayScheduler:
    """Node choice and task bookkeeping of ``runners.launching.executors.RayExecutor`` (its base class)."""

    _ray: Any
    _remote: Any
    _run_dir: Path | None
    _excluded: set[str]
    num_cpus_per_case: float
    sharing: Sharing
    max_node_retries: int
    cooldown_total_s: float

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

    # -- cases

    def _pick(self, sc: ScheduledCase, spec: LaunchSpec, busy: Mapping[str, int], nodes: Mapping[str, Any],
              avoid: set[str]) -> str | None:
        """Node for the next case, or None (wait). ``avoid``: nodes that lost this case; used only when no
        other node could ever run it (a lost node may still be listed alive until the GCS notices)."""
        kind = case_kind(sc)
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
        queue: deque[tuple[ScheduledCase, LaunchSpec, int, set[str]]] = deque(
            (sc, spec, 0, set()) for sc, spec in items)
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
            append_placement(self._run_dir, placement(r.sc, attempt=r.attempt, executor=ExecutorKind.ray,
                                                      sharing=self.sharing, info=info, outcome="task_error",
                                                      cause=cause))
            return not on_done(r.sc, r.spec, _not_run(info, f"Ray task failed: {cause}"))
        except ray.exceptions.RayError as exc:  # node or worker lost (raylet killed, host down, OOM kill)
            info = self._driver_info(r)
            alive = r.node_id in self._alive_nodes() and not isinstance(exc, ray.exceptions.NodeDiedError)
            cause = (f"{type(exc).__name__}: node {info['hostname']} {r.node_id[:12]} "
                     f"{'alive (worker lost)' if alive else 'lost'}: {str(exc).splitlines()[0] if str(exc) else ''}")
            append_placement(self._run_dir, placement(r.sc, attempt=r.attempt, executor=ExecutorKind.ray,
                                                      sharing=self.sharing, info=info, outcome="node_lost",
                                                      cause=cause))
            if r.attempt < self.max_node_retries:
                self._set_aside(r)
                queue.appendleft((r.sc, r.spec, r.attempt + 1, {r.node_id}))
                return False
            msg = (f"Ray node lost mid-case {self.max_node_retries + 1} time(s); last: {cause} "
                   f"(executor.ray.max_node_retries={self.max_node_retries})")
            return not on_done(r.sc, r.spec, _not_run(info, msg))
        info = {**info, "node_ip": self._alive_nodes().get(info["node_id"], {}).get("NodeManagerAddress")}
        append_placement(self._run_dir, placement(r.sc, attempt=r.attempt, executor=ExecutorKind.ray,
                                                  sharing=self.sharing, info=info))
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
        node: dict[str, Any] = next((n for n in self._ray.nodes() if n["NodeID"] == r.node_id), {})
        return {"hostname": node.get("NodeManagerHostname", "?"), "node_id": r.node_id,
                "node_ip": node.get("NodeManagerAddress"), "device": r.spec.accelerator or "cpu",
                "accelerator_ids": (), "start_unix_s": r.submitted_unix_s, "end_unix_s": time.time(),
                "times_from": "driver", "pid": None}

