"""Scalar rules of JSON that the records' types carry and the codec's readers honour alike.

What is modelled: :func:`finite_or_null`, how a record writes a number that may be non-finite (an interval or
minimum detectable cost that does not exist is JSON ``null``: the records hold finite floats only);
:func:`schema_version_not_a_boolean`, the ``BeforeValidator`` of
``results_schema.records.base.SchemaVersion``: Python's ``True == 1``, so ``Literal[1]`` alone would accept
JSON ``true``, which the exported JSON Schema refuses. ``results_schema.codec.fast_structs`` knows it by
identity (msgspec never reads a JSON boolean as an integer, so the derived struct needs no counterpart).

What is deliberately not modelled: any other type's rules (they are pydantic constraints on the records).
"""

from __future__ import annotations

import math


def finite_or_null(x: float) -> float | None:
    """``x`` where it is finite, else None (written as JSON ``null``: see the module docstring)."""
    return x if math.isfinite(x) else None


def schema_version_not_a_boolean(value: object) -> object:
    """``value`` unchanged unless it is a boolean.

    Raises:
        ValueError: ``"schema_version must be the integer 1, not the boolean true"``.
    """
    if isinstance(value, bool):
        raise ValueError(f"schema_version must be the integer 1, not the boolean {str(value).lower()}")
    return value
