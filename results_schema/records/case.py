"""The case specification: everything one case process needs, written by the runner as ``case.json``.

What is modelled: one process of a matrix (``runners.matrix``) -- a bench case
(``python -m runners.incase.bench_one --case PATH``) or an accuracy case
(``python -m runners.incase.accuracy run --case PATH``). The runner writes the model with
``results_schema.codec.io.write_json`` to ``records/<phase>/<label>-r<repeat>.case.json``,
next to the case's record; the case process reads it back with ``read_json``, so the
two sides share one typed description instead of a hand-mirrored command line.
Field names are vLLM's (``OffloadSetting``) and the record's (``WorkloadSpec``).

What is deliberately not modelled: the process environment (``runners.launching.case_command.case_env``),
limits and scheduling (the runner's), serving cases (``runners.launching.serving_case``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from results_schema.records.base import Device, Implementation, NonNegInt, SchemaVersion, StrictModel
from results_schema.records.models import WorkloadSpec

CaseKind = Literal["bench", "accuracy"]


class RequestedOffload(StrictModel):
    """The offload parameters a case was planned with (vLLM names), as configured.

    Not cross-validated here: a case that is expected to fail (``expect_error``, e.g.
    ``offload_num_in_group > offload_group_size``) must reach the case process, which
    validates the setting (``offload.selection.check_offload_setting``) and records the
    valid ones as ``results_schema.records.identity.OffloadSetting``.
    """

    offload_group_size: int = Field(description="G: layers per group; 0 disables offload.")
    offload_num_in_group: int = Field(description="N: offloaded layers per group (the last N).")
    offload_prefetch_step: int = Field(default=1, description="Modules prefetched ahead of the running one.")
    offload_params: tuple[str, ...] = Field(default=(), description="Dotted-name segments; empty = all parameters.")
    offload_backend: str = Field(default="auto", description="vLLM offload_backend.")


class AccuracyCaseSettings(StrictModel):
    """What an accuracy case evaluates and where it writes (``runners.incase.accuracy.case.run_cases``)."""

    tasks: Annotated[tuple[str, ...], Field(min_length=1)] = Field(
        description="Dataset tasks or manifest entry names, evaluated by one engine in this order.")
    manifest: str = Field(description="Absolute path of the dataset manifest.json.")
    protocol: str = Field(description="Registered accuracy protocol (results_schema.records.protocols).")
    limit: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="First N rows per task (smoke; result mode 'limited'); null = every row.")
    out_dir: str = Field(description="Directory of <label>.<task>.result.json and .examples.jsonl.")


class CaseSpec(StrictModel):
    """One case process: identity in the run, offload setting, workload and output paths.

    ``kind=bench`` needs ``workload`` (and no ``accuracy``); ``kind=accuracy`` needs
    ``accuracy`` (the protocol fixes the engine arguments, so no ``workload``).
    """

    schema_version: SchemaVersion = Field(default=1, description="Schema version of this file (always 1).")
    kind: CaseKind = Field(description="bench: runners.incase.bench_one; accuracy: runners.incase.accuracy run.")
    phase: str = Field(description="Phase name of the run.")
    label: str = Field(description="Case label, unique within the phase (names the case's files).")
    implementation: Implementation = Field(description="Which offloader runs (OFFLOAD_IMPL).")
    repeat: NonNegInt = Field(description="Repeat index of the case.")
    runtime: str = Field(description="Runtime name recorded in the record (cpu, cuda, ...).")
    device: Device = Field(default=Device.cpu, description="Device kind of the runtime (memory probe).")
    model: str = Field(description="Model directory given to vLLM.")
    offload: RequestedOffload = Field(description="vLLM offload parameters of the case (validated by the case).")
    workload: WorkloadSpec | None = Field(default=None, description="Bench workload (kind=bench only).")
    record: str = Field(description="Path of the record the case writes (bench: the BenchRecord JSON).")
    accuracy: AccuracyCaseSettings | None = Field(default=None, description="Accuracy settings (kind=accuracy).")
    engine_validates: bool = Field(
        default=False, exclude_if=lambda v: not v,
        description="Bench only: skip the case process's own offload pre-check and give the setting to the "
                    "engine as configured (runners.incase.engine_path; the engine's own rejection is tested).")

    in_process: Literal["abba", "aa", "bb"] | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Bench only: run the measured rounds as A (copies off) and B (copies on) rounds of the installed "
                    "offloader in ABBA order (offload.inprocess; docs/inprocess.md); null = a plain case.")

    @model_validator(mode="after")
    def _check_kind(self) -> "CaseSpec":
        if self.kind == "bench" and (self.workload is None or self.accuracy is not None):
            raise ValueError("kind 'bench' needs a workload and no accuracy settings")
        if self.kind == "accuracy" and (self.accuracy is None or self.workload is not None):
            raise ValueError("kind 'accuracy' needs accuracy settings and no workload")
        if self.kind == "accuracy" and self.in_process is not None:
            raise ValueError("in_process is a bench-case switch (runners.incase.bench_one); accuracy cases have none")
        if self.kind == "accuracy" and self.engine_validates:
            raise ValueError("engine_validates is a bench-case switch (runners.incase.bench_one); accuracy cases have none")
        return self
