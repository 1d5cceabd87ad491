"""One-pass strict reading of a JSON line that certainly passes ``results_schema.codec.io.parse_line``'s full path.

What is modelled: ``fast_parse`` decodes the raw bytes once with msgspec into a struct derived field for
field from the pydantic model (``results_schema.codec.fast_structs``: same fields, JSON types and constraints,
unknown fields refused, no coercion, every float finite), rebuilds the model and runs its cross-field
validators, then proves what no JSON object decoder checks: no object holds a key twice (the keys in the
text equal the keys the decoded objects hold, since a decoder keeps only the last of a repeated key). Any
line it cannot prove returns None and takes the full, hook-based path, which accepts it or names the
error; the accept/reject decision is therefore the full path's.

What is deliberately not modelled: error messages (the full path gives them); models with no one-to-one
msgspec form (``fast_structs.Unsupported``) are validated by pydantic's strict JSON mode here instead,
with the same duplicate-key proof.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec
from pydantic import BaseModel

from results_schema.codec.fast_structs import ModelPlan, Unsupported, plan_for

__all__ = ["fast_parse", "fast_struct"]

M = TypeVar("M", bound=BaseModel)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""One JSON string token (escapes included); outside strings, a JSON colon only separates a key from its value."""


def _plan(model_cls: type[BaseModel]) -> ModelPlan | None:
    try:
        return plan_for(model_cls)
    except Unsupported:
        return None


def _keys_held(value: object) -> int:
    """Keys of every JSON object that produced ``value`` (``model_fields_set`` of models, ``len`` of dicts)."""
    if isinstance(value, BaseModel):
        return len(value.model_fields_set) + sum(_keys_held(getattr(value, k)) for k in value.model_fields_set)
    if isinstance(value, dict):
        return len(value) + sum(_keys_held(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_keys_held(v) for v in value)
    return 0


def _pydantic_parse(raw: bytes, model_cls: type[M]) -> tuple[M, int] | None:
    if b"NaN" in raw or b"Infinity" in raw:  # pydantic's parser would accept them inside dict[str, Any]
        return None
    try:
        model = model_cls.model_validate_json(raw, strict=True)
    except (ValueError, UnicodeDecodeError):  # ValidationError is a ValueError
        return None
    return model, _keys_held(model)


def _keys_in_text(raw: bytes, keys: int) -> bool:
    """Whether the text holds exactly ``keys`` keys (colons outside strings): no object repeats a key."""
    return raw.count(b":") == keys or _STRING.sub(b"", raw).count(b":") == keys


def fast_struct(raw: bytes, plan: ModelPlan) -> tuple[msgspec.Struct, BaseModel] | None:
    """``(derived struct, model)`` when the line is certainly accepted by ``parse_line``'s full path, else None.

    Accepts only when (1) msgspec decodes the text into ``plan.struct`` (strict RFC 8259 JSON, no ``NaN`` /
    ``Infinity``, no number overflowing a 64-bit float, no coercion, no unknown or missing field, every
    constraint met), (2) the model's own cross-field validators pass on the model built from it
    (``plan.convert``), and (3) the keys in the text equal the keys the decoded objects hold, so no object
    repeats a key. Keys in the text = colons outside strings; the total count of colons is tried first
    (equal: no colon in a string), then the count with strings removed. Anything else, an integral float for
    an integer field included, goes to the full path, which accepts or names the error.
    """
    try:
        struct = plan.decoder.decode(raw)
        model, keys = plan.convert(struct)
    except (msgspec.DecodeError, ValueError, AssertionError, UnicodeDecodeError):
        return None
    return (struct, model) if _keys_in_text(raw, keys) else None


def fast_parse(raw: bytes, model_cls: type[M]) -> M | None:
    """The model when the line is certainly accepted by ``parse_line``'s full path, else None (then use it).

    A model with a derived struct is read by ``fast_struct``; one without (``fast_structs.Unsupported``) by
    pydantic's strict JSON mode, with the same proof that no object repeats a key.
    """
    plan = _plan(model_cls)
    if plan is None:
        got = _pydantic_parse(raw, model_cls)
        return got[0] if got is not None and _keys_in_text(raw, got[1]) else None
    decoded = fast_struct(raw, plan)
    return None if decoded is None else decoded[1]  # type: ignore[return-value]
