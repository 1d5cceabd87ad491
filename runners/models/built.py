"""Models built by this project into its model cache (``model.source`` ``tiny`` and ``smollm2``).

What is modelled: where a built model lives (``<model.cache_dir>/<name>``) and building it once, verified
against its ``SHA256SUMS``. Not modelled: a ``source: path`` directory (the identity gate checks it as given).
"""

from __future__ import annotations

import time
from pathlib import Path

from conf.schema_stack import ModelConfig

from runners.paths import abs_path
from runners.models.tiny_model import ensure_tiny_model

BUILT_SOURCES = frozenset({"tiny", "smollm2"})
"""``model.source`` values whose model this project builds (once, at the identity gate)."""


def built_dir(model: ModelConfig) -> Path:
    """The cache directory of a built model (it may not exist yet).

    Raises:
        ValueError: ``model.source`` is not a built source.
    """
    cache = abs_path(model.cache_dir)
    if model.source == "tiny":
        from runners.models.tiny_model import tiny_model_name

        t = model.tiny
        return cache / tiny_model_name(t.num_layers, t.hidden_size, t.seed)
    if model.source == "smollm2":
        from runners.models.smollm2 import smollm2_dir

        return smollm2_dir(cache)
    raise ValueError(f"model.source={model.source} is not built here (built: {sorted(BUILT_SOURCES)})")


def ensure_built(model: ModelConfig) -> tuple[Path, float]:
    """Build the model into its cache directory unless it is there, then verify it.

    Returns:
        ``(verified directory, seconds spent building: 0.0 when it was cached)``.

    Raises:
        ValueError: not a built source, or the built or cached files do not verify.
        OSError: the cache is not writable.
    """
    if model.source == "smollm2":
        from runners.models.smollm2 import ensure_smollm2

        return ensure_smollm2(abs_path(model.cache_dir))

    d = built_dir(model)
    cached = (d / "SHA256SUMS").is_file()
    start = time.monotonic()
    t = model.tiny
    out = ensure_tiny_model(abs_path(model.cache_dir), num_layers=t.num_layers, hidden_size=t.hidden_size, seed=t.seed)
    return out, 0.0 if cached else time.monotonic() - start
