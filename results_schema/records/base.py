"""Shared field types and the strict base model of every ``results_schema`` model.

Every model is frozen, forbids unknown fields and rejects non-finite floats (NaN/inf);
``schema_version`` is the integer 1 (a JSON boolean is refused).

The closed value sets shared with the config (``Implementation``, ``OffloadBackend``, ``PromptMode``,
``Device``, ``PhaseKind``, ``ExecutorKind``) are defined once in ``results_schema.records.value_sets`` (no
pydantic there) and re-exported here with the field types.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from results_schema.codec.scalars import schema_version_not_a_boolean
from results_schema.records.value_sets import (  # re-exported: the field types' value sets
    IMPLEMENTATIONS as IMPLEMENTATIONS,
    Device as Device,
    ExecutorKind as ExecutorKind,
    Implementation as Implementation,
    OffloadBackend as OffloadBackend,
    PhaseKind as PhaseKind,
    PromptMode as PromptMode,
    ValueSet as ValueSet,
)

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0)]

SchemaVersion = Annotated[Literal[1], BeforeValidator(schema_version_not_a_boolean)]
"""``schema_version``: the integer 1 (a JSON boolean is refused, as the exported JSON Schema refuses it)."""

Digest = Annotated[str, Field(pattern=r"^(sha256:)?[0-9a-f]{64}$")]
"""Lower-case hex SHA-256, optionally prefixed ``sha256:``."""


REL_TOL = 1e-6
"""Relative tolerance for derived quantities a writer computes (throughput = tokens / seconds)."""

# Fields added after records were first written (``WorkloadSpec.min_measured_s``,
# ``BenchRecord.window``) are optional and omitted from the JSON when null, so records written
# before them keep their exact bytes and still validate.


def rel_close(a: float, b: float) -> bool:
    """``a`` equals ``b`` within ``REL_TOL`` (relative) or 1e-9 (absolute)."""
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)


class StrictModel(BaseModel):
    """Base: frozen, ``extra="forbid"``, non-finite floats rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=False)
