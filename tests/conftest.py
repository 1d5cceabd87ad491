"""Shared fixtures. Markers are registered in pyproject.toml (``--strict-markers``)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The default 8-layer tiny Qwen2 model, built once into ``.cache/models`` and verified."""
    from runners.tiny_model import ensure_tiny_model

    return ensure_tiny_model(MODEL_CACHE)
