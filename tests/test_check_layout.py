"""scripts/check_layout.py: the top-level module limit of runners/ and analysis/ fails when exceeded."""

from __future__ import annotations

import pytest
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_layout", ROOT / "scripts" / "check_layout.py")
assert _spec is not None and _spec.loader is not None
check_layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layout)


def _tree(root: Path, n_modules: int) -> None:
    for pkg in check_layout.PACKAGES:
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    for i in range(n_modules):
        (root / "runners" / f"m{i}.py").write_text("x = 1\n")
    (root / "runners" / "sub").mkdir()
    (root / "runners" / "sub" / "__init__.py").write_text("")


def test_fifteen_top_level_modules_pass_sixteen_fail(tmp_path: Path) -> None:
    _tree(tmp_path / "ok", 14)  # 14 modules + 1 subpackage = 15
    assert check_layout.violations(tmp_path / "ok", 400, 60)[0] == []
    _tree(tmp_path / "bad", 15)
    (msg,) = check_layout.violations(tmp_path / "bad", 400, 60)[0]
    assert msg.startswith("runners/__init__.py:1: 16 top-level modules (limit 15)")


@pytest.mark.heavy  # measured 1.4 s in the fast tier (its budget is 2 minutes)
def test_this_repository_keeps_the_limit() -> None:
    assert [m for m in check_layout.violations(ROOT, 400, 60)[0] if "top-level" in m] == []
