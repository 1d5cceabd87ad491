"""A resume resumes: overrides that differ from the run's are refused (listed), a complete run is left
byte for byte as it was, and the interrupted run's last line is its verdict."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from runners.errors import EXIT_CONFIG, EXIT_OK
from tests.shared_runs import run_matrix
from runners.orchestration.resume import override_differences
from tests.runners.helpers import compose_cfg, run_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"
SAVED = ["results_root=/r", "run_id=t", "phases.same_runtime.points=[{g: 4, n: 1}]", "progress=false"]


@pytest.mark.parametrize("given", [
    [],
    ["resume=/r/default/t"],
    SAVED,
    ["run_id=t", "phases.same_runtime.points=[{g:4,n:1}]"],  # some of the saved ones, spelt differently
    ["progress=true", "analyze=false", "resume=/x"],  # the resume's own switches
])
def test_no_override_or_the_saved_ones_are_accepted(given: list[str]) -> None:
    assert override_differences(SAVED, given) == []


def test_each_differing_override_is_listed() -> None:
    diffs = override_differences(SAVED, ["+experiment=smoke", "phases.same_runtime.repeats=3", "run_id=u", "~phases"])
    assert diffs == ["+experiment=smoke (the run has no experiment override)",
                     "phases.same_runtime.repeats=3 (the run has no phases.same_runtime.repeats override)",
                     "run_id=u (the run has run_id=t)", "~phases (the run has no phases override)"]


def _snapshot(run_dir: Path) -> dict[str, tuple[str, int]]:
    return {p.relative_to(run_dir).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.heavy  # a fake-bench run and four resumes, two as processes (6 s CPU)
def test_resume_with_other_overrides_exits_2_and_a_complete_run_is_left_untouched(tmp_path: Path) -> None:
    code, run_dir = run_fake(tmp_path, ONE_POINT)
    assert code == EXIT_OK
    before = _snapshot(run_dir)
    for extra in (["+experiment=smoke"], ["experiment_name=other", "phases.same_runtime.repeats=3"]):
        overrides = [*extra, f"resume={run_dir}"]
        assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_CONFIG
        assert _snapshot(run_dir) == before
    r = subprocess.run([sys.executable, "-m", "runners.matrix", "+experiment=smoke", f"resume={run_dir}"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_CONFIG, out
    assert "+experiment=smoke (the run has no experiment override)" in " ".join(out.split())
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert _snapshot(run_dir) == before
    # the same overrides, or none: a complete run has nothing left to do, and nothing is written
    for overrides in ([f"resume={run_dir}"], ["run_id=t", "progress=false", f"resume={run_dir}"]):
        assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_OK
        assert _snapshot(run_dir) == before
    r = subprocess.run([sys.executable, "-m", "runners.matrix", f"resume={run_dir}"], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == EXIT_OK, r.stdout + r.stderr
    assert "is complete (2 of 2 cases recorded" in " ".join(r.stdout.split()) and "nothing written" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("validation: not run"), r.stdout  # analyze=false run
    assert r.stdout.strip().endswith("exit 0")
    assert _snapshot(run_dir) == before


def test_resume_of_a_file_or_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    for target in (f, tmp_path / "missing"):
        overrides = [f"resume={target}"]
        assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_CONFIG
