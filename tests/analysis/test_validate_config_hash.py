"""``analysis validate`` holds the manifest's saved config to its ``config_sha256`` (check ``manifest``, code
``config_hash_mismatch``): a run whose saved config was edited after the run is invalid."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from analysis.validation.validate import validate_run
from results_schema.records.manifest import FILE_NAME as MANIFEST
from results_schema.rules.config_rule import canonical_sha256, non_finite_from_text

from .conftest import FIXTURES

REAL = FIXTURES / "real_tiny_run"


def _copy_with_manifest_config(tmp_path: Path, edit) -> Path:
    """A copy of ``real_tiny_run`` whose manifest ``config`` went through ``edit`` and whose ``SHA256SUMS`` line of
    the manifest was written anew (so only the config, not the file checksum, can tell)."""
    run = tmp_path / "run"
    shutil.copytree(REAL, run, ignore=shutil.ignore_patterns("summary"))
    m = json.loads((run / MANIFEST).read_text())
    edit(m["config"])
    (run / MANIFEST).write_text(json.dumps(m, indent=2) + "\n")
    digest = hashlib.sha256((run / MANIFEST).read_bytes()).hexdigest()
    sums = run / "SHA256SUMS"
    sums.write_text("".join(f"{digest}  {MANIFEST}\n" if line.endswith(f"  {MANIFEST}") else f"{line}\n"
                            for line in sums.read_text().splitlines()))
    return run


def test_a_manifest_rewritten_with_its_config_unchanged_stays_valid(tmp_path: Path) -> None:
    rep = validate_run(_copy_with_manifest_config(tmp_path, lambda config: None))
    assert rep.valid, [i.message for i in rep.errors]
    assert "config_hash_mismatch" not in {i.code for i in rep.issues}


def test_an_edited_saved_config_is_a_config_hash_mismatch_naming_both_hashes(tmp_path: Path) -> None:
    def edit(config: dict) -> None:
        assert config["workload"]["seed"] == 0
        config["workload"]["seed"] = 1

    run = _copy_with_manifest_config(tmp_path, edit)
    rep = validate_run(run)
    assert not rep.valid
    assert {i.code for i in rep.errors} == {"config_hash_mismatch"}, [i.message for i in rep.errors]
    (err,) = rep.errors
    want = json.loads((REAL / MANIFEST).read_text())["config_sha256"]
    got = canonical_sha256(non_finite_from_text(json.loads((run / MANIFEST).read_text())["config"]))
    assert got != want
    assert str(run) in err.message and f"hashes to {got}" in err.message and f"config_sha256 {want}" in err.message
    assert err.path == MANIFEST and err.phase is None
    assert [c.name for c in rep.checks if not c.passed] == ["manifest"]
