"""The session-shared host measurements (tests/shared_runs.py): shared only when nothing they read differs."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from pathlib import Path

import runners.matrix
import runners.orchestration.copy_bench as copy_bench
import runners.identity.numerics as numerics
from runners.orchestration.host_measures import HostMeasures
from tests.scripts_module import load_script
from results_schema.codec.io import read_json
from results_schema.records.manifest import EnvironmentManifest
from tests.runners.helpers import RUNNER, fake_overrides
from tests.shared_probe import IGNORED_PREFIXES, STORE_ENV, TMP_ROOT_ENV, session_probe, shared_probe
from tests.shared_runs import shared_copy_bench, shared_host

TMP = "/tmp/pytest-of-x/pytest-1"
REPO = Path(__file__).resolve().parents[1]


def test_probe_runs_once_per_interpreter_and_environment() -> None:
    calls = []

    def real(python, env, timeout_s=120.0):
        calls.append((python, dict(env)))
        return {"torch": "2.13.0", "threads": int(env.get("OMP_NUM_THREADS", 2))}

    probe = shared_probe(real, TMP)
    a = probe("py", {"OMP_NUM_THREADS": "2", "PYTEST_CURRENT_TEST": "t1", "CACHE": f"{TMP}/t1/c"})
    a["torch"] = "changed by a caller"
    assert probe("py", {"OMP_NUM_THREADS": "2", "PYTEST_CURRENT_TEST": "t2", "CACHE": f"{TMP}/t2/c",
                        "FAKE_SERVER_MODE": "orphan"}) == \
        {"torch": "2.13.0", "threads": 2}
    assert len(calls) == 1
    assert probe("py", {"OMP_NUM_THREADS": "1"})["threads"] == 1  # a thread setting is a new key
    assert probe("other-py", {"OMP_NUM_THREADS": "2"})["threads"] == 2
    assert len(calls) == 3


def test_failed_probe_is_never_shared() -> None:
    results: list[dict[str, object]] = [{}, {"torch": "2.13.0"}]
    probe = shared_probe(lambda python, env, timeout_s=120.0: results.pop(0), TMP)
    assert probe("py", {}) == {}
    assert probe("py", {}) == {"torch": "2.13.0"}


def test_processes_sharing_a_store_probe_once_per_key(tmp_path: Path) -> None:
    calls = []

    def real(python, env, timeout_s=120.0):
        calls.append(python)
        return {"torch": "2.13.0", "threads": int(env.get("OMP_NUM_THREADS", 2))}

    one, other = shared_probe(real, TMP, tmp_path / "store"), shared_probe(real, TMP, tmp_path / "store")  # 2 workers
    assert one("py", {"OMP_NUM_THREADS": "2"}) == {"torch": "2.13.0", "threads": 2}
    assert other("py", {"OMP_NUM_THREADS": "2", "PYTEST_XDIST_WORKER": "gw1"}) == {"torch": "2.13.0", "threads": 2}
    assert calls == ["py"]
    assert other("py", {"OMP_NUM_THREADS": "1"})["threads"] == 1 and calls == ["py", "py"]  # another key: probed
    assert sorted(p.suffix for p in (tmp_path / "store").iterdir()) == [".json", ".json"]  # no temporary file left
    failing = shared_probe(lambda python, env, timeout_s=120.0: {}, TMP, tmp_path / "store")
    assert failing("other-py", {}) == {} and len(list((tmp_path / "store").glob("*.json"))) == 2  # never stored


def test_copy_bench_file_is_copied_byte_for_byte_and_failures_run_again(tmp_path: Path) -> None:
    calls = []

    def real(run_dir, model_dir, env, cwd, timeout_s=300.0):
        calls.append(run_dir)
        if env.get("FAIL"):
            return None
        (run_dir / "copy-bench.json").write_text('{"bandwidth": 1.5}\n')
        return {"bandwidth": 1.5}

    bench = shared_copy_bench(real, "copy-bench.json", TMP)
    runs = [tmp_path / f"r{i}" for i in range(4)]
    for r in runs:
        r.mkdir()
    assert bench(runs[0], Path("m"), {}, Path(".")) == {"bandwidth": 1.5}
    assert bench(runs[1], Path("m"), {}, Path(".")) == {"bandwidth": 1.5}
    assert (runs[1] / "copy-bench.json").read_bytes() == (runs[0] / "copy-bench.json").read_bytes()
    assert bench(runs[2], Path("m"), {"FAIL": "1"}, Path(".")) is None
    assert not (runs[2] / "copy-bench.json").exists()
    assert bench(runs[3], Path("other-model"), {}, Path(".")) == {"bandwidth": 1.5}
    assert calls == [runs[0], runs[2], runs[3]]


def test_the_session_host_measures_wrap_the_runner_functions_and_nothing_is_patched(
        share_host_measurements: HostMeasures) -> None:
    # if a refactor renames them, the fixture would share something else: this test says so
    host = share_host_measurements
    assert host.probe_torch.__wrapped__ is numerics.probe_torch  # type: ignore[attr-defined]
    assert host.run_copy_bench.__wrapped__ is copy_bench.run_copy_bench  # type: ignore[attr-defined]
    assert shared_host() is host
    assert not hasattr(numerics.probe_torch, "__wrapped__") and not hasattr(copy_bench.run_copy_bench, "__wrapped__")
    assert HostMeasures() == HostMeasures(probe_torch=numerics.probe_torch, run_copy_bench=copy_bench.run_copy_bench)
    assert "host" in inspect.signature(runners.matrix.run_matrix).parameters


def test_no_product_module_reads_a_fake_or_store_variable() -> None:
    """The shared measurements ignore ``FAKE_*`` and ``TESTS_SHARED_*`` variables
    (``tests.shared_probe.IGNORED_PREFIXES``): that holds only while no product module (what a measurement runs)
    reads one."""
    assert IGNORED_PREFIXES == ("PYTEST_", "FAKE_", "TESTS_SHARED_")
    layout = load_script("check_layout")  # the project's packages: the ones the layout check reads
    readers = [str(p.relative_to(layout.ROOT)) for pkg in (*layout.PACKAGES, "scripts")
               for p in sorted((layout.ROOT / pkg).rglob("*.py"))
               if any(prefix in p.read_text() for prefix in IGNORED_PREFIXES[1:])]
    assert readers == []


def test_session_probe_needs_both_variables(tmp_path: Path) -> None:
    real = numerics.probe_torch
    assert session_probe(real, {}) is None
    assert session_probe(real, {STORE_ENV: str(tmp_path), TMP_ROOT_ENV: ""}) is None
    probe = session_probe(lambda python, env, timeout_s=120.0: {"torch": "x"},
                          {STORE_ENV: str(tmp_path / "store"), TMP_ROOT_ENV: TMP})
    assert probe is not None and probe("py", {}) == {"torch": "x"}
    assert len(list((tmp_path / "store").glob("*.json"))) == 1


def test_a_runner_subprocess_reads_the_session_store_and_writes_what_it_probed(tmp_path: Path) -> None:
    """``RUNNER`` (``tests/runners/matrix_entry.py``) probes into the store named in its environment; a second
    runner with that store reads the stored dict (rewritten here to a marker) instead of probing: the marker is
    what its environment manifest records."""
    env = {**os.environ, STORE_ENV: str(tmp_path / "store"), TMP_ROOT_ENV: str(tmp_path / "session")}

    def run(run_id: str) -> EnvironmentManifest:
        proc = subprocess.run([*RUNNER, *fake_overrides(tmp_path / "results", "phases.same_runtime.points=[]",
                                                        run_id=run_id)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return read_json(tmp_path / "results" / "default" / run_id / "environment-manifest.json", EnvironmentManifest)

    first = run("first")
    (stored,) = (tmp_path / "store").glob("*.json")
    facts = json.loads(stored.read_text())
    assert facts["torch"] == first.numerics[0].torch_version  # the real probe's dict, stored
    stored.write_text(json.dumps({**facts, "torch": "0.0.0+from-the-store"}))
    second = run("second")
    assert [n.torch_version for n in second.numerics] == ["0.0.0+from-the-store"]
    assert len(list((tmp_path / "store").glob("*.json"))) == 1
