"""scripts/count_function_imports.py: what it counts (project imports inside functions, import stand-ins anywhere)
and what it does not (module-top imports, third-party imports); the ceiling fails the check when exceeded."""

from __future__ import annotations

from pathlib import Path

from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
cfi = load_script("count_function_imports")

SOURCE = '''
import json
from runners.paths import REPO_ROOT


def f():
    import torch
    from results_schema.codec.io import read_json
    from . import sibling
    return importlib.import_module("runners.errors")


class C:
    def m(self):
        if True:
            import runners.errors
'''


def test_counts_project_imports_in_functions_and_stand_ins_only(tmp_path: Path) -> None:
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "m.py").write_text(SOURCE)
    found = cfi.count(tmp_path)
    assert found == ["runners/m.py:8: results_schema.codec.io", "runners/m.py:9: .",
                     "runners/m.py:10: import_module(...)", "runners/m.py:16: runners.errors"]


def test_the_ceiling_fails_the_check(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cfi, "count", lambda: ["a.py:1: runners.x", "a.py:2: runners.y"])
    assert cfi.main(["--ceiling", "2"]) == 0
    assert cfi.main(["--ceiling", "1"]) == 1
    assert "2 function-level project imports in runners/ exceed the ceiling 1" in capsys.readouterr().err
