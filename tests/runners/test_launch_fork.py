"""Forking case processes while other threads import: the child must never block before exec.

Regression for a hang: ``preexec_fn`` imported ``ctypes`` between fork and exec while a
background thread (pre-importing pandas / matplotlib) held that module's import lock; the
child waited forever on a lock owned by a thread that does not exist in it, and the
runner waited forever in ``Popen`` (the case timeout never applied).
"""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

import runners.orchestration.close
from tests.shared_runs import run_matrix
from runners.incase import process_group as launch
from runners.incase.process_group import CaseProcess
from tests.runners.helpers import compose_cfg, fake_overrides

REPO_ROOT = Path(__file__).resolve().parents[2]
TRUE = shutil.which("true") or "/bin/true"


def test_preexec_function_imports_nothing_in_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any ``import`` executed in the forked child (before exec) raises there, so Popen fails."""
    parent = os.getpid()
    real_import = builtins.__import__

    def guarded(name: str, *args: Any, **kwargs: Any) -> Any:
        if os.getpid() != parent:
            raise ImportError(f"import {name!r} in the child between fork and exec")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", guarded)
    with CaseProcess([TRUE], dict(os.environ), tmp_path / "case.log", tmp_path) as cp:
        code, timed_out = cp.wait(timeout_s=20, grace_s=1)
    assert (code, timed_out) == (0, False)


def test_prctl_is_resolved_at_import_time() -> None:
    if sys.platform.startswith("linux"):
        assert launch._PRCTL is not None
    assert isinstance(launch._SIGKILL, int) and type(launch._SIGKILL) is int


_STRESS = textwrap.dedent("""
    import importlib.abc, importlib.machinery, os, sys, tempfile, threading, time
    from pathlib import Path

    sys.path.insert(0, sys.argv[1])
    from runners.incase.process_group import CaseProcess

    started = threading.Event()

    class SlowFinder(importlib.abc.MetaPathFinder):
        # the first import of ctypes (if any is left) takes 0.5 s, holding its module lock
        def find_spec(self, name, path, target=None):
            if name != "ctypes":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            real_exec = spec.loader.exec_module
            def slow_exec(module):
                started.set()
                time.sleep(0.5)
                real_exec(module)
            spec.loader.exec_module = slow_exec
            return spec

    mods = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(mods))
    for i in range(200):
        (mods / f"_stress_mod_{i}.py").write_text("import time\\ntime.sleep(0.005)\\n")
    stop = threading.Event()

    def importer():
        sys.meta_path.insert(0, SlowFinder())
        started.set()
        import ctypes  # noqa: F401
        for i in range(200):
            if stop.is_set():
                return
            __import__(f"_stress_mod_{i}")

    t = threading.Thread(target=importer, daemon=True)
    t.start()
    started.wait(5)
    log_dir = Path(tempfile.mkdtemp())
    for i in range(25):
        with CaseProcess([sys.argv[2]], dict(os.environ), log_dir / f"c{i}.log", log_dir) as cp:
            code, timed_out = cp.wait(timeout_s=10, grace_s=1)
            assert (code, timed_out) == (0, False), (code, timed_out)
    stop.set()
    print("launched 25 cases while importing")
""")


def test_cases_fork_while_another_thread_imports(tmp_path: Path) -> None:
    """Launch cases while a thread is inside imports (ctypes's first import included); no hang."""
    script = tmp_path / "stress.py"
    script.write_text(_STRESS)
    proc = subprocess.Popen([sys.executable, str(script), str(REPO_ROOT), TRUE], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # the hang this guards against: reap the stuck child too
        stuck = psutil.Process(proc.pid).children(recursive=True)
        for p in [*stuck, psutil.Process(proc.pid)]:
            p.kill()
        proc.communicate()
        pytest.fail("launching cases while another thread imports hung (child blocked before exec)")
    assert proc.returncode == 0, out
    assert "launched 25 cases while importing" in out


@pytest.mark.heavy  # measured 0.8 s in the fast tier (its budget is 2 minutes)
def test_runner_starts_no_thread_while_cases_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With analysis on, no background thread (e.g. pre-importing pandas) runs beside the case forks.

    The identity stage may run the numerics probe in a thread; it must have ended before the first case
    process is forked, and no thread may start once cases run. Threads already alive before the run
    (an xdist worker keeps e.g. tqdm's monitor thread from an earlier test) are not the runner's and are
    left out; a real runner is a fresh process."""
    before = set(threading.enumerate())
    started: list[threading.Thread] = []
    alive_at_fork: list[list[str]] = []
    real_start = threading.Thread.start
    real_enter = CaseProcess.__enter__

    def record(self: threading.Thread) -> None:
        started.append(self)
        real_start(self)

    def enter(self: CaseProcess) -> CaseProcess:
        alive_at_fork.append([t.name for t in threading.enumerate()
                              if t is not threading.main_thread() and t not in before])
        return real_enter(self)

    monkeypatch.setattr(threading.Thread, "start", record)
    monkeypatch.setattr(CaseProcess, "__enter__", enter)
    monkeypatch.setattr(runners.orchestration.close, "analyze", lambda run_dir, console: (None, True))
    overrides = fake_overrides(tmp_path, "phases.same_runtime.points=[{g: 4, n: 1}]", "analyze=true")
    code = run_matrix(compose_cfg(*overrides), overrides)
    assert code == 0
    assert len(alive_at_fork) == 2  # baseline and (4,1) were forked
    assert alive_at_fork == [[], []]
    assert [t.name for t in started] in ([], ["numerics-probe"])  # only the identity stage's probe, if any
