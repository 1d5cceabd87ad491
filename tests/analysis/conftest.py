"""Fixture run directories for analysis tests (built once per session by tests/fixtures/make_fixtures.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _load_make_fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_fixtures = _load_make_fixtures()


@pytest.fixture(scope="session")
def fixture_runs(tmp_path_factory) -> dict[str, Path]:
    """``synthetic_valid`` + every edge case of ``make_fixtures.EDGE_CASES``."""
    return make_fixtures.build_all(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="session")
def valid_run(fixture_runs) -> Path:
    return fixture_runs["synthetic_valid"]


def model_dir_for(run: Path, request) -> Path | None:
    """None when the run's model path (or ``run/model``) exists; else the locally rebuilt tiny model.

    Real tiny runs record the absolute path of the tiny model under ``.cache/models``; on a
    fresh clone it is rebuilt deterministically by the session fixture ``tiny_model_dir``.
    """
    import json

    if (run / "model" / "config.json").is_file():
        return None
    for runs in sorted(run.glob("*-runs.jsonl")):
        for line in runs.read_text().splitlines():
            model = Path(json.loads(line)["record"]["model"])
            return None if (model / "config.json").is_file() else request.getfixturevalue("tiny_model_dir")
    return None
