"""One-pass strict reading of a JSON line that certainly passes ``results_schema.io.parse_line``'s full path.

What is modelled: ``fast_parse`` validates the raw bytes once with pydantic's strict JSON mode and proves,
cheaply, what that mode does not check itself: no ``NaN`` / ``Infinity`` constant, no non-finite float in an
untyped container, and no object holding a key twice (the keys in the text equal the distinct keys the
validated objects hold). Any line it cannot prove returns None and takes the full, hook-based path, which
accepts it or names the error; the accept/reject decision is therefore the full path's.

What is deliberately not modelled: error messages (the full path gives them).
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""One JSON string token (escapes included); outside strings, a JSON colon only separates a key from its value."""


_NESTED: dict[type, frozenset[str]] = {}


def _may_hold_objects(annotation: object) -> bool:
    """Whether a field of this type can hold a JSON object (a model, a dict, ``Any``) at any depth."""
    if annotation is Any or annotation is object or annotation is dict:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    if get_origin(annotation) is dict:
        return True
    return any(_may_hold_objects(a) for a in get_args(annotation) if not isinstance(a, (str, int, float, bool)))


def _nested_fields(cls: type[BaseModel]) -> frozenset[str]:
    """Fields of ``cls`` whose values can hold JSON objects (cached per class)."""
    got = _NESTED.get(cls)
    if got is None:
        got = _NESTED[cls] = frozenset(n for n, f in cls.model_fields.items() if _may_hold_objects(f.annotation))
    return got


def _distinct_keys(value: object) -> int:
    """Keys of every JSON object that produced ``value`` (``model_fields_set`` of models, ``len`` of dicts);
    -1 when an untyped container holds a non-finite float."""
    if isinstance(value, BaseModel):
        fields = value.model_fields_set
        keys, parts = len(fields), [_distinct_keys(getattr(value, k)) for k in _nested_fields(type(value)) & fields]
    elif isinstance(value, dict):
        keys, parts = len(value), [_distinct_keys(v) for v in value.values()]
    elif isinstance(value, (tuple, list)):
        keys, parts = 0, [_distinct_keys(v) for v in value]
    else:
        return -1 if isinstance(value, float) and not math.isfinite(value) else 0
    return -1 if -1 in parts else keys + sum(parts)


def fast_parse(raw: bytes, model_cls: type[M]) -> M | None:
    """The model when the line is certainly accepted by ``parse_line``'s full path, else None (then use it).

    Accepts only when (1) the text holds no ``NaN`` / ``Infinity`` (anywhere, strings included:
    conservative), (2) pydantic's strict JSON validation of the raw text succeeds (its parser takes
    RFC 8259 JSON only; every ``results_schema`` model refuses non-finite floats, so a number that
    overflows to infinity fails there), (3) no float inside an untyped container (``dict[str, Any]``)
    is non-finite, and (4) the keys in the text equal the distinct keys the validated objects hold, so
    no object repeats a key (a repeat is collapsed by the parser). Keys in the text = colons outside
    strings; the total count of colons is tried first (equal: no colon in a string), then the count
    with strings removed. Anything else, an integral float for an integer field included, goes to the
    full path, which accepts or names the error.
    """
    if b"NaN" in raw or b"Infinity" in raw:
        return None
    try:
        model = model_cls.model_validate_json(raw, strict=True)
    except (ValueError, UnicodeDecodeError):  # ValidationError is a ValueError
        return None
    keys = _distinct_keys(model)
    if keys < 0:
        return None
    if raw.count(b":") != keys and _STRING.sub(b"", raw).count(b":") != keys:
        return None
    return model
