"""runners.incase.import_heap: the first import frozen with the collector off, only where asked; the env rule.

Each scenario runs in a fresh interpreter (freezing changes the whole process's heap, and this worker's is
frozen after collection by tests/conftest.py), importing a package written for the test. It records
``gc.isenabled()`` inside the block, at the moment ``gc.freeze`` is called (the module looks ``gc.freeze`` up
when it calls it, so the scenario wraps it) and after the block, and ``gc.get_freeze_count()`` before and after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runners.incase.import_heap import ENGINE_IN_PROCESS_ENV, engine_in_this_process

REPO = Path(__file__).resolve().parents[2]

SCENARIO = r"""
import gc, json, sys
sys.path.insert(0, sys.argv[1])
from runners.incase.import_heap import frozen_import
mode = sys.argv[2]
if mode == "already":
    import heap_pkg
if mode == "disabled":
    gc.disable()
gc.unfreeze()
at_freeze = []
real_freeze = gc.freeze
def spy():
    at_freeze.append(gc.isenabled())
    real_freeze()
gc.freeze = spy
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
print(json.dumps({"inside": inside, "at_freeze": at_freeze, "after": gc.isenabled(),
                  "frozen": gc.get_freeze_count() - before, "raised": raised}))
"""


def _scenario(tmp_path: Path, mode: str) -> dict:
    pkg = tmp_path / "heap_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("OBJECTS = [{'i': i} for i in range(1000)]\n")
    out = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path), mode], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60)
    return json.loads(out.stdout)


def test_the_first_import_runs_with_the_collector_off_and_is_frozen_before_it_resumes(tmp_path):
    r = _scenario(tmp_path, "first")
    assert r["inside"] is False and r["at_freeze"] == [False] and r["after"] is True and r["raised"] is None
    assert r["frozen"] >= 1000  # the package's objects (and what the process held before) are in the permanent one


def test_a_collector_disabled_on_entry_stays_disabled(tmp_path):
    r = _scenario(tmp_path, "disabled")
    assert r["inside"] is False and r["at_freeze"] == [False] and r["after"] is False and r["frozen"] >= 1000


@pytest.mark.parametrize("mode", ["already", "raises", "no-freeze"])
def test_nothing_is_frozen_for_a_module_already_imported_a_failed_block_or_freeze_false(tmp_path, mode):
    r = _scenario(tmp_path, mode)
    assert r["at_freeze"] == [] and r["frozen"] == 0
    assert r["after"] is True  # restored also when the block raised
    assert r["inside"] is (mode != "raises")  # the collector is left as it is unless this is a first, frozen import
    assert (r["raised"] == "import failed") == (mode == "raises")


@pytest.mark.parametrize(("value", "expected"), [(None, False), ("1", False), ("0", True), ("00", True),
                                                 ("2", False)])
def test_the_engine_runs_in_this_process_exactly_when_vllm_reads_its_switch_as_zero(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(ENGINE_IN_PROCESS_ENV, raising=False)
    else:
        monkeypatch.setenv(ENGINE_IN_PROCESS_ENV, value)
    assert engine_in_this_process() is expected


def test_a_switch_that_is_not_an_integer_is_refused_as_vllm_refuses_it(monkeypatch):
    monkeypatch.setenv(ENGINE_IN_PROCESS_ENV, "yes")
    with pytest.raises(ValueError, match="yes"):
        engine_in_this_process()
