"""The config hash of a run: one SHA-256 over the typed config's plain data.

What is modelled: ``config_sha256``, the SHA-256 (hex, 64 characters) of the canonical JSON (sorted keys,
separators ``,`` / ``:``, no spaces) of ``conf.typed.plain_config(config)``: the rule
``results_schema.rules.config_rule.canonical_sha256``, which ``analysis validate`` applies to the manifest's saved
config (code ``config_hash_mismatch``); the environment manifest records it and resume compares it. What is
deliberately not modelled: which keys differ (resume names them, ``runners.orchestration.resume``).
"""

from __future__ import annotations

from conf.schema import Config
from conf.typed import plain_config
from results_schema.rules.config_rule import canonical_sha256


def config_sha256(config: Config) -> str:
    """SHA-256 (hex) of the canonical JSON (sorted keys, no spaces) of the config's plain data (``conf.typed.plain_config``;
    ``results_schema.rules.config_rule.canonical_sha256``)."""

    return canonical_sha256(plain_config(config))
