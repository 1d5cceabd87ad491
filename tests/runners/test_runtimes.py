"""Runtime plumbing: path_map, command prefix, probes run inside a runtime's interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conf.schema_stack import RuntimeConfig
from conf.typed import validate_as
from runners.identity.probe import main as probe_main, observe, package_version
from runners.identity.runtimes import ProbeError, map_path, probe_runtime, wrap_prefix
from tests.runners.helpers import run_fake


def _rt(**fields) -> RuntimeConfig:
    return validate_as(RuntimeConfig, {"name": "t", "device": "cpu", **fields})


def test_map_path_uses_the_longest_whole_component_prefix() -> None:
    rt = _rt(path_map={"/usr/local/Ascend": "/home/u/Ascend", "/usr/local/Ascend/driver": "/drv", "/opt/x/": "/src"})
    assert map_path(rt, "/usr/local/Ascend/ascend-toolkit/latest/version.cfg") == \
        "/home/u/Ascend/ascend-toolkit/latest/version.cfg"
    assert map_path(rt, "/usr/local/Ascend/driver/version.info") == "/drv/version.info"
    assert map_path(rt, "/usr/local/AscendX/a") == "/usr/local/AscendX/a"  # not a component prefix
    assert map_path(rt, "/opt/x") == "/src"
    assert map_path(_rt(), "/a/b") == "/a/b"


def test_wrap_prefix_forwards_only_the_case_variables() -> None:
    base = {"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "/old"}
    env = {"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "/hook:/repo", "OFFLOAD_IMPL": "current"}
    argv, host = wrap_prefix(_rt(command_prefix=["docker", "exec", "-i", "c"]), ["/py", "-m", "m"], env, base)
    assert argv == ["docker", "exec", "-i", "c", "env", "OFFLOAD_IMPL=current", "PYTHONPATH=/hook:/repo",
                    "/py", "-m", "m"]
    assert host == {"PATH": "/bin", "HOME": "/h"}
    assert wrap_prefix(_rt(), ["/py"], env, base) == (["/py"], env)


def test_probe_observes_versions_files_and_absences(tmp_path: Path) -> None:
    f = tmp_path / "v.cfg"
    f.write_text("x\n")
    obs = observe({"packages": ["pydantic", "no-such-dist-xyz"], "files": [str(f), str(tmp_path / "nope")],
                   "tools": ["sh"], "source_trees": [str(tmp_path)]})
    assert obs["packages"] == {"pydantic": package_version("pydantic"), "no-such-dist-xyz": None}
    assert obs["files"][str(tmp_path / "nope")] is None and len(obs["files"][str(f)]) == 64
    assert obs["tools"]["sh"] and obs["python"] == sys.executable
    assert probe_main(["{\"bogus\": []}"]) == 2


def test_probe_runs_through_the_runtime_interpreter_and_prefix(tmp_path: Path) -> None:
    obs = probe_runtime(_rt(python=sys.executable, command_prefix=["env"]), {"packages": ["pydantic"]})
    assert obs["packages"]["pydantic"] == package_version("pydantic")
    with pytest.raises(ProbeError, match=r"runtime 't': cannot start .*not found"):
        probe_runtime(_rt(python=str(tmp_path / "no-python")), {})


@pytest.mark.heavy  # measured 2.2 s in the fast tier (its budget is 2 minutes)
def test_cases_start_behind_a_command_prefix_with_their_variables(tmp_path: Path) -> None:
    """``env`` as the prefix stands in for ``docker exec``: the case still gets its variables."""
    code, run_dir = run_fake(tmp_path, "runtime.command_prefix=[env]", f"runtime.python={sys.executable}",
                             "bench_command=null", "bench_module=tests.runners.fake_bench")
    assert code == 0
    logs = sorted((run_dir / "logs" / "same_runtime").glob("*.log"))
    assert logs
    for log in logs:
        text = log.read_text()
        argv = text.splitlines()[0]
        assert argv.startswith("# argv: env env ") and "OFFLOAD_EVIDENCE_PATH=" in argv
        assert f" {sys.executable} -m tests.runners.fake_bench " in argv
        assert "offload_evidence=offload.plugin:register@offload-evidence-plugin" in text
    runs = (run_dir / "same_runtime-runs.jsonl").read_text().splitlines()
    assert len(runs) == len(logs)
    assert json.loads(runs[0])["record"]["label"]
