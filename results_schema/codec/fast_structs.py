"""msgspec decoders derived field for field from the ``results_schema`` pydantic models.

What is modelled: ``plan_for(model_cls)`` walks a pydantic model's fields and builds (1) a
``msgspec.Struct`` type with the same field names, JSON types and per-field constraints
(``ge`` / ``gt`` / ``le`` / ``lt``, lengths, anchored patterns, ``Literal`` values, ``StrEnum`` values
decoded by value into the member as pydantic does, unknown fields refused) and (2) a converter that
turns a decoded struct into the pydantic model without re-validating the fields, then runs the
model's own ``mode="after"`` validators (the cross-field rules), so a model comes out exactly as pydantic's strict validation would make it. A field with a
default is ``UNSET`` when absent from the text, which gives ``model_fields_set`` and the count of
keys the text held (``results_schema.codec.fast_json`` compares it with the keys in the text to refuse
a key given twice, which every JSON object decoder collapses). The struct types are not tracked by
Python's cyclic garbage collector (``gc=False``): a decoded JSON tree holds no reference cycle, and
tracked records make each collector pass traverse all of them.

msgspec is at least as strict as pydantic's strict JSON mode for every type mapped here: no string
is read as a number or boolean, no boolean as a number, no float as an integer; ``NaN`` /
``Infinity`` are not JSON and a number that overflows a 64-bit float is an error, so every decoded
float is finite (``allow_inf_nan=False`` holds by construction).

What is deliberately not modelled: anything ``plan_for`` cannot map one to one -- aliases, field
validators, ``mode="before"`` / ``"wrap"`` model validators, unions of several models, extra fields
allowed, post-init hooks, constraints other than those listed -- raises ``Unsupported``; such a
model is read by pydantic alone. Error messages are not produced here (the full reader names them).
"""

from __future__ import annotations

import copy
import inspect
import re
import types
from enum import StrEnum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from results_schema.codec.scalars import schema_version_not_a_boolean

__all__ = ["ModelPlan", "Unsupported", "field_default", "plan_for"]


class Unsupported(TypeError):
    """A model, field or type that has no one-to-one msgspec form (names which and why)."""


@dataclass(frozen=True)
class ModelPlan:
    """How one pydantic model is decoded by msgspec and rebuilt.

    Attributes:
        model: the pydantic model.
        struct: the generated ``msgspec.Struct`` type (same field names and order).
        decoder: a ``msgspec.json.Decoder`` of ``struct``.
        convert: ``struct instance -> (model instance, keys the JSON text held)``; raises what the
            model's validators raise (``ValueError`` / ``AssertionError``).
        fields: ``{field name: msgspec type}`` (what the field check test compares).
        rebuild: ``struct instance -> (model instance, keys the JSON text held)`` like ``convert`` but
            without running any validator, in nested models too (for structs whose cross-field rules were
            already checked: ``results_schema.reading.columns.RecordTable.models``).
    """

    model: type[BaseModel]
    struct: type[msgspec.Struct]
    decoder: msgspec.json.Decoder
    convert: Callable[[Any], tuple[BaseModel, int]]
    fields: dict[str, Any]
    rebuild: Callable[[Any], tuple[BaseModel, int]]


_PLANS: dict[type, ModelPlan] = {}
_FAILED: dict[type, Unsupported] = {}
_ALLOWED_PATTERN = re.compile(r"^\^[^$]*\$$")


def _pattern(pattern: str, where: str) -> str:
    r"""An anchored pattern whose meaning is the same for Python's ``re.search`` (msgspec) and Rust's regex
    (pydantic): ``^...$`` with ``$`` turned into ``\Z`` (Python's ``$`` also matches before a final newline)."""
    if not _ALLOWED_PATTERN.match(pattern) or "\\" in pattern:
        raise Unsupported(f"{where}: pattern {pattern!r} is not of the form ^...$ without escapes")
    return pattern[:-1] + r"\Z"


_META_KEYS: dict[type, str] = {at.Ge: "ge", at.Gt: "gt", at.Le: "le", at.Lt: "lt", at.MinLen: "min_length",
                               at.MaxLen: "max_length"}


def _meta_kwargs(metadata: list[Any], where: str) -> dict[str, Any]:
    """msgspec ``Meta`` keywords for a pydantic field's metadata; ``Unsupported`` for anything unknown."""
    out: dict[str, Any] = {}
    for item in metadata:
        key = _META_KEYS.get(type(item))
        if key is not None:
            out[key] = getattr(item, key)
        elif isinstance(item, FieldInfo):
            out.update(_meta_kwargs(item.metadata, where))
        elif type(item).__name__ == "AllowInfNan" and item.allow_inf_nan is False:
            continue  # msgspec never decodes a non-finite float from JSON
        elif type(item).__name__ == "_PydanticGeneralMetadata" and set(vars(item)) == {"pattern"}:
            out["pattern"] = _pattern(item.pattern, where)
        elif getattr(item, "func", None) is schema_version_not_a_boolean:
            continue  # msgspec never reads a JSON boolean as an integer (nor as Literal[1])
        else:
            raise Unsupported(f"{where}: constraint {item!r} has no msgspec form")
    return out


_SCALARS = (int, float, str, bool)


def _strip(ann: Any, where: str) -> tuple[Any, dict[str, Any]]:
    """``(bare annotation, Meta keywords)`` of a possibly ``Annotated`` annotation."""
    meta: dict[str, Any] = {}
    while get_origin(ann) is Annotated:
        base, *extra = get_args(ann)
        meta.update(_meta_kwargs(list(extra), where))
        ann = base
    return ann, meta


def _msgspec_type(ann: Any, where: str) -> Any:
    """The msgspec type of a pydantic annotation (``Unsupported`` when there is none one to one)."""
    ann, meta = _strip(ann, where)
    origin = get_origin(ann)
    if ann in _SCALARS or ann is type(None) or origin is Literal or isinstance(ann, type) and issubclass(ann, StrEnum):
        out: Any = ann
    elif ann is Any:
        out = Any
    elif isinstance(ann, type) and issubclass(ann, BaseModel):
        out = plan_for(ann).struct
    elif origin in (Union, types.UnionType):
        options = [_msgspec_type(a, where) for a in get_args(ann)]
        if sum(isinstance(o, type) and issubclass(o, msgspec.Struct) for o in options) > 1:
            raise Unsupported(f"{where}: a union of several models needs a tag")
        out = Union[tuple(options)]
    elif origin is tuple:
        args = get_args(ann)
        if len(args) == 2 and args[1] is Ellipsis:
            out = tuple[_msgspec_type(args[0], where), ...]  # type: ignore[misc]
        else:
            out = tuple[tuple(_msgspec_type(a, where) for a in args)]  # type: ignore[misc]
    elif origin is dict:
        key, value = get_args(ann)
        if key is not str and not (get_origin(key) is Literal and all(isinstance(k, str) for k in get_args(key))):
            raise Unsupported(f"{where}: dict keys must be str or a Literal of str, not {key!r}")
        out = dict[key, _msgspec_type(value, where)]  # type: ignore[valid-type,misc]
    else:
        raise Unsupported(f"{where}: type {ann!r} has no msgspec form")
    return Annotated[out, msgspec.Meta(**meta)] if meta else out


def _check_model(cls: type[BaseModel]) -> list[Callable[[Any], Any]]:
    """The model's after-validators, in definition order; ``Unsupported`` for what the converter cannot run."""
    if cls.model_config.get("extra") != "forbid":
        raise Unsupported(f"{cls.__name__}: extra={cls.model_config.get('extra')!r} (only 'forbid' is mapped)")
    if cls.__pydantic_post_init__ or cls.__private_attributes__:
        raise Unsupported(f"{cls.__name__}: post-init hook or private attributes")
    dec = cls.__pydantic_decorators__
    if dec.validators or dec.field_validators or dec.root_validators or dec.computed_fields:
        raise Unsupported(f"{cls.__name__}: field validators or computed fields")
    after = []
    for name, d in dec.model_validators.items():
        if d.info.mode != "after" or len(inspect.signature(d.func).parameters) != 1:
            raise Unsupported(f"{cls.__name__}.{name}: only mode='after' validators taking self are run")
        after.append(d.func)
    return after


def _keys_in(value: Any) -> int:
    """Keys of every JSON object inside an untyped value (dicts and lists at any depth)."""
    if isinstance(value, dict):
        return len(value) + sum(_keys_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(_keys_in(v) for v in value)
    return 0


def _model_converter(cls: type[BaseModel], validate: bool) -> Callable[[Any], tuple[Any, int]]:
    plan = plan_for(cls)
    return plan.convert if validate else plan.rebuild


def _value_converter(ann: Any, validate: bool = True) -> Callable[[Any], tuple[Any, int]] | None:
    """How a decoded value of this annotation becomes the model's value, with the keys it held; None when
    the decoded value is already the model's value and holds no JSON object. ``validate``: nested models
    run their validators."""
    ann, _ = _strip(ann, "")
    origin = get_origin(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return _model_converter(ann, validate)
    if origin is dict or ann is Any:
        return _plain
    if origin in (Union, types.UnionType):
        return _union_converter(get_args(ann), validate)
    if origin is tuple:
        args = get_args(ann)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _value_converter(args[0], validate)
            return None if item is None else _sequence(lambda _i: item)
        subs = [_value_converter(a, validate) or _plain for a in args]
        return None if all(_value_converter(a) is None for a in args) else _sequence(subs.__getitem__)
    return None


def _union_converter(options: tuple[Any, ...], validate: bool) -> Callable[[Any], tuple[Any, int]] | None:
    """A union's converter: a decoded struct goes to its model's converter, anything else counts its keys."""
    if all(_value_converter(a) is None for a in options):
        return None
    models = [b for b in (_strip(a, "")[0] for a in options) if isinstance(b, type) and issubclass(b, BaseModel)]
    by_struct = {plan_for(m).struct: _model_converter(m, validate) for m in models}

    def union(v: Any) -> tuple[Any, int]:
        conv = by_struct.get(type(v))
        return conv(v) if conv is not None else _plain(v)
    return union


def _sequence(item_at: Callable[[int], Callable[[Any], tuple[Any, int]]]) -> Callable[[Any], tuple[Any, int]]:
    def seq(v: tuple) -> tuple[Any, int]:
        pairs = [item_at(i)(x) for i, x in enumerate(v)]
        return tuple(p[0] for p in pairs), sum(p[1] for p in pairs)
    return seq


def _plain(v: Any) -> tuple[Any, int]:
    return v, _keys_in(v)


def _build(cls: type[BaseModel]) -> ModelPlan:
    after = _check_model(cls)
    fields: dict[str, Any] = {}
    spec: list[tuple[str, Any, Any]] = []
    required: list[str] = []
    optional: list[tuple[str, Callable[[], Any]]] = []
    nested: list[tuple[str, Any]] = []
    for name, f in cls.model_fields.items():
        where = f"{cls.__name__}.{name}"
        if f.alias is not None or f.validation_alias is not None:
            raise Unsupported(f"{where}: aliases are not mapped")
        typ = _msgspec_type(Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation, where)
        fields[name] = typ
        if _value_converter(f.annotation) is not None:
            nested.append((name, f.annotation))
        if f.is_required():
            spec.append((name, typ, msgspec.NODEFAULT))
            required.append(name)
        else:
            spec.append((name, Union[typ, msgspec.UnsetType], msgspec.UNSET))
            optional.append((name, field_default(f)))
    struct = msgspec.defstruct(f"{cls.__name__}Struct", spec, kw_only=True, forbid_unknown_fields=True, gc=False)
    convert = _converter(cls, required, optional, [(n, _value_converter(a)) for n, a in nested], after)
    rebuild = _converter(cls, required, optional, [(n, _value_converter(a, validate=False)) for n, a in nested], [])
    return ModelPlan(model=cls, struct=struct, decoder=msgspec.json.Decoder(struct), convert=convert, fields=fields,
                     rebuild=rebuild)


def _converter(cls: type[BaseModel], required: list[str], optional: list[tuple[str, Callable[[], Any]]],
               nested: list[tuple[str, Any]], after: list[Callable[[Any], Any]]) -> Callable[[Any], tuple[BaseModel, int]]:
    """``struct -> (model, keys the text held)``: fields copied (absent ones take the model's default), nested
    values converted, then the ``after`` validators run in order. Structs hold no reference cycle (JSON trees)."""
    n_required = len(required)
    new = object.__new__
    set_attr = object.__setattr__
    asdict = msgspec.structs.asdict
    unset = msgspec.UNSET

    def convert(s: Any) -> tuple[BaseModel, int]:
        values = asdict(s)
        fields_set = set(required)
        keys = n_required
        for name, default in optional:
            if values[name] is unset:
                values[name] = default()
            else:
                fields_set.add(name)
                keys += 1
        for name, conv in nested:
            if name in fields_set:
                values[name], k = conv(values[name])
                keys += k
        m = new(cls)
        set_attr(m, "__dict__", values)
        set_attr(m, "__pydantic_fields_set__", fields_set)
        set_attr(m, "__pydantic_extra__", None)
        set_attr(m, "__pydantic_private__", None)
        for check in after:
            m = check(m)
        return m, keys

    return convert


def field_default(f: FieldInfo) -> Callable[[], Any]:
    """The field's default as pydantic gives it: the factory's result, or a copy of a mutable default."""
    if f.default_factory is not None:
        return f.default_factory  # type: ignore[return-value]
    value = f.default
    if isinstance(value, (dict, list, set)):
        return lambda: copy.deepcopy(value)
    return lambda: value


def plan_for(cls: type[BaseModel]) -> ModelPlan:
    """The cached ``ModelPlan`` of ``cls``.

    Raises:
        Unsupported: ``cls`` (or a model inside it) has a field, type, constraint or validator with no
            one-to-one msgspec form; the message names it.
    """
    if cls in _FAILED:
        raise _FAILED[cls]
    plan = _PLANS.get(cls)
    if plan is None:
        try:
            plan = _PLANS[cls] = _build(cls)
        except Unsupported as exc:
            _FAILED[cls] = exc
            raise
    return plan
