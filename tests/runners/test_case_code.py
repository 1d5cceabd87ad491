"""The case-code hash covers exactly the code that runs in a case process (``runners/incase``)."""

from __future__ import annotations

from pathlib import Path

from runners.identity.pin_checks import case_code_sha256


def _tree(root: Path) -> None:
    for rel in ("offload/a.py", "results_schema/b.py", "runners/incase/bench_one.py",
                "runners/orchestration/progress.py", "runners/matrix.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")


def test_orchestrator_edits_leave_the_case_code_unchanged(tmp_path: Path) -> None:
    _tree(tmp_path)
    before = case_code_sha256(tmp_path)
    (tmp_path / "runners/orchestration/progress.py").write_text("print('a new console line')\n")
    (tmp_path / "runners/matrix.py").write_text("# edited\n")
    assert case_code_sha256(tmp_path) == before


def test_in_case_edits_change_the_case_code(tmp_path: Path) -> None:
    _tree(tmp_path)
    before = case_code_sha256(tmp_path)
    (tmp_path / "runners/incase/bench_one.py").write_text("# edited\n")
    after_incase = case_code_sha256(tmp_path)
    assert after_incase != before
    (tmp_path / "offload/a.py").write_text("# edited\n")
    assert case_code_sha256(tmp_path) != after_incase
