"""Compose ``conf`` as the entry points do and turn every compose error into one line.

What is modelled: ``compose_checked(overrides)`` composes the config with Hydra's compose
API (the same config search path and defaults as ``@hydra.main``) and raises ``ConfigError``
with one line naming the override, the key or value at fault, the nearest real one and the
allowed ones: an unknown group option (``+experiment=nope``, ``runtime=cpux``), an unknown
key (``phases.same_runtime.repeatz=2``: the keys of that node), a value of the wrong type or
outside an enum, a group not in the defaults list, an override that does not parse. Schema
entries (``base_<group>``, registered so the YAML files can extend them) are not selectable
(``refuse_schema_choices``) and never listed as allowed.

What is deliberately not modelled: Hydra's own flags (``--help``, ``--cfg``, ``-m``), which
``@hydra.main`` handles; the checks and typing of a composed config (``conf.typed.load_config``).
"""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from typing import Any, Mapping, Sequence

from conf.schema import ConfigError, nearest, unknown_key

SCHEMA_PREFIX = "base_"
"""Options with this prefix are the groups' dataclass schemas, not configs a user selects."""


def selectable(options: Sequence[str]) -> list[str]:
    """The options of a group a user may select (schema entries left out), sorted."""
    return sorted(o for o in options if not o.startswith(SCHEMA_PREFIX))


def _group_options(group: str) -> list[str]:
    from hydra.core.global_hydra import GlobalHydra

    try:
        return selectable(GlobalHydra.instance().config_loader().get_group_options(group))
    except Exception:  # noqa: BLE001 - an unknown group has no options; the message says so
        return []


def refuse_schema_choices(choices: Mapping[str, Any]) -> None:
    """Refuse a schema entry chosen for a group (``runtime=base_runtime``).

    Args:
        choices: ``hydra.runtime.choices`` of a composed config (group -> option).

    Raises:
        ConfigError: naming the group, the option and the selectable ones.
    """
    for group, option in choices.items():
        if isinstance(option, str) and option.startswith(SCHEMA_PREFIX) and not str(group).startswith("hydra/"):
            name = str(group).split("@")[0]
            raise ConfigError(f"{group}={option}: {option!r} is the schema of group {name!r}, not a config to "
                              f"select; allowed: {', '.join(_group_options(name))}")


def _missing_option(exc: Any, overrides: Sequence[str]) -> str:
    """``+experiment=nope`` / ``runtime=cpux``: the option, the nearest one, the allowed ones."""
    missing = str(getattr(exc, "missing_cfg_file", "") or "")
    group, _, name = missing.rpartition("/")
    options = selectable(list(getattr(exc, "options", None) or []))
    given = next((o for o in overrides if o.lstrip("+").split("=")[0].split("@")[0] == group), f"{group}={name}")
    if not options:
        return f"{given}: no config {missing!r} (no option of group {group!r} is found)"
    return f"{given}: {name!r} is not an option of {group!r}{nearest(name, options)}; allowed: {', '.join(options)}"


def _unknown_key(cause: Any, key: str, given: str) -> str:
    """``phases.same_runtime.repeatz=2``: the key, the nearest real key of that node, the node's keys."""
    obj = getattr(cause, "object_type", None)
    known = sorted(f.name for f in fields(obj)) if obj is not None and is_dataclass(obj) else []
    parent = key.rpartition(".")[0]
    if not known:  # a mapping field (runtime.env, pins.packages): its keys are added with a leading '+'
        add = "" if given.startswith("+") else f" (a new key of a mapping is added with a leading '+': +{given})"
        return f"{given}: unknown key {key!r}{add}"
    return f"{given}: {unknown_key(key, known, parent or getattr(obj, '__name__', 'the config root'))}"


def _bad_value(cause: Any, given: str) -> str:
    msg = str(getattr(cause, "msg", "") or str(cause)).splitlines()[0]
    enum = re.search(r"expected one of \[(.*)\]", msg)
    if enum:
        allowed = [a.strip() for a in enum.group(1).split(",")]
        value = given.split("=", 1)[1] if "=" in given else ""
        return f"{given}: {value!r} is not allowed{nearest(value, allowed)}; allowed: {', '.join(allowed)}"
    return f"{given}: {msg}"


def _composition(exc: Exception, overrides: Sequence[str]) -> str:
    """One line for a ``ConfigCompositionException`` (unknown key, bad value, group not in the defaults)."""
    from omegaconf.errors import ConfigKeyError, ValidationError

    text = str(exc)
    m = re.search(r"Could not override '([^']+)'|Error merging override (\S+?)=", text)
    key = (m.group(1) or m.group(2)) if m else ""
    given = next((o for o in overrides if key and o.lstrip("+~").split("=")[0] == key), key or "")
    cause = exc.__cause__
    if "No match in the defaults list" in text:
        options = _group_options(key)
        return (f"{given}: group {key!r} is not selected by the base config, so it cannot be overridden; select it "
                f"with +{given.lstrip('+')} (allowed: {', '.join(options)})")
    if isinstance(cause, ConfigKeyError) or "not in" in str(cause):
        return _unknown_key(cause, str(getattr(cause, "full_key", "") or key) if key else key, given)
    if isinstance(cause, ValidationError):
        return _bad_value(cause, given)
    return f"{given + ': ' if given else ''}{' '.join(text.split())}"


def task_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides of the config itself (Hydra's ``overrides.task``): ``hydra.*`` / ``hydra/`` ones left out."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]


def compose_checked(overrides: Sequence[str], *, config_name: str = "config") -> Any:
    """The composed config (``DictConfig``, without its ``hydra`` node), or one line of what is wrong.

    Args:
        overrides: Hydra overrides as typed (``hydra.*`` overrides are left to Hydra and skipped).
        config_name: the primary config of ``conf``.

    Raises:
        ConfigError: the overrides do not compose, or select a schema entry (one line; see module docstring).
    """
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf import open_dict, read_write
    from omegaconf.errors import OmegaConfBaseException

    ovs = task_overrides(overrides)
    with initialize_config_module(config_module="conf", version_base="1.3"):
        try:
            cfg = compose(config_name, overrides=ovs, return_hydra_config=True)
        except MissingConfigException as exc:
            raise ConfigError(_missing_option(exc, ovs)) from None
        except OverrideParseException as exc:
            raise ConfigError(f"{' '.join(str(exc).splitlines()[0].split())} (Hydra override grammar: "
                              "key=value, +key=value, ~key)") from None
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(_composition(exc, ovs)) from None
        refuse_schema_choices(dict(cfg.hydra.runtime.choices))
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg
