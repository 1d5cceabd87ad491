"""Schema of ``plan.json``: the expanded plan of a matrix run (written by ``runners.matrix``).

What is modelled: every phase in schedule order with its kind and every case of it (label,
implementation, the requested vLLM offload parameters, repeats, runtime and device, the
expected error of an expected-failure case, serving request rates, accuracy tasks), and the
counts analysis expects from them: per case ``expected_runs`` (``repeats``, or 0 for an
expected failure) and ``expected_failures`` (``repeats`` for an expected failure, else 0);
per phase and per run the number of case processes.

Analysis reads this file to know how many records a run should hold (``analysis.validation.validate``,
``analysis.serving.summary``) instead of re-expanding ``config.yaml`` with ``runners.planning.plan``.

What is deliberately not modelled: the workload, process limits and environment of a case
(``config.yaml``, ``environment-manifest.json``); the order of processes (repeats rotate,
``runners.planning.plan.schedule``). The offload parameters are as requested, not validated here: an
expected-failure case may ask for an invalid setting on purpose.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from results_schema.records.dispatch import FileKind
from results_schema.records.base import Implementation, PhaseKind, SchemaVersion, StrictModel

PLAN_FILE = "plan.json"
"""File name of the plan inside a run directory."""


class PlannedCase(StrictModel):
    """One case of one phase (all its repeats)."""

    label: str = Field(min_length=1, description="Unique within the phase; names the case's files.")
    implementation: Implementation
    offload_group_size: int = Field(description="G as requested (0: no offload).")
    offload_num_in_group: int = Field(description="N as requested.")
    offload_prefetch_step: int = Field(description="vLLM offload_prefetch_step as requested.")
    offload_params: tuple[str, ...] = Field(description="Dotted-name segments; empty = all parameters.")
    offload_backend: str = Field(description="vLLM offload_backend as requested.")
    repeats: Annotated[int, Field(ge=1)] = Field(description="Case processes of this case.")
    expect_error: str | None = Field(description="Regex the case's failure must match (expected failure).")
    engine_validates: bool = Field(default=False, exclude_if=lambda v: not v,
                                   description="The case process skips its offload pre-check: the engine validates.")
    runtime: str = Field(description="Name of the case's runtime.")
    device: str = Field(description="The runtime's device (cpu, cuda, npu, ...).")
    request_rates_rps: tuple[Annotated[float, Field(gt=0)] | None, ...] | None = Field(
        default=None, description="Serving phases: each process's request rates (req/s; null = all at t=0).")
    accuracy_tasks: tuple[str, ...] = Field(default=(), description="Accuracy phases: tasks of each process.")
    overlay_class: str | None = Field(
        default=None, exclude_if=lambda v: v is None,  # plans written before it keep their bytes
        description="Implementation overlay: the runtime's overlay_class (module.path:ClassName) the evidence "
                    "must show; null for other implementations.")
    expected_runs: Annotated[int, Field(ge=0)] = Field(description="Processes expected to succeed.")
    expected_failures: Annotated[int, Field(ge=0)] = Field(description="Processes expected to fail as declared.")

    @model_validator(mode="after")
    def _counts_follow_repeats(self) -> "PlannedCase":
        want = (0, self.repeats) if self.expect_error is not None else (self.repeats, 0)
        if (self.expected_runs, self.expected_failures) != want:
            raise ValueError(f"case {self.label!r}: expected_runs/expected_failures {self.expected_runs}/"
                             f"{self.expected_failures} do not follow repeats={self.repeats} and expect_error")
        return self


class PlannedPhase(StrictModel):
    """One phase: its kind and cases in matrix order."""

    name: str = Field(min_length=1)
    kind: PhaseKind
    cases: tuple[PlannedCase, ...] = Field(min_length=1)
    processes: Annotated[int, Field(ge=1)] = Field(description="Case processes of the phase (sum of repeats).")

    @model_validator(mode="after")
    def _processes_and_labels(self) -> "PlannedPhase":
        labels = [c.label for c in self.cases]
        if len(set(labels)) != len(labels):
            raise ValueError(f"phase {self.name!r}: duplicate case labels")
        if self.processes != sum(c.repeats for c in self.cases):
            raise ValueError(f"phase {self.name!r}: processes {self.processes} != sum of repeats")
        return self


class RunPlan(StrictModel):
    """``plan.json``: the expanded plan of one run."""

    schema_version: SchemaVersion = 1
    experiment: str = Field(description="experiment_name of the run.")
    run_id: str
    phases: tuple[PlannedPhase, ...] = Field(min_length=1, description="Phases in schedule order.")
    processes: Annotated[int, Field(ge=1)] = Field(description="Case processes of the run.")

    @model_validator(mode="after")
    def _total(self) -> "RunPlan":
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise ValueError("duplicate phase names")
        if self.processes != sum(p.processes for p in self.phases):
            raise ValueError(f"processes {self.processes} != sum over the phases")
        return self


FILE_KINDS: list[FileKind] = [FileKind(PLAN_FILE, "results_schema.records.plan:RunPlan", jsonl=False)]
"""Picked up by ``results_schema.records.dispatch`` once ``results_schema.records.plan`` is in ``CONTRIBUTING_MODULES``."""
