"""Every numeric config field refuses NaN, and an infinity or a negative where the schema gives it no meaning.

The fields are enumerated from the schema dataclasses themselves (``Config`` and every dataclass reachable
from its type hints: phases, points, cases, serving settings, phase runtimes, ``List`` / ``Dict`` values), not
from a hand list, so a numeric field added later is covered. Most checks call ``conf.typed.typed_config`` in
process (the function every entry calls); a few run the real entry points (``runners.matrix`` and its dry run,
``runners.pins``, ``analysis``) and expect exit 2 with one line and no traceback.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module

from conf.schema import Config, ConfigError
from conf.typed import load_config, plain, typed_config

ROOT = Path(__file__).resolve().parents[2]

INF_HAS_A_MEANING = {("ServingConfig", "request_rates")}
"""Where the issue's spec gives +inf a meaning: a rate of .inf sends every request at t = 0."""
NEGATIVE_HAS_A_MEANING = {("MatrixConfig", "order")}
"""Where a negative number means something: phases run in ascending ``order``."""

_FILLERS: dict[str, Any] = {
    "PointConfig": {"g": 2, "n": 1},
    "CaseConfig": {"implementation": "current", "group_size": 2, "num_in_group": 1},
}
"""A valid entry of a dataclass-typed list the base config leaves empty (``RuntimeConfig``: the run's own)."""


def _base() -> dict[str, Any]:
    overrides = ["+experiment=serving"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        data = plain(load_config(compose("config", overrides=overrides), overrides))
    assert isinstance(data, dict)
    return data


def _strip(t: Any) -> Any:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    return args[0] if typing.get_origin(t) is typing.Union and len(args) == 1 else t


def _is_number_type(t: Any) -> bool:
    return t in (int, float)


def _numeric_fields(cls: type, node: dict[str, Any], path: str, base: dict[str, Any]) -> Iterator[tuple]:
    """``(owner name, field name, dotted key, setter kind, node)`` of every numeric field under ``cls`` (``node``:
    its plain data, completed in place where a dataclass-typed value is absent)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        t, key = _strip(hints[f.name]), f"{path}.{f.name}" if path else f.name
        origin, args = typing.get_origin(t), typing.get_args(t)
        if dataclasses.is_dataclass(t):
            if node.get(f.name) is None:
                node[f.name] = copy.deepcopy(base["runtime"]) if t.__name__ == "RuntimeConfig" else {}
            yield from _numeric_fields(t, node[f.name], key, base)
        elif origin in (list, dict):
            elem = args[-1]
            if dataclasses.is_dataclass(elem):
                if not node[f.name]:
                    node[f.name] = [dict(_FILLERS[elem.__name__])] if origin is list else {"x": {}}
                first = 0 if origin is list else next(iter(node[f.name]))
                sub = f"{key}[0]" if origin is list else f"{key}.{first}"
                yield from _numeric_fields(elem, node[f.name][first], sub, base)
            elif _is_number_type(elem):
                yield cls.__name__, f.name, key, origin.__name__, node
        elif _is_number_type(t):
            yield cls.__name__, f.name, key, "scalar", node


def _every_field() -> tuple[dict[str, Any], list[tuple]]:
    base = _base()
    found = list(_numeric_fields(Config, base, "", base))
    typed_config(base)  # the completed base itself is valid
    return base, found


BASE, FIELDS = _every_field()


def _with(value: float, name: str) -> tuple[dict[str, Any], str]:
    """The base config with ``value`` at field ``name`` (owner.field), and the dotted key a refusal must name."""
    data = copy.deepcopy(BASE)
    paths = list(_numeric_fields(Config, data, "", data))
    owner, field, key, kind, node = next(p for p in paths if f"{p[0]}.{p[1]}" == name)
    if kind == "scalar":
        node[field] = value
    elif kind == "list":
        node[field], key = [value], f"{key}[0]"
    else:
        node[field], key = {"x": value}, f"{key}.x"
    return data, key


def _refused(data: dict[str, Any], key: str) -> str | None:
    try:
        typed_config(data)
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"{key}="), msg
        return msg
    return None


def test_the_enumeration_reaches_every_dataclass_of_the_schema() -> None:
    owners = {owner for owner, *_ in FIELDS}
    assert {"Config", "ChooseConfig", "MatrixConfig", "PointConfig", "CaseConfig", "ServingConfig",
            "ServingSLOConfig", "RuntimeConfig", "ModelConfig", "TinyModelConfig", "WorkloadConfig",
            "RayConfig"} <= owners


@pytest.mark.parametrize("name", sorted({f"{o}.{f}" for o, f, *_ in FIELDS}))
def test_nan_is_refused_in_one_line_naming_the_key(name: str) -> None:
    data, key = _with(math.nan, name)
    assert _refused(data, key) is not None


def test_inf_and_a_negative_are_refused_wherever_the_schema_gives_them_no_meaning() -> None:
    inf_ok, negative_ok = set(), set()
    for name in sorted({f"{o}.{f}" for o, f, *_ in FIELDS}):
        owner, field = name.split(".")
        for value, accepted in ((math.inf, inf_ok), (-1, negative_ok)):
            data, key = _with(value, name)
            if _refused(data, key) is None:
                accepted.add((owner, field))
    assert inf_ok == INF_HAS_A_MEANING
    assert negative_ok == NEGATIVE_HAS_A_MEANING


def test_a_refusal_names_the_value_and_what_is_allowed() -> None:
    data, key = _with(math.nan, "ServingConfig.request_rates")
    assert _refused(data, key) == (f"{key}=nan: must be a finite number > 0 (req/s) or .inf (every request at "
                                   "t = 0)")
    data, key = _with(-1, "MatrixConfig.repeats")
    assert _refused(data, key) == f"{key}=-1: must be a whole number >= 1"


COMMANDS = [
    ["runners.matrix", "+experiment=choose", "need_gib=nan", "dry_run=true"],
    ["runners.matrix", "+experiment=choose", "need_gib=inf", "dry_run=true"],
    ["runners.matrix", "+experiment=serving", "phases.serving.serving.request_rates=[4.0,nan]", "dry_run=true"],
    ["runners.pins", "phases.same_runtime.cooldown_s=-1"],
    ["analysis", "recommend", "results/none", "--need-gib", "nan"],
]


@pytest.mark.heavy  # five interpreter starts (about 4 s each here)
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_the_entry_points_refuse_in_one_line_with_exit_2(argv: list[str], tmp_path: Path) -> None:
    extra = ["--out", str(tmp_path / "pins.yaml")] if argv[0] == "runners.pins" else []
    r = subprocess.run([sys.executable, "-m", *argv, *extra], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, (r.returncode, lines)
    assert "nan" in lines[0] or "-1" in lines[0] or "inf" in lines[0]


def test_the_workload_s_ranges_are_the_record_s_own_bounds() -> None:
    """One statement of the workload's bounds: each numeric ``WorkloadConfig`` field (and a phase's override of it)
    refuses exactly what the ``WorkloadSpec`` record's JSON Schema refuses (oracle: the exported schema's
    ``minimum`` / ``exclusiveMinimum`` / ``maximum``)."""
    from conf.ranges import field_range
    from conf.schema_matrix import MatrixConfig
    from conf.schema_stack import WorkloadConfig
    from results_schema.records.models import WorkloadSpec

    props = WorkloadSpec.model_json_schema()["properties"]
    checked = 0
    for owner in (WorkloadConfig, MatrixConfig):
        for name in (f.name for f in dataclasses.fields(owner) if f.name in props):
            kinds = props[name].get("anyOf", [props[name]])
            bounds = next((k for k in kinds if k.get("type") in ("integer", "number")), None)
            if bounds is None:
                continue
            rng = field_range(owner, name)
            assert rng.low == bounds.get("exclusiveMinimum", bounds.get("minimum", 0)), (owner, name, rng)
            assert rng.low_open == ("exclusiveMinimum" in bounds), (owner, name, rng)
            assert rng.high == bounds.get("maximum", math.inf), (owner, name, rng)
            checked += 1
    assert checked >= 12
    with pytest.raises(ConfigError, match=r"^workload\.max_model_len=1: must be a whole number >= 2$"):
        data = _base()
        data["workload"]["max_model_len"] = 1
        typed_config(data)
