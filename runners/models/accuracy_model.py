"""An accuracy phase's own model (``accuracy_model``): where it is, its layer count, its identity check.

What is modelled: the phase-level model of ``kind: accuracy`` phases (``+experiment=reproduce``
loads the committed, trained ``eval_models/tiny-answering-qwen2-l4-h128`` there while the
performance phases keep the run's model): its directory (relative = repository root), its
``config.json`` ``num_hidden_layers`` (which sizes the phase's offload points) and the check of
every file against its ``SHA256SUMS`` before any process starts.

What is deliberately not modelled: the run's own model (``runners.identity.gates``).
"""

from __future__ import annotations

import json
from pathlib import Path

from conf.schema_matrix import MatrixConfig

from runners.errors import EXIT_IDENTITY, PlanError, RunnerError
from runners.paths import abs_path
from runners.models.tiny_model import verify_model_dir


def accuracy_model_dir(configured: str) -> Path:
    """Absolute directory of an accuracy phase's ``accuracy_model`` (relative = repository root)."""
    return abs_path(configured)


def check_accuracy_model(phase: str, configured: str | None) -> None:
    """An accuracy phase's own model (if any) exists and matches its ``SHA256SUMS``.

    Raises:
        RunnerError: (identity) naming the phase, the directory and the file that differs.
    """
    if not configured:
        return

    try:
        verify_model_dir(accuracy_model_dir(configured))
    except (OSError, ValueError) as exc:
        raise RunnerError(f"identity gate: accuracy phase {phase!r}: accuracy_model={configured!r}: {exc}",
                          EXIT_IDENTITY) from None


def phase_layers(phase: str, matrix: MatrixConfig, run_layers: int) -> int:
    """Decoder layers of the model an accuracy phase loads: its ``accuracy_model`` (its ``config.json``
    ``num_hidden_layers``), else the run's model's (``run_layers``); the accuracy kind's
    (``runners.kinds.accuracy``).

    Raises:
        PlanError: the accuracy model's ``config.json`` is missing or has no ``num_hidden_layers``.
    """
    if not matrix.accuracy_model:
        return run_layers
    config = accuracy_model_dir(matrix.accuracy_model) / "config.json"
    try:
        return int(json.loads(config.read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PlanError(f"phase {phase!r}: accuracy_model {matrix.accuracy_model!r}: cannot read "
                        f"num_hidden_layers from {config}: {exc}") from None
