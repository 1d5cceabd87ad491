"""``runners.incase.serving.placement``: the bound worker keeps its CPUs, the front end and the client leave them.

Real processes (no engine): a stand-in server whose child binds itself to one CPU the way vLLM binds its
model worker; ``pin_front_end`` runs in a separate client process so this test process keeps its CPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move processes between")

_CLIENT = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from runners.incase.serving.placement import pin_front_end
    bind = sys.argv[1] == "bind"
    worker = ("import os, time; os.sched_setaffinity(0, {%d}); time.sleep(30)" % min(os.sched_getaffinity(0))
              if bind else "import time; time.sleep(30)")
    server = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', %r]); "
                               "time.sleep(30)" % worker])
    time.sleep(1.5)
    import psutil
    child = psutil.Process(server.pid).children()[0].pid
    pl = pin_front_end(server.pid)
    out = {"pinned": pl.pinned, "worker_pids": list(pl.worker_pids), "worker_cpus": list(pl.worker_cpus),
           "front_end_cpus": list(pl.front_end_cpus), "front_end_pids": list(pl.front_end_pids), "line": pl.line(),
           "child": child, "server": server.pid, "me": os.getpid(),
           "server_cpus": sorted(os.sched_getaffinity(server.pid)), "child_cpus": sorted(os.sched_getaffinity(child)),
           "my_cpus": sorted(os.sched_getaffinity(0))}
    for p in psutil.Process(server.pid).children(recursive=True) + [psutil.Process(server.pid)]:
        p.kill()
    print(json.dumps(out))
""")


def _client(mode: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    got = subprocess.run([sys.executable, "-c", _CLIENT, mode], capture_output=True, text=True, timeout=60, cwd=root,
                         env={**os.environ, "PYTHONPATH": root})
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_the_bound_worker_keeps_its_cpu_and_the_server_and_client_move_to_the_others():
    cpus = sorted(os.sched_getaffinity(0))
    got = _client("bind")
    assert got["pinned"] and got["worker_pids"] == [got["child"]] and got["worker_cpus"] == [cpus[0]]
    assert got["front_end_cpus"] == cpus[1:] == got["server_cpus"] == got["my_cpus"]
    assert got["child_cpus"] == [cpus[0]]  # the worker is never moved
    assert got["front_end_pids"] == [got["server"], got["me"]]
    assert got["line"].startswith(f"SERVING placement: model worker pid(s) [{got['child']}] on CPU(s) [{cpus[0]}]")


def test_nothing_moves_when_no_process_of_the_tree_is_bound():
    got = _client("free")
    assert not got["pinned"] and got["worker_pids"] == [] and got["front_end_cpus"] == []
    assert got["my_cpus"] == got["server_cpus"] == got["child_cpus"] == sorted(os.sched_getaffinity(0))
    assert got["line"].startswith("SERVING placement: not pinned (no process of the server's tree is bound")
