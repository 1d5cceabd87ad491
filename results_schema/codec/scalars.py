"""Scalar rules of JSON that the records' types carry and the codec's readers honour alike.

What is modelled: :func:`schema_version_not_a_boolean`, the ``BeforeValidator`` of
``results_schema.records.base.SchemaVersion``: Python's ``True == 1``, so ``Literal[1]`` alone would accept
JSON ``true``, which the exported JSON Schema refuses. ``results_schema.codec.fast_structs`` knows it by
identity (msgspec never reads a JSON boolean as an integer, so the derived struct needs no counterpart).

What is deliberately not modelled: any other type's rules (they are pydantic constraints on the records).
"""

from __future__ import annotations


def schema_version_not_a_boolean(value: object) -> object:
    """``value`` unchanged unless it is a boolean.

    Raises:
        ValueError: ``"schema_version must be the integer 1, not the boolean true"``.
    """
    if isinstance(value, bool):
        raise ValueError(f"schema_version must be the integer 1, not the boolean {str(value).lower()}")
    return value
