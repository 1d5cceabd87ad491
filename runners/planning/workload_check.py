"""A phase's effective workload (run workload + the phase's overrides), checked before any process starts.

What is modelled: the fields a phase may override (``WORKLOAD_OVERRIDES``), the check against
``results_schema.records.models.WorkloadSpec`` with messages naming the field, the value and what is
allowed, ``dtype`` among vLLM's ``--dtype`` values and ``input_len + max_tokens <= max_model_len`` (only where
the workload is the engine's: not for accuracy phases, whose protocol fixes the engine).
"""

from __future__ import annotations

from types import UnionType
import dataclasses
from enum import Enum
from typing import Annotated, Any, Union, get_args, get_origin

from conf.schema_matrix import MatrixConfig
from conf.schema_stack import WorkloadConfig
from runners.errors import PlanError
from conf.typed import plain
from results_schema.records.models import WorkloadSpec
from results_schema.rules.number_rule import NumberRange

VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
"""``--dtype`` values vLLM accepts (``vllm.config.model.ModelDType``, vLLM 0.32); any other fails inside the case."""

_WORKLOAD_OVERRIDES = ("num_prompts", "input_len", "max_tokens", "warmup_rounds", "measured_rounds", "min_measured_s")


def _effective_workload(workload: WorkloadConfig, matrix: MatrixConfig) -> WorkloadConfig:
    """The run's workload with the phase's non-null overrides (``_WORKLOAD_OVERRIDES``)."""
    return dataclasses.replace(workload, **{k: getattr(matrix, k) for k in _WORKLOAD_OVERRIDES
                                            if getattr(matrix, k) is not None})


def _allowed(model: Any, name: str) -> str:
    """What a field of ``model`` allows, in words (e.g. ``a whole number >= 1``, ``a number in (0, 1]``,
    ``a whole number >= 1 or null`` for ``Annotated[int, Field(ge=1)] | None``); a number's bounds are read by
    ``results_schema.rules.number_rule.NumberRange.of_field``, the reader ``conf.ranges`` uses too."""
    annotation, nullable = model.model_fields[name].annotation, False
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:  # Optional[X]: X, or null
        annotation, nullable = args[0], True
    if get_origin(annotation) is Annotated:  # Annotated[X, Field(ge=...)]: X (the bounds: of_field)
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, Enum):  # a closed value set: list its values
        what = "one of " + ", ".join(repr(m.value) for m in annotation)
    elif annotation in (int, float):
        what = NumberRange.of_field(model, name).allowed(integer=annotation is int)
    else:
        what = {str: "a string", bool: "true or false"}.get(annotation, str(annotation))
    return what + (" or null" if nullable else "")


def validate_workload(phase: str, workload: WorkloadConfig, matrix: MatrixConfig, *, engine: bool) -> None:
    """Check a phase's effective workload against ``WorkloadSpec`` before any process starts; ``engine``: the
    workload is the engine's (its kind's ``engine_workload``), so its dtype and lengths are checked too.

    Raises:
        PlanError: naming the field (``workload.<f>`` or ``phases.<phase>.<f>`` when the
            phase overrides it), the value and what is allowed.
    """
    from pydantic import ValidationError

    fields = plain(workload)
    try:
        WorkloadSpec(**fields)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(x) for x in err["loc"])
            where = (f"phases.{phase}.{name}" if name in _WORKLOAD_OVERRIDES and getattr(matrix, name) is not None
                     else f"workload.{name}")
            value = fields.get(name, "<missing>")
            if name not in WorkloadSpec.model_fields:
                problems.append(f"{where} is not a workload field (fields: {', '.join(WorkloadSpec.model_fields)})")
            else:
                problems.append(f"{where} = {value!r} is invalid: must be {_allowed(WorkloadSpec, name)}")
        raise PlanError(f"phase {phase!r}: invalid workload: " + "; ".join(problems)) from None
    if engine and workload.dtype not in VLLM_DTYPES:
        raise PlanError(f"phase {phase!r}: invalid workload: workload.dtype = {workload.dtype!r} is invalid: "
                        f"must be one of {', '.join(VLLM_DTYPES)} (vLLM's --dtype)")
    if engine and workload.input_len + workload.max_tokens > workload.max_model_len:
        raise PlanError(f"phase {phase!r}: invalid workload: input_len ({workload.input_len}) + max_tokens "
                        f"({workload.max_tokens}) exceeds max_model_len ({workload.max_model_len}); "
                        "allowed: input_len + max_tokens <= max_model_len")
