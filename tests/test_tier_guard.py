"""The fast-tier guard (tests/tier_guard.py) can fail: engine commands, engine imports, descendants."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.tier_guard import ENGINE_MODULES, EngineStartBlocked, engine_command

REPO_ROOT = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"


@pytest.mark.parametrize("argv,expected", [
    ([PY, "-m", "runners.incase.bench_one", "--phase", "x"], "the real bench (runners.incase.bench_one)"),
    ([PY, "-m", "runners.incase.accuracy", "run", "--model", "m"], "a real accuracy case (runners.incase.accuracy run)"),
    ([PY, "-m", "vllm.entrypoints.openai.api_server", "--port", "1"], "a vLLM server (vllm.entrypoints.openai.api_server)"),
    (["/venv/bin/vllm", "serve", "m"], "a vLLM server (vllm serve)"),
    ([PY, "/repo/tests/offload/vllm_driver.py", "spec.json"], "a real vLLM engine (tests/offload/vllm_driver.py)"),
    (["VLLM::EngineCore"], "a vLLM engine process (VLLM::EngineCore)"),
    (["/venv/lib/ray/core/src/ray/raylet/raylet", "--node"], "a Ray process (raylet)"),
    (["/venv/bin/ray", "start", "--block"], "a Ray process (ray)"),
    (["ray::IDLE"], "a Ray process (ray::IDLE)"),
    (["/usr/lib/chromium/chromium", "--headless"], "a browser (chromium)"),
])
def test_engine_commands_are_named(argv, expected) -> None:
    assert engine_command(argv) == expected


@pytest.mark.parametrize("argv", [
    [PY, "tests/runners/fake_bench.py", "--phase", "x"],          # the fake bench
    [PY, "-m", "analysis.accuracy.verifier", "run_dir"],           # no engine
    [PY, "-m", "runners.matrix", "dry_run=true"],                   # its children are scanned
    [PY, "-c", "print('runners.incase.bench_one')"],                       # a mention is not a start
    [PY, "-m", "pytest", "-m", "not engine"],
    [],
])
def test_other_commands_are_not_engines(argv) -> None:
    assert engine_command(argv) is None


def test_an_engine_command_is_blocked_and_fails_the_guard(tier_guard, tmp_path: Path) -> None:
    flag = tmp_path / "started"
    with pytest.raises(EngineStartBlocked, match="runners.incase.bench_one"):
        subprocess.run([sys.executable, "-c", f"open({str(flag)!r}, 'w')", "-m", "runners.incase.bench_one"])
    assert not flag.exists()  # blocked before the process started
    found = tier_guard.take()
    assert len(found) == 1 and found[0].startswith("started the real bench (runners.incase.bench_one)"), found


def test_an_engine_started_by_a_child_is_found_by_the_descendant_scan_and_killed(tier_guard) -> None:
    grandchild = "[sys.executable, '-c', 'import time; time.sleep(300)', '-m', 'runners.incase.bench_one']"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", f"import subprocess, sys; print(subprocess.run({grandchild}).returncode)"],
                       capture_output=True, text=True, check=True, timeout=120)
    assert time.monotonic() - t0 < 100 and r.stdout.strip() == "-9", r.stdout  # killed, not waited for
    found = tier_guard.take()
    assert len(found) == 1 and found[0].startswith("a child process runs the real bench"), found


def test_an_engine_module_import_in_the_test_process_fails_the_guard(tier_guard) -> None:
    assert "vllm.v1.engine.core" in ENGINE_MODULES
    with pytest.raises(ImportError, match="vllm.v1.engine.core"):
        sys.audit("import", "vllm.v1.engine.core", None, sys.path, sys.meta_path, sys.path_hooks)
    assert tier_guard.take() == ["imported vllm.v1.engine.core in the test process (an engine start)"]


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_unmarked_test_fails_and_engine_marked_test_passes(tmp_path: Path) -> None:
    """End to end in a child pytest: the same engine start fails unmarked and passes under ``engine``."""
    (tmp_path / "other").mkdir()  # a second conftest: pytest then filters plugins per item (needs a hashable guard)
    (tmp_path / "other" / "conftest.py").write_text("")
    (tmp_path / "other" / "test_y.py").write_text("def test_other():\n    pass\n")
    (tmp_path / "test_x.py").write_text(textwrap.dedent("""
        import sys
        import pytest

        def start():  # what Popen reports for a real bench process (nothing is started)
            sys.audit("subprocess.Popen", sys.executable, [sys.executable, "-m", "runners.incase.bench_one"], None, None)

        def test_unmarked():
            try:
                start()
            except ImportError:
                pass  # code under test that swallows the error still fails the guard

        @pytest.mark.engine
        def test_marked():
            start()

        def test_quiet():
            pass
    """))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.tier_guard", "-p", "no:cacheprovider",
                        "-o", "markers=engine: x", "--rootdir", str(tmp_path), str(tmp_path)],
                       cwd=tmp_path, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 failed, 3 passed" in out, out
    assert "FAILED test_x.py::test_unmarked" in out and "started the real bench (runners.incase.bench_one)" in out, out


OPT_IN_FILE = """
import pytest

def test_plain(): pass

@pytest.mark.slow
def test_slow(): pass

@pytest.mark.full_grid
def test_grid(): pass

@pytest.mark.gpu
def test_gpu(): pass
"""


@pytest.mark.parametrize("expr,selected", [
    (None, {"test_plain", "test_slow"}),              # no -m at all
    ("not slow", {"test_plain"}),                     # an explicit -m does not bring full_grid / gpu back
    ("not full_grid and not gpu and not npu", {"test_plain", "test_slow"}),   # pyproject's default
    ("full_grid or not full_grid", {"test_plain", "test_slow", "test_grid"}),  # make test-full
    ("gpu", {"test_gpu"}),
])
@pytest.mark.heavy  # measured 3.5 s over 5 cases in the fast tier (its budget is 2 minutes)
def test_opt_in_markers_run_only_when_the_marker_expression_names_them(tmp_path: Path, expr, selected) -> None:
    (tmp_path / "test_opt_in.py").write_text(OPT_IN_FILE)
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.conftest",
                        "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *(["-m", expr] if expr else []),
                        str(tmp_path / "test_opt_in.py")], cwd=tmp_path,
                       env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {line.split("::")[-1] for line in r.stdout.splitlines() if "::" in line} == selected, r.stdout
