"""Builders shared by the runner tests: compose a config, run the matrix with the fake bench."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module

from conf.schema import Config
from conf.typed import load_config
from tests.shared_runs import run_matrix

FAKE_BENCH = Path(__file__).with_name("fake_bench.py")

RUNNER = (sys.executable, "-m", "tests.runners.matrix_entry")
"""The runner subprocess of a test: ``python -m runners.matrix`` given the session's shared torch probe
(``tests/runners/matrix_entry.py``: ``runners.matrix.main`` with the same arguments, signal handlers and exit codes;
one probe process per key and pytest run instead of one per run, 1.2-1.3 CPU-s each). What differs: the command a run
records (``runner-history.jsonl``) and Hydra's config source (``pkg://conf``, as under the installed
``offload-matrix`` script). Started with ``cwd`` the repository root (``-m`` finds ``tests``)."""


TINY_DEFAULT = ("model=tiny", "matrix@phases.same_runtime=same_runtime_tiny")
"""Overrides that give a test the small default (8-layer hidden-128 model, 5 cases, the run's runtime)
instead of the embedded default's measurement design (hidden 1024, 12 processes): model size and
repeats do not matter to these tests, only their speed does."""


ENGINE_IN_CASE_PROCESS = '+runtime.env.VLLM_ENABLE_V1_MULTIPROCESSING="0"'
"""Override for real-vLLM tests whose claims do not concern the engine's process layout: vLLM's engine
core runs in the case process, as in the embedded default's runtime (``conf/runtime/cpu_measure.yaml``),
instead of in a child that spawns its own worker (two fewer interpreters importing torch and vLLM, about
20 s less per case on 2 cores). The child layout stays under test in ``tests/e2e/test_serving_kill.py``
(the API server's engine-core child) and
``tests/runners/test_processes.py::test_sigkill_of_the_runner_during_a_real_vllm_case`` (the bench's
engine-core child ends with a killed runner; on resume it publishes the case's evidence)."""


ONE_GEMM_THREAD = '++runtime.env.OMP_NUM_THREADS="1"'
"""Override for real-vLLM tests whose claims do not concern the GEMM thread count: one OpenMP thread per
engine instead of runtime ``cpu``'s two (every case of the run gets it, baseline included). The engine
tests run on two xdist workers, so two engines can share the 2-core machine; with two threads each,
their OpenMP threads spin-wait on the same cores. Measured here: two accuracy cases at once (tiny
model, both fixtures) took 45.3 s and 81 CPU-s with two threads each, 23.5 s and 36 CPU-s with one
(23 s and 3.5 s of GSM8K generation per case). One engine alone, quiet: 26.4 s with two threads,
20.0 s with one. The two-thread layout stays in ``make run`` and ``+experiment=smoke``."""


def evidence_lines(log: str) -> list[str]:
    """The JSON of every ``OFFLOAD_EVIDENCE`` line that starts a line of a case log (the evidence hook prints it so)."""
    return [ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith("OFFLOAD_EVIDENCE ")]


def tiny(overrides: tuple[str, ...] | list[str]) -> list[str]:
    """``overrides`` with ``TINY_DEFAULT`` first when they select no experiment and no model / default matrix."""
    ov = list(overrides)
    if any(o.startswith(("+experiment=", "experiment=", "resume=")) for o in ov):
        return ov
    return [t for t in TINY_DEFAULT if not any(t.split("=")[0] in o for o in ov)] + ov


_COMPOSED: dict[tuple[str, ...], Config] = {}
"""Typed configs composed in this process, by override list (see :func:`_composed`)."""


def _composed(overrides: list[str]) -> Config:
    """``load_config(compose("config", overrides))``, composed once per override list in this process and handed out
    as a deep copy (a test may change its config). Composing is a pure function of the overrides and the files of
    ``conf/`` (no interpolation reads the environment; no test writes there); a Hydra compose costs 0.1-0.2 CPU-s
    here, and many tests compose the same experiment. A config error is raised each time (nothing is kept)."""
    key = tuple(overrides)
    if key not in _COMPOSED:
        with initialize_config_module(config_module="conf", version_base="1.3"):
            _COMPOSED[key] = load_config(compose("config", overrides=list(overrides)), list(overrides))
    return copy.deepcopy(_COMPOSED[key])


def compose_real(*overrides: str) -> Config:
    """As ``compose_cfg`` without ``TINY_DEFAULT``: the config exactly as the CLI composes it."""
    return _composed(list(overrides))


def compose_cfg(*overrides: str) -> Config:
    """The typed config composed from ``conf`` with ``overrides`` (``tiny``), checked and typed as the CLI does it."""
    return _composed(tiny(overrides))


def fake_overrides(results_root: Path, *extra: str, run_id: str = "t") -> list[str]:
    """Overrides that run the default tiny matrix with the fake bench into ``results_root``."""
    return tiny([f"results_root={results_root}", f"run_id={run_id}", f"bench_command=[{sys.executable},{FAKE_BENCH}]",
                 "analyze=false", "progress=false", *extra])


def fake_blocks_overrides(results_root: Path, slow: str, *extra: str) -> list[str]:
    """Overrides of a fake-bench run of ``same_runtime`` with analysis, 2 short rounds per process and the fake's
    per-process speed factors ``slow`` (``FAKE_SLOW``: ``label-rN:factor,...``), after ``extra`` (the experiment or
    matrix, the model, the design)."""
    return [*extra, f"results_root={results_root}", "run_id=t", f"bench_command=[{sys.executable},{FAKE_BENCH}]",
            "progress=false", "analyze=true", "phases.same_runtime.measured_rounds=2",
            "phases.same_runtime.min_measured_s=0.5", f'+phases.same_runtime.runtime.env.FAKE_SLOW="{slow}"']


def run_fake(results_root: Path, *extra: str, run_id: str = "t") -> tuple[int, Path]:
    """Run the matrix in-process (cases are real subprocesses); returns (exit code, run dir)."""
    overrides = fake_overrides(results_root, *extra, run_id=run_id)
    cfg = compose_cfg(*overrides)
    code = run_matrix(cfg, overrides)
    return code, results_root / cfg.experiment_name / run_id
