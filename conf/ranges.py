"""The allowed range of every numeric field of the config schema, checked once when a config is typed.

What is modelled: ``FIELD_RANGES`` (dataclass name, field name) -> ``NumberRange``; a numeric field not listed
takes ``DEFAULT_RANGE`` (a finite number >= 0: counts, seconds, bytes, GiB). Two fields give a meaning
beyond it: ``ServingConfig.request_rates`` takes ``.inf`` (every request at t = 0) and ``MatrixConfig.order``
a negative number (phases run in ascending order). :func:`check_numbers` walks a typed ``Config`` (phases,
points, cases, serving settings, phase runtimes, ``Dict``/``List`` values) and raises ``ConfigError`` with one
line naming the dotted key, the value and what is allowed, at the first number outside its range: a NaN
anywhere, an infinity or a negative where it means nothing. ``conf.typed.typed_config`` calls it, so every
entry that types a config (``runners.matrix`` and its dry run, ``runners.pins``, a resume) refuses the
value before any process starts.

A sequential design's ranges are ``results_schema.rules.sequential_rule``'s, which the analysis checks designs with
too.

What is deliberately not modelled: rules across fields and against the model (``runners.planning``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from conf.schema import ConfigError
from conf.schema_matrix import MatrixConfig
from conf.schema_stack import WorkloadConfig
from offload.controls import MAX_STEP_DELAY_MS
from results_schema.rules.accuracy_rule import MAX_ACCURACY_DROP
from results_schema.records.models import WorkloadSpec
from results_schema.rules import sequential_rule
from results_schema.rules.number_rule import NumberRange


DEFAULT_RANGE = NumberRange()
"""A numeric config field without an entry in ``FIELD_RANGES``: a finite number >= 0."""

_AT_LEAST_ONE = NumberRange(low=1)
_POSITIVE_S = NumberRange(low=0, low_open=True, unit="s")
_SECONDS = NumberRange(unit="s")
_FRACTION = NumberRange(low=0, low_open=True, high=1)

FIELD_RANGES: dict[tuple[str, str], NumberRange] = {
    ("Config", "need_gib"): NumberRange(unit="GiB"),
    ("Config", "need_kv_gib"): NumberRange(unit="GiB"),
    ("ChooseConfig", "verify_budget"): _AT_LEAST_ONE,
    ("ChooseConfig", "front_budget"): _AT_LEAST_ONE,
    ("ChooseConfig", "verify_looks"): sequential_rule.LOOKS,
    ("ChooseConfig", "verify_target_floor_pct"): sequential_rule.TARGET_PCT,
    ("MatrixConfig", "order"): NumberRange(low=-math.inf),
    ("MatrixConfig", "repeats"): _AT_LEAST_ONE,
    ("MatrixConfig", "repeats_by_label"): _AT_LEAST_ONE,
    ("MatrixConfig", "cooldown_s"): _SECONDS,
    ("MatrixConfig", "case_timeout_s"): _POSITIVE_S,
    ("MatrixConfig", "kill_grace_s"): _SECONDS,
    ("MatrixConfig", "accuracy_limit"): _AT_LEAST_ONE,
    ("MatrixConfig", "max_accuracy_drop"): MAX_ACCURACY_DROP,
    ("MatrixConfig", "expected_case_s"): _POSITIVE_S,
    ("SequentialConfig", "looks"): sequential_rule.LOOKS,
    ("SequentialConfig", "target_pct"): sequential_rule.TARGET_PCT,
    ("SequentialConfig", "alpha"): sequential_rule.ALPHA,
    ("CaseConfig", "step_delay_ms"): NumberRange(low=0, low_open=True, high=MAX_STEP_DELAY_MS, unit="ms"),
    ("ServingSLOConfig", "ttft_ms"): NumberRange(low=0, low_open=True, unit="ms"),
    ("ServingSLOConfig", "tpot_ms"): NumberRange(low=0, low_open=True, unit="ms"),
    ("ServingSLOConfig", "attainment"): _FRACTION,
    ("ServingConfig", "request_rates"): NumberRange(low=0, low_open=True, unit="req/s",
                                                    inf_meaning="every request at t = 0"),
    ("ServingConfig", "max_concurrency"): _AT_LEAST_ONE,
    ("ServingConfig", "burstiness"): NumberRange(low=0, low_open=True),
    ("ServingConfig", "health_timeout_s"): _POSITIVE_S,
    ("ServingConfig", "health_poll_s"): _POSITIVE_S,
    ("ServingConfig", "rate_timeout_s"): _POSITIVE_S,
    ("ServingConfig", "stop_grace_s"): _SECONDS,
    ("RuntimeConfig", "health_timeout_s"): _POSITIVE_S,
    ("TinyModelConfig", "num_layers"): _AT_LEAST_ONE,
    ("TinyModelConfig", "hidden_size"): _AT_LEAST_ONE,
    ("ModelConfig", "num_layers"): _AT_LEAST_ONE,
    ("RayConfig", "num_cpus_per_case"): NumberRange(low=0, low_open=True, unit="CPUs"),
    ("RayConfig", "head_num_cpus"): _AT_LEAST_ONE,
    ("RayConfig", "object_store_memory_bytes"): NumberRange(low=1, unit="bytes"),
}
"""Fields whose range is not ``DEFAULT_RANGE`` (for a ``List`` / ``Dict`` field: the range of each value).
The bounds are what the field's docstring and its consumers give a meaning to; the planner's rules across
fields come after. The workload's numeric fields (``WorkloadConfig`` and a phase's overrides of them on
``MatrixConfig``) are added below from the record field each becomes."""

_WORKLOAD_UNITS = {"min_measured_s": "s"}


def _workload_ranges() -> dict[tuple[str, str], NumberRange]:
    """The range of each workload field of ``WorkloadConfig`` and of a phase's override of it on ``MatrixConfig``:
    the bounds of the record field it becomes (``WorkloadSpec``, the one statement), where they are not
    ``DEFAULT_RANGE``."""
    out = {}
    for owner in (WorkloadConfig, MatrixConfig):
        for f in dataclasses.fields(owner):
            if f.name in WorkloadSpec.model_fields:
                rng = NumberRange.of_field(WorkloadSpec, f.name, unit=_WORKLOAD_UNITS.get(f.name, ""))
                if rng != DEFAULT_RANGE:
                    out[(owner.__name__, f.name)] = rng
    return out


FIELD_RANGES.update(_workload_ranges())


def field_range(owner: type | str, name: str) -> NumberRange:
    """The range of field ``name`` of schema dataclass ``owner`` (a class or its name)."""
    key = owner if isinstance(owner, str) else owner.__name__
    return FIELD_RANGES.get((key, name), DEFAULT_RANGE)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_numbers(obj: Any, where: str = "") -> None:
    """Refuse the first number of ``obj`` (a schema dataclass instance, e.g. a typed ``Config``) outside its range.

    Args:
        obj: a schema dataclass instance; nested dataclasses, ``List`` and ``Dict`` values are walked.
        where: dotted key of ``obj`` in the whole config ("" for the root).

    Raises:
        ConfigError: ``"phases.choose_probe.serving.request_rates[0]=nan: must be a finite number > 0 (req/s) or
            .inf (every request at t = 0)"``.
    """
    for f in dataclasses.fields(obj):
        key = f"{where}.{f.name}" if where else f.name
        _check_value(getattr(obj, f.name), key, field_range(type(obj), f.name))


def _check_value(value: Any, key: str, rng: NumberRange) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        check_numbers(value, key)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _check_value(v, f"{key}.{k}", rng)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_value(v, f"{key}[{i}]", rng)
    elif _is_number(value):
        msg = rng.refusal(key, value)
        if msg is not None:
            raise ConfigError(msg)
