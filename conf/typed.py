"""The one path from a composed config to the schema's own types, and back to plain data.

What is modelled: ``load_config`` (a composed ``DictConfig`` plus the command-line overrides ->
``conf.schema.Config``), ``load_saved_config`` (a run directory's saved ``config.yaml`` -> ``Config``),
``typed_config`` (plain data -> ``Config``, validated by pydantic against the dataclasses themselves with
``extra="forbid"``) and ``plain`` (a schema object -> the plain data a run saves and hashes: dataclass fields
in declaration order, choice fields as their strings). ``plain(load_config(...))`` is exactly the plain dict
the runner saved before configs were typed, so ``config.yaml`` and the config hash are unchanged.

``???`` (OmegaConf's MISSING) stays the string ``???`` in string fields -- identity pins, ``model.path``,
``model.sha256sums_sha256`` -- where the identity gate reports it (fail closed); in any other field it is a
config error naming the key.

What is deliberately not modelled: composing (Hydra, ``runners.compose_check``); rules across fields
(``runners.planning.plan``, ``runners.identity.gates``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig

from conf.ranges import check_numbers
from conf.schema import Config, ConfigError, checked_plain_config, checked_saved_config, omit_defaults, unknown_key


_ADAPTERS: dict[type, Any] = {}


def _adapter(cls: type) -> Any:
    """pydantic's ``TypeAdapter`` of a schema dataclass (built once per class)."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def _where(loc: Sequence[Any]) -> str:
    """A pydantic error location as the config's dotted key (``phases.same_runtime.repeats``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "json-or-python", "lax-or-strict")):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _dataclass_at(cls: type[Any], loc: Sequence[Any]) -> type[Any]:
    """The schema dataclass holding the key at pydantic location ``loc`` + one more part, from ``cls`` down
    (``Optional[X]`` is ``X``; a ``Dict[str, X]`` key or a ``List[X]`` index is ``X``; pydantic's own parts
    are skipped)."""
    import typing

    t: Any = cls
    for part in loc:
        if dataclasses.is_dataclass(t):
            if str(part) not in {f.name for f in dataclasses.fields(t)}:
                continue  # a pydantic location part (``function-after[...]``), not a field
            t = typing.get_type_hints(t)[str(part)]
        else:
            args = [a for a in typing.get_args(t) if a is not type(None)]
            t = args[-1] if args else t
        while not dataclasses.is_dataclass(t) and typing.get_origin(t) is typing.Union:
            t = next(a for a in typing.get_args(t) if a is not type(None))
    assert isinstance(t, type) and dataclasses.is_dataclass(t)  # extra keys are refused by dataclasses only
    return t


def typed_config(data: Mapping[str, Any]) -> Config:
    """``data`` (a resolved plain config, every schema key present) validated into ``Config``.

    Raises:
        ConfigError: an unknown key, a value of the wrong type (``???`` in a non-string field included),
            naming the dotted key, the value and what the schema allows there; a number outside its range
            (``conf.ranges.check_numbers``: NaN anywhere, an infinity or a negative where it means nothing).
    """
    config: Config = validate_as(Config, data)
    check_numbers(config)
    return config


def validate_as(cls: type[Any], data: Mapping[str, Any], where: str = "") -> Any:
    """``data`` validated into the schema dataclass ``cls`` (fields left out take the schema's default).

    Args:
        cls: a dataclass of ``conf.schema`` (``MatrixConfig``, ``RuntimeConfig``, ...).
        data: its plain data.
        where: dotted key of ``data`` in the whole config, prefixed to the keys in messages.

    Raises:
        ConfigError: as :func:`typed_config`.
    """
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(dict(data))
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(k for k in (where, _where(err["loc"])) if k)
        if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            owner = _dataclass_at(cls, err["loc"][:-1])
            raise ConfigError(unknown_key(key, [f.name for f in dataclasses.fields(owner)], owner.__name__)) from None
        value = err["input"]
        if value == "???":
            raise ConfigError(f"{key} is ??? (required, not given): {err['msg']}; set {key}=VALUE") from None
        raise ConfigError(f"{key}={value!r}: {err['msg']}") from None


def declare_overlay_pins(config: Config) -> Config:
    """Declare every ``runtime.overlay_source_root`` (the run's and each phase's) as a ``pins.source_trees`` pin.

    The pin is ``???`` unless given, so the identity gate records which published code ran and
    refuses to run until its tree hash is provided (fail closed; ``python -m runners.pins`` observes
    it). Changes ``config`` in place and returns it; nothing changes when no root is set.
    """
    for rt in [config.runtime, *(ph.runtime for ph in config.phases.values())]:
        if rt is not None and rt.overlay_source_root:
            rt.pins.source_trees.setdefault(rt.overlay_source_root, "???")
    return config


def load_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> Config:
    """A composed config checked (``conf.schema.checked_plain_config``), typed (:func:`typed_config`), its
    overlay source roots declared as pins (:func:`declare_overlay_pins`).

    Every Hydra entry point (``runners.matrix``, ``runners.pins``) calls this once and passes the result on.

    Args:
        cfg: the composed config, without its ``hydra`` node (modified in place: typed text of pins).
        overrides: the command-line overrides as Hydra received them.

    Raises:
        ConfigError: naming the key (see both functions).
    """
    return declare_overlay_pins(typed_config(checked_plain_config(cfg, overrides)))


def load_saved_config(saved: Mapping[str, Any]) -> Config:
    """A run directory's saved config (plain data) checked and typed.

    Raises:
        ConfigError: unknown key or a value of the wrong type, naming the key.
    """
    return declare_overlay_pins(typed_config(checked_saved_config(saved)))


def plain(obj: Any) -> Any:
    """Plain data of a schema object: dataclasses as dicts (fields in declaration order), enums as values.

    ``plain(typed_config(d)) == d`` for every ``d`` that ``typed_config`` accepts, key order included.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def plain_config(config: Config) -> dict[str, Any]:
    """The plain dict of ``config`` that a run saves (``config.yaml``), hashes and records in its manifest
    (``conf.schema.omit_defaults``: the fields marked ``added_field`` left out while at their default)."""
    out = plain(config)
    assert isinstance(out, dict)  # a dataclass's plain form is a dict
    return omit_defaults(out)
