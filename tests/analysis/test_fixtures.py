"""The committed fixtures are what the generator makes, and they validate."""

from __future__ import annotations

from pathlib import Path

from analysis.validation.validate import validate_run
from results_schema.cli import check_paths

from .conftest import FIXTURES, make_fixtures


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_committed_synthetic_run_matches_the_generator(tmp_path):
    fresh = make_fixtures.valid_run(tmp_path / "synthetic_run")
    assert _files(fresh) == _files(FIXTURES / "synthetic_run")


def test_committed_fixtures_pass_the_schema_check_and_validation():
    assert check_paths([FIXTURES]) == 0
    rep = validate_run(FIXTURES / "synthetic_run")
    assert rep.valid, [i.message for i in rep.errors]
