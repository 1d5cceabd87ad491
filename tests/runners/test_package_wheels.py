"""``runtime.pins.package_wheels``: an installed distribution's package tree against its wheel.

A small wheel is written with ``zipfile`` and a small "installed" site directory (package files, a
``.dist-info`` with the installer's RECORD, a compiled cache, a script outside site-packages) next to it.
"""

from __future__ import annotations

from conf.schema_stack import PinsConfig

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runners.identity.pin_checks import IdentityError, check_pins, enforce
from runners.identity.probe import parse_probe_output, tree_sha256, wheel_vs_installed

REPO = Path(__file__).resolve().parents[2]
FILES = {"mypkg/__init__.py": b"from .mod import f\n", "mypkg/mod.py": b"def f():\n    return 1\n",
         "mypkg/extra.py": b"X = 2\n"}


def _wheel(path: Path, files: dict[str, bytes] = FILES) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for rel, data in files.items():
            # extra.py ships through the wheel's .data/purelib directory; it installs next to the others
            z.writestr(f"mypkg-1.0.data/purelib/{rel}" if rel.endswith("extra.py") else rel, data)
        z.writestr("mypkg-1.0.data/scripts/tool", b"#!/bin/sh\n")
        z.writestr("mypkg-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: mypkg\nVersion: 1.0\n")
        z.writestr("mypkg-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
        z.writestr("mypkg-1.0.dist-info/RECORD", b"")
    return path


def _installed(site: Path, files: dict[str, bytes] = FILES, record_extra: tuple[str, ...] = ()) -> Path:
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (site / "mypkg" / "__pycache__").mkdir()
    (site / "mypkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"cache")
    info = site / "mypkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 1.0\n")
    (info / "INSTALLER").write_text("pip\n")
    record = [*files, *record_extra, "mypkg/__pycache__/mod.cpython-311.pyc", "../../bin/tool",
              "mypkg-1.0.dist-info/METADATA", "mypkg-1.0.dist-info/INSTALLER", "mypkg-1.0.dist-info/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))
    return site


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    s = tmp_path / "site"
    s.mkdir()
    monkeypatch.syspath_prepend(str(s))
    return s


def test_the_wheel_and_its_installed_tree_agree(tmp_path: Path, site: Path) -> None:
    wheel = _wheel(tmp_path / "mypkg-1.0-py3-none-any.whl")
    _installed(site)
    seen = wheel_vs_installed(f"mypkg={wheel}")
    assert seen is not None and seen["differing_count"] == 0 and seen["files"] == 3
    assert seen["wheel"] == seen["installed"] == tree_sha256(site, list(FILES))  # the installed-tree hashing
    (check,) = check_pins(PinsConfig(package_wheels={"mypkg": str(wheel)}), model_dir=None, model_pin=None,
                          model_revision=None, observed_revision=None, offload_pin=None, offload_actual="")
    assert check.ok and check.kind == "package_wheel" and check.detail is None


def test_a_mismatch_fails_the_gate_naming_the_first_differing_files(tmp_path: Path, site: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl")
    _installed(site, {**FILES, "mypkg/mod.py": b"def f():\n    return 2\n", "mypkg/local.py": b""},
               record_extra=("mypkg/gone.py",))
    seen = wheel_vs_installed(f"mypkg={wheel}")
    assert seen is not None and seen["differing"] == [
        "mypkg/gone.py (in RECORD, missing on disk)", "mypkg/local.py (installed, not in the wheel)",
        "mypkg/mod.py (content differs)"]
    checks = check_pins(PinsConfig(package_wheels={"mypkg": str(wheel)}), model_dir=None, model_pin=None,
                        model_revision=None, observed_revision=None, offload_pin=None, offload_actual="", runtime="cpu")
    assert not checks[0].ok and checks[0].expected == seen["wheel"] and checks[0].actual == seen["installed"]
    with pytest.raises(IdentityError) as exc:
        enforce(checks, when="before the run")
    assert "pin package_wheel 'mypkg'" in str(exc.value)
    assert f"3 of 5 package files differ from {wheel}; first: mypkg/gone.py" in str(exc.value)
    assert "mypkg/mod.py (content differs)" in str(exc.value)


def test_only_in_the_wheel_and_a_missing_distribution_or_wheel(tmp_path: Path, site: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {**FILES, "mypkg/new.py": b"N = 1\n"})
    _installed(site)
    seen = wheel_vs_installed(f"mypkg={wheel}")
    assert seen is not None and seen["differing"] == ["mypkg/new.py (only in the wheel)"]
    assert wheel_vs_installed(f"no-such-dist={wheel}") is None
    assert wheel_vs_installed(f"mypkg={tmp_path / 'absent.whl'}") is None
    (tmp_path / "bad.whl").write_text("not a zip")
    assert wheel_vs_installed(f"mypkg={tmp_path / 'bad.whl'}") is None
    (check,) = check_pins(PinsConfig(package_wheels={"mypkg": str(tmp_path / "bad.whl")}), model_dir=None, model_pin=None,
                          model_revision=None, observed_revision=None, offload_pin=None, offload_actual="")
    assert not check.ok and check.actual is None and "not a readable wheel" in (check.detail or "")
    (unset,) = check_pins(PinsConfig(package_wheels={"mypkg": "???"}), model_dir=None, model_pin=None, model_revision=None,
                          observed_revision=None, offload_pin=None, offload_actual="")
    assert not unset.ok and unset.expected == "???"


def test_the_probe_compares_inside_the_runtime_interpreter(tmp_path: Path) -> None:
    site = _installed(tmp_path / "rt-site")
    wheel = _wheel(tmp_path / "w.whl", {**FILES, "mypkg/mod.py": b"changed\n"})
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{site}"}
    out = subprocess.run([sys.executable, "-m", "runners.identity.probe", json.dumps({"package_wheels": [f"mypkg={wheel}"]})],
                         capture_output=True, text=True, check=True, env=env, cwd=tmp_path).stdout
    seen = parse_probe_output(out)["package_wheels"][f"mypkg={wheel}"]
    assert seen["differing"] == ["mypkg/mod.py (content differs)"] and seen["wheel"] != seen["installed"]


@pytest.mark.heavy  # measured 1.3 s in the fast tier (its budget is 2 minutes)
def test_pins_cli_and_runner_gate(tmp_path: Path, site: Path) -> None:
    from runners.errors import EXIT_IDENTITY, EXIT_OK
    from runners.pins import compose, observe_all
    from tests.runners.helpers import run_fake

    good, bad = _wheel(tmp_path / "good.whl"), _wheel(tmp_path / "bad.whl", {**FILES, "mypkg/mod.py": b"other\n"})
    _installed(site)
    result = observe_all(compose([f"+runtime.pins.package_wheels={{mypkg:'{good}'}}"]))
    assert f"runtime.pins.package_wheels.mypkg='{good}'" in result["overrides"] and not result["mismatched"]
    result = observe_all(compose([f"+runtime.pins.package_wheels={{mypkg:'{bad}'}}"]))
    (mm,) = result["mismatched"]
    assert mm["pin"] == "mypkg" and "first: mypkg/mod.py (content differs)" in mm["observed"]
    point = "phases.same_runtime.points=[{g: 4, n: 1}]"
    code, _ = run_fake(tmp_path / "ok", point, f"+runtime.pins.package_wheels={{mypkg:'{good}'}}")
    assert code == EXIT_OK
    code, run_dir = run_fake(tmp_path / "no", point, f"+runtime.pins.package_wheels={{mypkg:'{bad}'}}")
    assert code == EXIT_IDENTITY and not (run_dir / "records").exists()
