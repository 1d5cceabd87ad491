"""A two-node Ray cluster on this host for tests: two ``ray start --block`` processes.

Each node is started as its own ``ray start --block`` process in a fresh session, so
the test can kill exactly one node (every process of that session: raylet, object
manager, workers, and the case processes they launched) without touching any other
Ray instance on the machine. ``ray stop`` is never used: it would stop every Ray
process of this user, including other engineers' clusters.

Node A (head) advertises ``{"host_a": 1}``, node B ``{"host_b": 1}``; the two custom
resources stand for two hosts. GCS health checks are shortened (500 ms, 3 misses) so a
killed node is declared dead in about two seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
FAST_DEATH_ENV = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3",
                  "RAY_health_check_timeout_ms": "500", "RAY_health_check_initial_delay_ms": "0"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class Node:
    """One ``ray start --block`` process (a session leader) and everything it started."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.sid = self.proc.pid

    def processes(self) -> list[psutil.Process]:
        """Every live process of this node: the session's members and the descendants of ``ray start``."""
        out: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.proc.pid)
            out[root.pid] = root
            for c in root.children(recursive=True):
                out[c.pid] = c
        except psutil.NoSuchProcess:
            pass
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.sid:
                    out[p.pid] = p
                    for c in p.children(recursive=True):
                        out[c.pid] = c
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return list(out.values())

    def kill(self) -> None:
        """SIGKILL every process of the node (a host that lost power)."""
        for _ in range(3):
            procs = self.processes()
            if not procs:
                break
            for p in procs:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(procs, timeout=5)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


@contextmanager
def two_node_cluster(tmp: Path, *, num_cpus: int = 1, worker_env: dict[str, str] | None = None) -> Iterator[dict]:
    """Start head (``host_a``) and a second node (``host_b``); yield ``{"address", "head", "worker"}``.

    ``worker_env`` overrides variables of node B's environment (its workers inherit it).

    Always tears both nodes down (SIGKILL of each node's processes), also on failure.
    """
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="/tmp/rt")  # short: Ray's unix socket paths must stay < 108 bytes
    # Ray 2.5x: a ``ray start`` head enables token auth when ~/.ray/auth_token exists, but nodes and
    # drivers given an explicit address send the token only with RAY_AUTH_MODE=token.
    from ray._private.authentication.authentication_token_setup import (_get_default_token_path,
                                                                         generate_and_save_token)

    if not _get_default_token_path().is_file():
        generate_and_save_token()
    old_mode = os.environ.get("RAY_AUTH_MODE")
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    _enable_token_auth()  # RAY_AUTH_MODE=token here, and Ray's config (read at import) refreshed in this driver
    env = {**os.environ, **FAST_DEATH_ENV, "RAY_USAGE_STATS_ENABLED": "0"}
    # ``ray start`` turns 127.0.0.1 into this host's own address (services.resolve_ip_for_localhost);
    # use that address everywhere so the driver (which detects the same address) finds its raylet.
    from ray._private.services import get_node_ip_address

    ip = get_node_ip_address()
    common = ["--block", "--num-cpus", str(num_cpus), "--num-gpus", "0", "--node-ip-address", ip,
              "--object-store-memory", "80000000", "--disable-usage-stats"]
    nodes: list[Node] = []
    try:
        head = Node("host_a", [RAY, "start", "--head", "--port", str(port), "--include-dashboard=false",
                               "--temp-dir", temp_dir, "--resources", json.dumps({"host_a": 1}), *common],
                    env, tmp / "ray-head.log")
        nodes.append(head)
        address = f"{ip}:{port}"
        _wait_nodes(address, 1, head)
        worker = Node("host_b", [RAY, "start", "--address", address, "--resources", json.dumps({"host_b": 1}),
                                 *common], {**env, **(worker_env or {})}, tmp / "ray-worker.log")
        nodes.append(worker)
        _wait_nodes(address, 2, worker)
        yield {"address": address, "head": head, "worker": worker}
    finally:
        for n in reversed(nodes):
            n.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if old_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old_mode
        from ray._raylet import Config

        Config.initialize("")  # Ray's cached config reads the restored mode (a later test in this process)


def _wait_nodes(address: str, n: int, node: Node, timeout_s: float = 120.0) -> None:
    """Poll ``ray status`` until ``n`` nodes are alive."""
    deadline = time.monotonic() + timeout_s
    last = ""
    code = ("import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False);"
            "print(sum(1 for x in ray.nodes() if x['Alive']))")
    while time.monotonic() < deadline:
        if node.proc.poll() is not None:
            raise RuntimeError(f"ray start for {node.name} exited {node.proc.returncode}")
        try:
            r = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as exc:
            last = f"poll timed out: {exc}"
            continue
        if r.returncode == 0 and r.stdout.strip().splitlines() and int(r.stdout.strip().splitlines()[-1]) >= n:
            return
        last = (r.stderr or "")[-1500:]
        time.sleep(1.0)
    raise RuntimeError(f"Ray cluster at {address} did not reach {n} node(s) in {timeout_s} s; last error: {last}")


__all__ = ["two_node_cluster", "Node", "signal"]
