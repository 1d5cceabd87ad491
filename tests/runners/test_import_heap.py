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

from runners.incase.import_heap import ENGINE_IN_PROCESS_ENV, engine_in_process

REPO = Path(__file__).resolve().parents[2]

SCENARIO = r"""
import gc, json, sys
sys.path.insert(0, sys.argv[1])
from runners.incase.import_heap import frozen_import
mode = sys.argv[2]
if mode == "already":
    import heap_pkg
if mode.startswith("disabled"):
    gc.disable()
gc.unfreeze()
at_freeze = []
real_freeze = gc.freeze
def spy():
    at_freeze.append(gc.isenabled())
    real_freeze()
gc.freeze = spy
import atexit
registered = []
real_register = atexit.register
def register_spy(fn, *args, **kwargs):
    registered.append(getattr(fn, "__name__", repr(fn)))
    return real_register(fn, *args, **kwargs)
atexit.register = register_spy
before = gc.get_freeze_count()
tracked = len(gc.get_objects())
inside = None
raised = None
try:
    with frozen_import("heap_pkg", freeze=(mode != "no-freeze")):
        inside = gc.isenabled()
        if mode != "not-imported":
            import heap_pkg
        if mode.endswith("raises"):
            raise RuntimeError("import failed")
except RuntimeError as exc:
    raised = str(exc)
print(json.dumps({"inside": inside, "at_freeze": at_freeze, "after": gc.isenabled(), "tracked_before": tracked,
                  "frozen": gc.get_freeze_count() - before, "raised": raised, "atexit": registered}))
"""


def _scenario(tmp_path: Path, mode: str) -> dict:
    pkg = tmp_path / "heap_pkg"
    pkg.mkdir(exist_ok=True)
    # lists: the collector tracks them (a dict of atoms it does not)
    (pkg / "__init__.py").write_text("OBJECTS = [[i] for i in range(1000)]\n")
    out = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path), mode], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60)
    return json.loads(out.stdout)


def test_the_first_import_runs_with_the_collector_off_and_is_frozen_before_it_resumes(tmp_path):
    r = _scenario(tmp_path, "first")
    assert r["inside"] is False and r["at_freeze"] == [False] and r["after"] is True and r["raised"] is None
    # everything tracked before the block plus the package's 1,000 lists moved to the permanent generation
    assert r["frozen"] >= r["tracked_before"] + 1000
    assert r["atexit"] == ["unfreeze"]  # the interpreter's shutdown frees them as without the freeze


def test_a_collector_disabled_on_entry_stays_disabled(tmp_path):
    r = _scenario(tmp_path, "disabled")
    assert r["inside"] is False and r["at_freeze"] == [False] and r["after"] is False
    assert r["frozen"] >= r["tracked_before"] + 1000


@pytest.mark.parametrize("mode", ["already", "raises", "no-freeze", "not-imported"])
def test_nothing_is_frozen_for_a_module_already_imported_a_failed_block_freeze_false_or_no_import(tmp_path, mode):
    r = _scenario(tmp_path, mode)
    assert r["at_freeze"] == [] and r["frozen"] == 0 and r["atexit"] == []
    assert r["after"] is True  # restored also when the block raised
    # paused only for a first import that may be frozen; left as it is otherwise
    assert r["inside"] is (mode in ("already", "no-freeze"))
    assert (r["raised"] == "import failed") == (mode == "raises")


def test_a_raise_with_the_collector_disabled_on_entry_leaves_it_disabled(tmp_path):
    r = _scenario(tmp_path, "disabled-raises")
    assert r["inside"] is False and r["after"] is False and r["frozen"] == 0 and r["raised"] == "import failed"


@pytest.mark.parametrize(("value", "expected"), [(None, False), ("1", False), ("0", True), ("00", True),
                                                 ("2", False)])
def test_the_engine_runs_in_this_process_exactly_when_vllm_reads_its_switch_as_zero(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(ENGINE_IN_PROCESS_ENV, raising=False)
    else:
        monkeypatch.setenv(ENGINE_IN_PROCESS_ENV, value)
    assert engine_in_process() is expected


def test_a_switch_that_is_not_an_integer_is_refused_as_vllm_refuses_it(monkeypatch):
    monkeypatch.setenv(ENGINE_IN_PROCESS_ENV, "yes")
    with pytest.raises(ValueError, match="yes"):
        engine_in_process()
