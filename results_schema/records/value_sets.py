"""The closed value sets shared with the config (``Implementation``, ``OffloadBackend``, ``PromptMode``, ``Device``,
``PhaseKind``, ``ExecutorKind``), defined here once as ``enum.StrEnum`` types.

``conf`` types its choice fields with them (OmegaConf looks members up by name, so every member's name equals its
value), records hold the members (``results_schema.records.base`` re-exports them with the field types), and a
member serialises as its string value (the JSON Schema lists the values as an enum). This module imports no
pydantic: the offloader's layer-selection rule (``offload.selection``) and the case processes' stand-ins import
the value sets without the models.
"""

from __future__ import annotations

from enum import StrEnum


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
