"""The config hash rule, one rule for the runner that records ``config_sha256`` and the analysis that checks it.

What is modelled: ``canonical_sha256(data)``, the SHA-256 (hex, 64 characters) of the canonical JSON of plain data
(dicts, lists, ``str``, ``int``, ``float``, ``bool``, None): ``json.dumps`` with sorted keys, separators ``,`` /
``:`` (no spaces), ASCII escapes and Python's texts of the non-finite floats (``Infinity``, ``-Infinity``,
``NaN``). The runner's ``config_sha256`` is it over ``conf.typed.plain_config(config)``
(``runners.identity.config_hash``). ``environment-manifest.json`` records that plain data as strict JSON, a
non-finite float (a serving request rate of ``.inf``) as its Python text ``"inf"`` / ``"-inf"`` / ``"nan"``
(``non_finite_as_text``, ``runners.identity.manifest``); ``non_finite_from_text`` is its inverse (each such text
back to its float). ``config_matches(config, sha256)``: the manifest's ``config`` read back is plain data whose
``canonical_sha256`` is ``sha256`` (``analysis validate``, code ``config_hash_mismatch``).

The text encoding is not one to one: a config string that is itself ``"inf"``, ``"-inf"`` or ``"nan"`` is
recorded as that same text. So ``config_matches`` tries each reading of those texts (float or string), the
all-float reading first, over the first ``MAX_AMBIGUOUS_TEXTS`` of them (at most ``2 ** MAX_AMBIGUOUS_TEXTS``
hashes; texts beyond those are read as floats).

What is deliberately not modelled: which key of a config that does not match differs (a hash names none; resume
compares the typed configs: ``runners.orchestration.resume``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from typing import Any

NON_FINITE_TEXT: dict[str, float] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
"""The manifest's text of each non-finite float (``str(float)``) and the float it stands for."""

MAX_AMBIGUOUS_TEXTS = 10
"""How many ``NON_FINITE_TEXT`` texts of one config ``config_matches`` reads both ways (2 ** 10 = 1024 hashes)."""


def canonical_sha256(data: Any) -> str:
    """SHA-256 (hex, 64 characters) of ``json.dumps(data, sort_keys=True, separators=(",", ":"))`` (UTF-8).

    Args:
        data: plain data (dicts with ``str`` keys, lists, ``str``, ``int``, ``float`` (non-finite included),
            ``bool``, None).

    Raises:
        TypeError: ``data`` holds a value ``json`` cannot write (e.g. an enum member, a set).
    """
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def non_finite_as_text(value: Any) -> Any:
    """``value`` with every non-finite float written as its Python text (``"inf"``, ``"-inf"``, ``"nan"``).

    The manifest is strict JSON (no ``Infinity``); the config may hold ``.inf`` (a serving request rate: every
    request at t = 0). ``config.yaml`` and ``config_sha256`` keep the float; only the manifest's copy is text.
    Tuples become lists (as JSON writes them); dict keys are kept as they are.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: non_finite_as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [non_finite_as_text(v) for v in value]
    return value


def non_finite_from_text(value: Any) -> Any:
    """The inverse of ``non_finite_as_text``: every value ``"inf"`` / ``"-inf"`` / ``"nan"`` back to its float.

    Exact for a config none of whose strings is one of those texts (see the module docstring); dict keys are
    kept as they are.
    """
    return _read(value, iter(()))


def config_matches(config: dict[str, Any], sha256: str) -> bool:
    """Whether the manifest's ``config`` (as ``non_finite_as_text`` recorded it) hashes to ``sha256``.

    Each reading of its ``NON_FINITE_TEXT`` texts (float, or a string that was that text) is tried, the
    all-float one (``non_finite_from_text``) first; see the module docstring for the bound.

    Returns:
        True when some reading's ``canonical_sha256`` equals ``sha256``.
    """
    n = min(_count_texts(config), MAX_AMBIGUOUS_TEXTS)
    for mask in range(2 ** n):  # bit i set: the i-th text was a string; 0 = every text a float
        if canonical_sha256(_read(config, (not (mask >> i) & 1 for i in range(n)))) == sha256:
            return True
    return False


def _read(value: Any, as_float: Iterator[bool]) -> Any:
    """``value`` with its ``NON_FINITE_TEXT`` texts read in walk order: as floats while ``as_float`` says so or is
    exhausted, else kept as strings."""
    if isinstance(value, str) and value in NON_FINITE_TEXT:
        return NON_FINITE_TEXT[value] if next(as_float, True) else value
    if isinstance(value, dict):
        return {k: _read(v, as_float) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_read(v, as_float) for v in value]
    return value


def _count_texts(value: Any) -> int:
    """How many values of ``value`` are ``NON_FINITE_TEXT`` texts."""
    if isinstance(value, str):
        return int(value in NON_FINITE_TEXT)
    if isinstance(value, dict):
        return sum(_count_texts(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_count_texts(v) for v in value)
    return 0
