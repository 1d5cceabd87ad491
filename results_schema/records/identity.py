"""The key fields that records share, written once: which case process a record is about, and which setting.

What is modelled (each a base the records inherit; pydantic keeps a base's fields first and in its order, and a
record that narrows a base field, e.g. ``AccuracyCaseRun.schema_version = 2``, keeps its place, so the JSON
written and its JSON Schema keep the field order they had when each record wrote the block itself):

* ``OffloadSetting``: the vLLM offload parameters of one case (vLLM ``OffloadConfig`` names).
* ``CaseKey``: ``schema_version`` (the integer 1 unless a record narrows it), ``phase``, ``label``,
  ``implementation``, ``repeat``: the key of one case process, in the order every case record writes it (a
  failure line, a placement, an accuracy case line, a bench record, a serving spec, result and run line).
* ``EngineCase``: a ``CaseKey`` plus the engine the process ran: ``runtime``, ``model``, ``offload``.
* ``Setting``: a distinct offload setting ``(group_size, num_in_group, prefetch_step)`` of the choose phase,
  each >= 1 (a setting that offloads).
* ``PhaseLabel``: one (phase, label) row of a table over a run's cases; ``LabelKey``: with its setting (plain
  types: the comparison summary's rows, where the baseline is G = N = 0).

What is deliberately not modelled: the file a record lives in (``results_schema.records.dispatch``) and the
serving block (``engine``, ``load``, ``slo``: ``results_schema.records.serving.ServedCase``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from results_schema.records.base import Implementation, NonNegInt, OffloadBackend, SchemaVersion, StrictModel


class OffloadSetting(StrictModel):
    """The vLLM offload parameters of one case (vLLM ``OffloadConfig`` names)."""

    offload_group_size: NonNegInt = Field(description="G: layers per group; 0 disables offload.")
    offload_num_in_group: NonNegInt = Field(description="N: offloaded layers per group (the last N).")
    offload_prefetch_step: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Modules prefetched ahead of the running one (buffer slots per key)."
    )
    offload_params: tuple[str, ...] = Field(
        default=(), description="Dotted-name segments selecting parameters; empty = all parameters."
    )
    offload_backend: OffloadBackend = Field(default=OffloadBackend.auto, description="vLLM offload_backend.")

    @model_validator(mode="after")
    def _check_cross_fields(self) -> "OffloadSetting":
        if self.offload_group_size > 0 and self.offload_num_in_group > self.offload_group_size:
            raise ValueError(
                f"offload_num_in_group ({self.offload_num_in_group}) must be <= "
                f"offload_group_size ({self.offload_group_size})"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.offload_group_size > 0 and self.offload_num_in_group > 0


class CaseKey(StrictModel):
    """Which case process a record is about: phase, label, implementation and repeat, after the schema version."""

    schema_version: SchemaVersion = Field(default=1, description="Schema version of this record (always 1).")
    phase: str = Field(description="Matrix phase.")
    label: str = Field(description="Case label, unique within a phase.")
    implementation: Implementation = Field(description="Implementation switch the case ran with.")
    repeat: NonNegInt = Field(description="Repeat index (0-based).")


class EngineCase(CaseKey):
    """A ``CaseKey`` and the engine its process ran: runtime, model and offload parameters."""

    runtime: str = Field(description="Runtime name (cpu, cuda, ascend_latest, ...).")
    model: str = Field(description="Model path or name given to vLLM.")
    offload: OffloadSetting = Field(description="Offload parameters the case ran with.")


class Setting(StrictModel):
    """A distinct offload setting of the choose phase (each parameter >= 1: a setting that offloads)."""

    group_size: int = Field(ge=1, description="offload_group_size G.")
    num_in_group: int = Field(ge=1, description="offload_num_in_group N.")
    prefetch_step: int = Field(ge=1, description="offload_prefetch_step.")


class PhaseLabel(StrictModel):
    """One (phase, label) row of a table over a run's cases."""

    phase: str = Field(description="Matrix phase.")
    label: str = Field(description="Case label, unique within a phase.")


class LabelKey(PhaseLabel):
    """One (phase, label) row of a comparison table and its setting (G = N = 0: the baseline)."""

    implementation: str = Field(description="Implementation switch the case ran with.")
    group_size: int = Field(description="offload_group_size G (0: no offload).")
    num_in_group: int = Field(description="offload_num_in_group N.")
    prefetch_step: int = Field(description="offload_prefetch_step.")
