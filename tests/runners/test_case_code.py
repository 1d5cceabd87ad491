"""The case code and the offload-tree pin cover what a case process runs, and nothing else.

A copy of the repository's packages is hashed after edits: the GPU check (``offload_tools``), a reader
(``results_schema.reading``), the analysis and the orchestrator leave both hashes unchanged; the offloader,
the in-case code and a record model change the case code (and the offloader the offload tree).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runners.identity.case_code import REPO_ROOT, case_code_files, case_code_sha256
from runners.identity.probe import tree_sha256

PACKAGES = ("offload", "offload_tools", "results_schema", "runners", "conf", "analysis")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _edit(repo: Path, rel: str) -> None:
    path = repo / rel
    path.write_text(path.read_text() + "\n# edited\n")


@pytest.mark.parametrize("rel", ["offload_tools/gpu_compare.py", "offload_tools/gpu_check_torch.py",
                                 "results_schema/reading/table_scan.py", "results_schema/cli.py",
                                 "analysis/load.py", "runners/orchestration/progress.py", "runners/matrix.py",
                                 "results_schema/rules/evidence_rule.py"])
def test_edits_outside_a_case_process_leave_both_hashes_unchanged(repo: Path, rel: str) -> None:
    code, tree = case_code_sha256(repo), tree_sha256(repo / "offload")
    _edit(repo, rel)
    assert (case_code_sha256(repo), tree_sha256(repo / "offload")) == (code, tree)


@pytest.mark.parametrize("rel", ["offload/prefetch.py", "runners/incase/bench_one.py",
                                 "results_schema/records/models.py", "results_schema/rules/log_rule.py"])
def test_edits_inside_a_case_process_change_the_case_code(repo: Path, rel: str) -> None:
    code = case_code_sha256(repo)
    _edit(repo, rel)
    assert case_code_sha256(repo) != code


def test_the_case_code_is_the_offloader_the_in_case_code_and_the_records_it_writes() -> None:
    files = case_code_files()
    assert "offload/plugin.py" in files and "offload/prefetch.py" in files
    assert "runners/incase/bench_one.py" in files and "results_schema/records/models.py" in files
    assert not [f for f in files if f.startswith(("offload_tools/", "results_schema/reading/", "analysis/",
                                                   "conf/", "runners/orchestration/", "runners/identity/"))]
    # every module of the offloader runs in a case process: the offload-tree pin is over exactly them
    offload = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "offload").glob("*.py")}
    assert offload <= set(files)
    # every module of the serving case process (the driver and the modules it is split into) is case code
    serving = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "runners" / "incase" / "serving").glob("*.py")}
    assert {"runners/incase/serving/driver.py", "runners/incase/serving/bench_args.py"} <= serving <= set(files)
