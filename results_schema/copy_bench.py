"""The copy bench of a CPU run (``<run>/copy-bench.json``): plain host copy bandwidth, repeated.

What is modelled: what ``python -m offload.bench`` printed (its ``OFFLOAD_BENCH`` line) for the
model's layer shapes, plus the command the runner ran. The bench repeats its measurement;
each repeat is a ``CopyBenchReading``. A reading whose plain copy bandwidth disagrees with the
onload bandwidth measured in the same repeat by more than ``max_disagreement`` is flagged
(``used`` false, ``flag`` says why) and left out of every median. The run-level figures
(``plain_copy_bandwidth_bytes_s`` and the timing medians) are medians over the used readings,
with their spread; null when no reading is usable.

What is deliberately not modelled: how the bench measures (``offload.bench``), what analysis
makes of the figure (``analysis.report.tables.copy_bench_bandwidth``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from results_schema.base import NonNegFloat, NonNegInt, StrictModel
from results_schema.dispatch import FileKind

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


FILE_KINDS: list[FileKind] = [FileKind(FILE_NAME, "results_schema.copy_bench:CopyBench", jsonl=False)]
