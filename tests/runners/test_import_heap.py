"""runners.incase.import_heap.frozen_import: collector paused during the import, the first import frozen.

Each scenario runs in a fresh interpreter (freezing changes the whole process's heap, and this worker's is
frozen after collection by tests/conftest.py), importing a package written for the test: ``gc.isenabled()``
inside and after the block, and ``gc.get_freeze_count()`` before and after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCENARIO = r"""
import gc, json, sys
sys.path.insert(0, sys.argv[1])
from runners.incase.import_heap import frozen_import
mode = sys.argv[2]
if mode == "already":
    import heap_pkg
gc.unfreeze()
before = gc.get_freeze_count()
inside = None
raised = None
try:
    with frozen_import("heap_pkg", freeze=(mode != "no-freeze")):
        inside = gc.isenabled()
        import heap_pkg
        if mode == "raises":
            raise RuntimeError("import failed")
except RuntimeError as exc:
    raised = str(exc)
print(json.dumps({"inside": inside, "after": gc.isenabled(), "frozen": gc.get_freeze_count() - before,
                  "raised": raised}))
"""


def _scenario(tmp_path: Path, mode: str) -> dict:
    pkg = tmp_path / "heap_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("OBJECTS = [{'i': i} for i in range(1000)]\n")
    out = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path), mode], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60)
    return json.loads(out.stdout)


def test_the_first_import_runs_with_the_collector_paused_and_is_frozen(tmp_path):
    r = _scenario(tmp_path, "first")
    assert r["inside"] is False and r["after"] is True and r["raised"] is None
    assert r["frozen"] >= 1000  # the package's objects (and what the import left) moved to the permanent generation


@pytest.mark.parametrize("mode", ["already", "raises", "no-freeze"])
def test_nothing_is_frozen_for_a_module_already_imported_a_failed_block_or_freeze_false(tmp_path, mode):
    r = _scenario(tmp_path, mode)
    assert r["inside"] is False and r["after"] is True  # restored in every case, also when the block raised
    assert r["frozen"] == 0
    assert (r["raised"] == "import failed") == (mode == "raises")
