"""``RayExecutor``'s driver-side placement against a scripted stand-in for the Ray API (fast, no cluster).

The real cluster is exercised in ``test_ray_two_nodes.py``; here the scheduling decisions
are checked deterministically: which node each task is pinned to, how many run at once
per node, and the retry after a lost node.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

import ray  # noqa: E402

from conf.schema import ConfigError  # noqa: E402
from conf.schema_stack import ExecutorConfig  # noqa: E402
from conf.typed import validate_as  # noqa: E402
from results_schema.codec.io import read_jsonl  # noqa: E402
from results_schema.records.placement import CasePlacement  # noqa: E402
from runners.cases import LaunchSpec  # noqa: E402
from runners.launching.executors import RayExecutor, check_executor_config  # noqa: E402
from runners.incase.process_group import ProcessOutcome  # noqa: E402


class FakeRay:
    """Tasks finish in submission order, one per ``wait``; ``lose`` names (node, call) pairs that die."""

    exceptions = ray.exceptions

    def __init__(self, nodes: dict[str, dict[str, float]], lose: set[str] = frozenset()) -> None:
        self._nodes = {nid: {"NodeID": nid, "Alive": True, "Resources": r, "NodeManagerHostname": f"h-{nid}",
                             "NodeManagerAddress": "127.0.0.1"} for nid, r in nodes.items()}
        self.lose = set(lose)
        self.submitted: list[tuple[str, str]] = []  # (label, node)
        self.max_parallel: dict[str, int] = {}
        self._running: dict[int, tuple[str, str]] = {}
        self._n = 0
        self.clock = 0.0

    def nodes(self):
        return list(self._nodes.values())

    def remote(self, fn):
        fake = self

        class _R:
            def options(self, **opts):
                node = opts["scheduling_strategy"].node_id
                return SimpleNamespace(remote=lambda spec: fake._submit(spec, node))

        return _R()

    def _submit(self, spec: LaunchSpec, node: str) -> int:
        self._n += 1
        label = Path(spec.log_path).stem
        self._running[self._n] = (label, node)
        self.submitted.append((label, node))
        here = sum(1 for _l, n in self._running.values() if n == node)
        self.max_parallel[node] = max(self.max_parallel.get(node, 0), here)
        return self._n

    def wait(self, refs, num_returns=1, timeout=None):
        return [min(refs)], []

    def get(self, ref, timeout=None):
        label, node = self._running.pop(ref)
        if label in self.lose:
            self.lose.discard(label)
            self._nodes[node]["Alive"] = getattr(self, "keep_alive", False)
            raise ray.exceptions.NodeDiedError(f"node {node} died")
        self.clock += 1.0
        info = {"hostname": f"h-{node}", "node_id": node, "node_ip": None, "device": "cpu", "accelerator_ids": (),
                "start_unix_s": self.clock, "end_unix_s": self.clock + 0.5, "times_from": "node", "pid": 1}
        return ProcessOutcome(0, None, False, 0.5, 1), info

    def cancel(self, ref, force=False):
        pass


A, B = "a" * 56, "b" * 56  # Ray node ids are 28-byte hex


def _executor(fake: FakeRay, tmp: Path, sharing: str = "per_node", retries: int = 2) -> RayExecutor:
    ex = RayExecutor.__new__(RayExecutor)
    ex._ray, ex._owns_cluster, ex.num_cpus_per_case, ex.sharing = fake, False, 1.0, sharing
    ex.on_node_failure, ex.max_node_retries, ex._run_dir, ex._excluded = "stop", retries, tmp, set()
    ex._remote = fake.remote(None)
    ex.cooldown_total_s = ex.launch_overhead_s = 0.0
    return ex


def _items(tmp: Path, labels, timed: bool = True):
    """Cases whose timings are their result (placement kind ``performance``), or not (``accuracy``)."""
    out = []
    for i, lb in enumerate(labels):
        case = SimpleNamespace(phase="p", label=lb, implementation="baseline" if lb == "baseline" else "current",
                               timed=timed)
        spec = LaunchSpec(argv=("x",), env={}, cwd=".", log_path=str(tmp / f"{lb}.log"), evidence_path="e",
                          record_path="r", timeout_s=1, kill_grace_s=1, cooldown_s=0, accelerator=None)
        out.append((SimpleNamespace(case=case, repeat=0, index=i, stem=f"{lb}-r0"), spec))
    return out


def test_per_node_runs_one_performance_case_per_node_even_with_free_cpus(tmp_path: Path) -> None:
    fake = FakeRay({A: {"CPU": 4}, B: {"CPU": 4}})
    done = []
    _executor(fake, tmp_path).execute(_items(tmp_path, ["baseline", "g4", "g8", "g2"]),
                                      lambda sc, spec, out: done.append(sc.case.label) or True)
    assert sorted(done) == ["baseline", "g2", "g4", "g8"]
    assert fake.max_parallel == {A: 1, B: 1}
    ps = read_jsonl(tmp_path / "p-placements.jsonl", CasePlacement)
    assert {p.sharing for p in ps} == {"per_node"} and len(ps) == 4


def test_per_accelerator_and_accuracy_fill_the_node(tmp_path: Path) -> None:
    fake = FakeRay({A: {"CPU": 3}})
    _executor(fake, tmp_path, sharing="per_accelerator").execute(_items(tmp_path, ["baseline", "g4", "g8"]),
                                                                 lambda *a: True)
    assert fake.max_parallel == {A: 3}
    fake2 = FakeRay({A: {"CPU": 1}})  # accuracy: submitted freely, Ray queues by resources
    _executor(fake2, tmp_path / "acc").execute(_items(tmp_path, ["baseline", "g4"], timed=False),
                                               lambda *a: True)
    assert fake2.max_parallel == {A: 2}


def test_lost_node_is_an_attempt_with_cause_and_the_case_moves(tmp_path: Path) -> None:
    fake = FakeRay({A: {"CPU": 1}, B: {"CPU": 1}}, lose={"baseline"})
    outs = {}
    _executor(fake, tmp_path).execute(_items(tmp_path, ["baseline", "g4"]),
                                      lambda sc, spec, out: outs.setdefault(sc.case.label, out) is out)
    assert outs["baseline"].exit_code == 0  # retried and finished
    ps = read_jsonl(tmp_path / "p-placements.jsonl", CasePlacement)
    lost = [p for p in ps if p.outcome == "node_lost"]
    assert len(lost) == 1 and lost[0].label == "baseline" and "NodeDiedError" in lost[0].cause
    again = [p for p in ps if p.label == "baseline" and p.outcome == "finished"]
    assert again[0].attempt == 1 and again[0].node_id != lost[0].node_id


def test_retries_are_bounded_then_a_launch_error(tmp_path: Path) -> None:
    fake = FakeRay({A: {"CPU": 1}}, lose={"baseline"})
    outs = {}
    _executor(fake, tmp_path, retries=0).execute(_items(tmp_path, ["baseline"]),
                                                 lambda sc, spec, out: outs.setdefault(sc.case.label, out) is out)
    assert outs["baseline"].launch_error and "max_node_retries=0" in outs["baseline"].launch_error


@pytest.mark.parametrize("cfg,needle", [({"name": "ray", "ray": {"performance_sharing": "shared"}},
                                         "ray.performance_sharing='shared': Input should be 'per_node' or"),
                                        ({"name": "ray", "ray": {"on_node_failure": "skip"}},
                                         "ray.on_node_failure='skip': Input should be 'stop' or 'exclude'")])
def test_bad_ray_modes_are_refused_by_the_schema_naming_key_and_allowed_values(cfg, needle) -> None:
    with pytest.raises(ConfigError) as exc:
        validate_as(ExecutorConfig, cfg)
    assert needle in str(exc.value)


@pytest.mark.parametrize(("ray", "needle"), [
    ({"max_node_retries": -1}, "executor.ray.max_node_retries=-1: must be a whole number >= 0"),
    ({"num_cpus_per_case": -1.0}, "executor.ray.num_cpus_per_case=-1.0: must be a finite number > 0 (CPUs)"),
    ({"num_cpus_per_case": 0.0}, "executor.ray.num_cpus_per_case=0.0: must be a finite number > 0 (CPUs)"),
    ({"num_cpus_per_case": float("nan")}, "executor.ray.num_cpus_per_case=nan: must be a finite number > 0 (CPUs)"),
    ({"head_num_cpus": 0}, "executor.ray.head_num_cpus=0: must be a whole number >= 1"),
    ({"object_store_memory_bytes": -5}, "executor.ray.object_store_memory_bytes=-5: must be a whole number >= 1 (bytes)"),
])
def test_out_of_range_ray_numbers_are_named(ray: dict, needle: str) -> None:
    """Ray would refuse them only after the run directory and its head exist (a traceback, exit 1)."""
    msg = check_executor_config(validate_as(ExecutorConfig, {"name": "ray", "ray": ray}))
    assert msg is not None and needle in msg
    assert check_executor_config(validate_as(ExecutorConfig, {"name": "ray", "ray": {}})) is None


def test_retry_waits_for_another_node_rather_than_the_one_that_lost_it(tmp_path: Path) -> None:
    fake = FakeRay({A: {"CPU": 1}, B: {"CPU": 1}}, lose={"g4"})
    fake.keep_alive = True  # the GCS has not noticed yet: the lost node is still listed alive
    _executor(fake, tmp_path).execute(_items(tmp_path, ["baseline", "g4", "g8"]), lambda *a: True)
    g4 = [n for lb, n in fake.submitted if lb == "g4"]
    assert len(g4) == 2 and g4[0] != g4[1]
