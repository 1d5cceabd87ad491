"""Shared field types and the strict base model of every ``results_schema`` model.

Every model is frozen, forbids unknown fields and rejects non-finite floats (NaN/inf);
``schema_version`` is the integer 1 (a JSON boolean is refused).

The closed value sets shared with the config (``Implementation``, ``OffloadBackend``, ``PromptMode``,
``Device``) are defined here once, as ``enum.StrEnum`` types: ``conf`` types its choice fields with them
(OmegaConf looks members up by name, so every member's name equals its value), records hold the
members, and a member serialises as its string value (the JSON Schema lists the values as an enum).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from results_schema.codec.scalars import schema_version_not_a_boolean

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0)]

class ValueSet(StrEnum):
    """A closed set of strings: each member is its value (``str(m)``, ``f"{m}"``, JSON and ``repr`` give the
    value's text), so messages and records read exactly as the plain strings did."""

    def __repr__(self) -> str:
        return repr(self.value)


class Implementation(ValueSet):
    """Which offloader runs (``OFFLOAD_IMPL``): none, this project's prefetch offloader, the runtime's
    own (vLLM ``PrefetchOffloader`` / vLLM-Ascend ``NPUPrefetchOffloader``), this project's synchronous
    reference, or the published offloader loaded from a source root given per runtime
    (``runtime.overlay_source_root`` / ``runtime.overlay_class``, e.g. the published
    ``AscendPrefetchOffloader``)."""

    baseline = "baseline"
    current = "current"
    official = "official"
    sync = "sync"
    overlay = "overlay"


IMPLEMENTATIONS: tuple[str, ...] = tuple(m.value for m in Implementation)
"""The implementation registry: every ``Implementation`` value in order, as plain strings (CLIs' choices)."""


class OffloadBackend(ValueSet):
    """vLLM's ``offload_backend``."""

    auto = "auto"
    prefetch = "prefetch"
    uva = "uva"


class PromptMode(ValueSet):
    """How prompts are made: seeded random token ids, or the published repeated seed text."""

    random_ids = "random_ids"
    seed_text = "seed_text"


class Device(ValueSet):
    """Device kind a runtime's model runs on."""

    cpu = "cpu"
    cuda = "cuda"
    npu = "npu"


class PhaseKind(ValueSet):
    """What a phase measures (the config's ``MatrixConfig.kind``, a plan's ``PlannedPhase.kind``)."""

    throughput = "throughput"
    ttft = "ttft"
    stability = "stability"
    accuracy = "accuracy"
    serving = "serving"


class ExecutorKind(ValueSet):
    """Where case processes run (the config's ``executor.name``, a placement's ``executor``)."""

    local = "local"
    ray = "ray"


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
