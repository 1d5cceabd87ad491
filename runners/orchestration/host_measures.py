"""The two measurements of this host a run makes besides its cases, passed into the run as functions.

* ``probe_torch`` (``runners.identity.numerics.probe_torch``): a Python process that imports torch and
  reads torch / oneDNN versions, threads and ATen CPU capability (the run's numerics identity);
* ``run_copy_bench`` (``runners.orchestration.copy_bench.run_copy_bench``): ``python -m offload_tools.bench``
  on the model's layer shapes (CPU runs with offload cases and ``analyze=true``; the report's copy
  bandwidth).

``runners.matrix.run_matrix`` takes a :class:`HostMeasures` (default: these real functions);
``runners.orchestration.stages.run_stages`` resolves it once and hands its functions to the stages,
which take them as required arguments. Callers that run many matrices on one host (the test suite)
pass functions that share one real measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runners.identity.numerics import ProbeTorch, probe_torch
from runners.orchestration.copy_bench import run_copy_bench

CopyBenchRun = Callable[[Path, Path, Mapping[str, str], Path], dict | None]
"""``(run_dir, model_dir, env, cwd) -> data``: writes the copy bench's file into ``run_dir``; None when it fails."""


@dataclass(frozen=True)
class HostMeasures:
    """The host measurements a run makes (see the module docstring); the defaults measure for real."""

    probe_torch: ProbeTorch = probe_torch
    run_copy_bench: CopyBenchRun = run_copy_bench
