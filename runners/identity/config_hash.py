"""The config hash of a run: one SHA-256 over the typed config's plain data.

What is modelled: ``config_sha256``, the SHA-256 (hex, 64 characters) of the canonical JSON (sorted keys,
separators ``,`` / ``:``, no spaces) of ``conf.typed.plain_config(config)``; the environment manifest
records it and resume compares it. What is deliberately not modelled: which keys differ (resume names
them, ``runners.orchestration.resume``).
"""

from __future__ import annotations

import hashlib
import json

from conf.schema import Config
from conf.typed import plain_config


def config_sha256(config: Config) -> str:
    """SHA-256 (hex) of the canonical JSON (sorted keys, no spaces) of the config's plain data (``conf.typed.plain_config``)."""

    data = plain_config(config)
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
