"""Bodies of the Ray tasks that run on a node (one case, the identity gate, the health command).

What is modelled: ``ray_case`` (one fresh case process inside the worker, then the
cooldown; returns the outcome and where/when it ran, node clock), ``ray_node_identity``
(the driver's pins evaluated in the node's runtime), ``ray_health`` (the runtime's health
command on the node), and ``node_problems`` (how a node's identity answer differs from
the driver's observation).

What is deliberately not modelled: choosing the node (``runners.launching.ray_scheduling``).
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from conf.schema_stack import PinsConfig
from results_schema.records.manifest import PinCheck
from results_schema.records.placement import NodeIdentity

from runners.cases import LaunchSpec
from runners.launching.executor_base import launch_case
from runners.incase.process_group import ProcessOutcome
from runners.identity.case_code import case_code_sha256
from runners.identity.pin_checks import check_pins
from runners.identity.probe import sha256_file, tree_sha256
from runners.paths import REPO_ROOT

def node_info() -> dict[str, Any]:
    """Where this task runs: hostname, Ray node id, the accelerators granted to it (``device``, ids)."""
    import ray

    ctx = ray.get_runtime_context()
    ids = ctx.get_accelerator_ids()
    granted = {k: [str(i) for i in v] for k, v in ids.items() if v}
    device = ";".join(f"{k}:{','.join(v)}" for k, v in sorted(granted.items())) or "cpu"
    return {"hostname": socket.gethostname(), "node_id": ctx.get_node_id(), "device": device,
            "accelerator_ids": tuple(i for v in granted.values() for i in v)}


def ray_case(spec: LaunchSpec) -> tuple[ProcessOutcome, dict[str, Any]]:
    """Body of the Ray task: one fresh case process inside the worker, then the cooldown.

    Returns the outcome and where/when it ran (node clock, Unix seconds).
    """
    info = node_info()
    info["start_unix_s"] = time.time()
    outcome = launch_case(spec)
    info["end_unix_s"] = time.time()
    info["pid"] = outcome.pid
    info["times_from"] = "node"
    info["node_ip"] = None  # the driver fills it from ray.nodes()
    if spec.cooldown_s > 0:
        time.sleep(spec.cooldown_s)
    return outcome, info


def ray_node_identity(pins: Sequence[PinsConfig], model_sums: str | None) -> dict[str, Any]:
    """Body of the per-node identity task: the driver's pins, evaluated in this node's runtime."""

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


def ray_health(cmd: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Body of the per-node health task: ``(exit code, output, hostname)``."""
    import subprocess

    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
        return r.returncode, r.stdout + r.stderr, socket.gethostname()
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found\n", socket.gethostname()
    except subprocess.TimeoutExpired:
        return 124, "health command timed out\n", socket.gethostname()


def unanswered(node: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
    """The identity answer of a node that could not answer (it fails its gate)."""
    return {"hostname": node.get("NodeManagerHostname", "?"), "python_version": "?", "pins": [],
            "offload_tree_sha256": "?", "case_code_sha256": "?", "model_sha256sums_sha256": None,
            "error": f"{type(exc).__name__}: {exc}"}


def node_problems(got: Mapping[str, Any], checks: Sequence[PinCheck], *, driver_pins: list[tuple[str, str, Any]],
                  driver_code: str, identity: Any, sums: str) -> list[str]:
    """How a node's identity answer (``ray_node_identity``) differs from the driver's; [] when it agrees.

    Args:
        got: the node's answer; ``checks``: its pins as ``PinCheck``.
        driver_pins: ``(kind, name, actual)`` of the driver's pins; ``driver_code``: its case code SHA-256.
        identity: the driver's identity gate (``offload_tree``, ``model_sums``); ``sums``: the model's SHA256SUMS path.
    """
    problems = [got["error"]] if "error" in got else []
    problems += [f"pin {c.kind} {c.name!r}: expected {c.expected}, observed {c.actual!r}" for c in checks
                 if not c.ok]
    if "error" in got:
        return problems
    seen = [(c.kind, c.name, c.actual) for c in checks]
    if seen != driver_pins:
        problems.append(f"pins observed {seen} differ from the driver's {driver_pins}")
    if got["offload_tree_sha256"] != identity.offload_tree:
        problems.append("offload/ tree differs from the driver's")
    if got["case_code_sha256"] != driver_code:
        problems.append("case code (the project files a case process imports) differs from the driver's")
    if got["model_sha256sums_sha256"] != identity.model_sums:
        problems.append(f"model SHA256SUMS at {sums}: {got['model_sha256sums_sha256']} != driver's "
                        f"{identity.model_sums}")
    return problems


def identity_line(nid: str, node: Mapping[str, Any], got: Mapping[str, Any], checks: tuple[Any, ...],
                  problems: list[str], *, checked_utc: str,
                  on_failure: Literal["excluded", "stopped_run"]) -> NodeIdentity:
    """The ``cluster-manifest.jsonl`` line of one node (``action`` is ``used`` when ``problems`` is empty)."""
    return NodeIdentity(checked_utc=checked_utc, node_id=nid, hostname=got["hostname"],
                        node_ip=node.get("NodeManagerAddress"),
                        resources={k: float(v) for k, v in (node.get("Resources") or {}).items()},
                        python_version=got["python_version"], pins=checks,
                        offload_tree_sha256=got["offload_tree_sha256"],
                        case_code_sha256=got["case_code_sha256"],
                        model_sha256sums_sha256=got["model_sha256sums_sha256"],
                        problems=tuple(problems), action=on_failure if problems else "used")
