"""The copy bench of a CPU run (``<run>/copy-bench.json``): plain host copy bandwidth, repeated.

What is modelled: what ``python -m offload_tools.bench`` printed (its ``OFFLOAD_BENCH`` line) for the
model's layer shapes, plus the command the runner ran. The bench repeats its measurement;
each repeat is a ``CopyBenchReading``. A reading whose plain copy bandwidth disagrees with the
onload bandwidth measured in the same repeat by more than ``max_disagreement`` is flagged
(``used`` false, ``flag`` says why) and left out of every median. The run-level figures
(``plain_copy_bandwidth_bytes_s`` and the timing medians) are medians over the used readings,
with their spread; null when no reading is usable.

``H2DBench`` models the CUDA / NPU twin: what ``python -m offload_tools.h2d_bench`` printed (its
``OFFLOAD_H2D_BENCH`` line), the pinned host-to-device copy bandwidth of one layer's bytes, timed
with device events; each repeat is an ``H2DBenchReading`` and the run-level bandwidth is the median
over all readings, with their spread. It is not registered as a file kind.

What is deliberately not modelled: how the benches measure (``offload_tools.bench``, ``offload_tools.h2d_bench``),
what analysis makes of the figure (``analysis.report.tables.copy_bench_bandwidth``).
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

from pydantic import Field, model_validator

from results_schema.records.base import NonNegFloat, NonNegInt, StrictModel
from results_schema.records.dispatch import FileKind

FILE_NAME = "copy-bench.json"


class CopyBenchReading(StrictModel):
    """One repeat of the bench."""

    plain_copy_bandwidth_bytes_s: float = Field(gt=0, description="Bytes per onload / median plain copy_ time (B/s).")
    onload_bandwidth_bytes_s: float = Field(gt=0, description="Bytes per onload / median onload time of the "
                                                              "offloader in the same repeat (B/s).")
    disagreement: float = Field(ge=1, description="max(plain / onload, onload / plain) bandwidth ratio (>= 1).")
    onload_median_s: float = Field(gt=0, description="Median onload time of the offloader (s).")
    plain_copy_median_s: float = Field(gt=0, description="Median plain copy_ time of the same bytes (s).")
    used: bool = Field(description="False when disagreement > max_disagreement: left out of every median.")
    flag: str | None = Field(description="Why the reading is not used; null when used.")

    @model_validator(mode="after")
    def _flag_iff_unused(self) -> "CopyBenchReading":
        if self.used == (self.flag is not None):
            raise ValueError("a reading has a flag exactly when it is not used")
        return self


class CopyBench(StrictModel):
    """``copy-bench.json``: the bench's figures for the model's layer shapes, repeated."""

    schema_version: Literal[1] = Field(default=1, description="Schema version of this record (always 1).")
    hidden: int = Field(ge=1, description="hidden_size of the benchmarked layers.")
    intermediate: int = Field(ge=1, description="intermediate_size of the benchmarked layers.")
    layers: int = Field(ge=1, description="Layers in the stack.")
    wrapped: NonNegInt = Field(description="Layers the offloader wrapped.")
    slots: NonNegInt = Field(description="Device buffer slots.")
    dtype: str = Field(description="Parameter dtype (bfloat16, float16, float32).")
    bytes_per_onload: NonNegInt = Field(description="Median bytes copied per onload (B).")
    onloads_measured: NonNegInt = Field(description="Onloads timed, over every repeat.")
    fallback_loads: NonNegInt = Field(description="Synchronous fallback loads of the offloader, over every repeat.")
    threads: int = Field(ge=1, description="torch.get_num_threads() in the bench process.")
    target_ratio: float = Field(gt=0, description="Target of ratio (onload / plain copy).")
    repeats: int = Field(ge=1, description="Repeats measured (readings).")
    readings: tuple[CopyBenchReading, ...] = Field(min_length=1, description="Every repeat, used or flagged.")
    readings_used: NonNegInt = Field(description="Readings that enter the medians.")
    max_disagreement: float = Field(gt=1, description="A reading whose disagreement exceeds this is not used.")
    onload_median_s: NonNegFloat | None = Field(description="Median over used readings of the onload median (s); "
                                                            "null when none is used.")
    plain_copy_median_s: NonNegFloat | None = Field(description="Median over used readings of the plain copy "
                                                                "median (s); null when none is used.")
    ratio: NonNegFloat | None = Field(description="onload_median_s / plain_copy_median_s; null when none is used.")
    plain_copy_bandwidth_bytes_s: NonNegFloat | None = Field(
        description="Median plain copy bandwidth over the used readings (B/s); null when none is used.")
    plain_copy_bandwidth_min_bytes_s: NonNegFloat | None = Field(description="Smallest used reading (B/s).")
    plain_copy_bandwidth_max_bytes_s: NonNegFloat | None = Field(description="Largest used reading (B/s).")
    plain_copy_bandwidth_spread_pct: NonNegFloat | None = Field(description="(max - min) / median x 100 over the "
                                                                            "used readings (%).")
    command: tuple[str, ...] = Field(default=(), description="The bench command the runner ran (argv).")

    @model_validator(mode="after")
    def _counts_agree(self) -> "CopyBench":
        used = sum(1 for r in self.readings if r.used)
        if len(self.readings) != self.repeats or used != self.readings_used:
            raise ValueError(f"repeats {self.repeats} / readings_used {self.readings_used} disagree with the "
                             f"{len(self.readings)} readings ({used} used)")
        if (self.plain_copy_bandwidth_bytes_s is None) != (used == 0):
            raise ValueError("plain_copy_bandwidth_bytes_s is null exactly when no reading is used")
        return self


H2D_MEDIAN_REL_TOL = 1e-6
"""Relative tolerance of ``H2DBench.bandwidth_bytes_s`` against the median of its readings."""


class H2DBenchReading(StrictModel):
    """One repeat of the host-to-device bench."""

    bandwidth_bytes_s: float = Field(gt=0, description="bytes_per_copy / median_copy_s (B/s).")
    median_copy_s: float = Field(gt=0, description="Median device-event time of the repeat's timed copies (s).")


class H2DBench(StrictModel):
    """The ``OFFLOAD_H2D_BENCH`` line: pinned host-to-device copy bandwidth of one layer's bytes, repeated."""

    schema_version: Literal[1] = Field(default=1, description="Schema version of this record (always 1).")
    device: Literal["cuda", "npu"] = Field(description="Device runtime copied to (cuda or npu).")
    bytes_per_copy: int = Field(ge=1, description="Bytes per copy: one layer's bytes (B).")
    pinned: Literal[True] = Field(description="The host source tensor is pinned (page-locked); always true.")
    repeats: int = Field(ge=1, description="Independent readings measured.")
    copies: int = Field(ge=1, description="Timed copies per reading (after its untimed warm-up copies).")
    readings: tuple[H2DBenchReading, ...] = Field(min_length=1, description="Every reading, in order.")
    bandwidth_bytes_s: float = Field(gt=0, description="Median bandwidth over the readings (B/s).")
    bandwidth_min_bytes_s: float = Field(gt=0, description="Smallest reading's bandwidth (B/s).")
    bandwidth_max_bytes_s: float = Field(gt=0, description="Largest reading's bandwidth (B/s).")
    spread_pct: NonNegFloat = Field(description="(max - min) / median bandwidth x 100 over the readings (%).")
    torch_version: str = Field(min_length=1, description="torch.__version__ of the bench process.")
    device_name: str = Field(description="The device's name as its runtime reports it (e.g. NVIDIA H200).")
    command: tuple[str, ...] = Field(default=(), description="The bench command the runner ran (argv); empty "
                                                             "on the bench's own line.")

    @model_validator(mode="after")
    def _readings_agree(self) -> "H2DBench":
        if len(self.readings) != self.repeats:
            raise ValueError(f"repeats {self.repeats} disagrees with the {len(self.readings)} readings")
        med = statistics.median(r.bandwidth_bytes_s for r in self.readings)
        if not math.isclose(self.bandwidth_bytes_s, med, rel_tol=H2D_MEDIAN_REL_TOL, abs_tol=0.0):
            raise ValueError(f"bandwidth_bytes_s {self.bandwidth_bytes_s!r} is not the median of the readings "
                             f"({med!r}) within {H2D_MEDIAN_REL_TOL:g} relative")
        return self


H2D_FILE_NAME = "h2d-bench.json"
"""The host-to-device bench of a choose run's probe on CUDA / NPU (``H2DBench``, plus the command run)."""

FILE_KINDS: list[FileKind] = [FileKind(FILE_NAME, "results_schema.records.copy_bench:CopyBench", jsonl=False),
                              FileKind(H2D_FILE_NAME, "results_schema.records.copy_bench:H2DBench", jsonl=False)]
