"""Run ``python -m offload_tools.bench`` once per CPU run: the plain host copy bandwidth beside the fit.

What is modelled: on a CPU runtime the transfer-bound model (``analysis.model.fit``) fits a copy
bandwidth to the measured offload points. To say what that fitted figure means, the runner
measures, in the same environment as the cases (the runtime's ``env``: thread count and
binding), a plain ``Tensor.copy_`` of one wrapped layer's bytes with the model's shapes
(``hidden_size``, ``intermediate_size``, layer count from the model's ``config.json``),
``REPEATS`` times, and writes the ``OFFLOAD_BENCH`` JSON, checked as a
``results_schema.records.copy_bench.CopyBench`` (every reading, the median over the used ones and its
spread; a reading that disagrees with the onload of its own repeat by more than 10x is flagged
and not used), to ``<run_dir>/copy-bench.json``; the report prints both.

What is deliberately not modelled: accelerators (host-to-device bandwidth is measured by
``scripts/gpu_check.sh``), cache effects beyond what ``offload_tools.bench`` states.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any
from pathlib import Path

from results_schema.records.copy_bench import FILE_NAME, CopyBench
from results_schema.codec.io import write_json
from results_schema.records.copy_bench import H2DBench, H2D_FILE_NAME
from runners.paths import CONTROLLED_ENV, REPO_ROOT

BENCH_PREFIX = "OFFLOAD_BENCH "
REPEATS = 5
"""Repeats of the bench per run (each a fresh stack, one reading)."""


def copy_bench_argv(model_dir: Path, python: str = sys.executable, forwards: int = 40,
                    repeats: int = REPEATS) -> list[str]:
    """argv of ``offload_tools.bench`` with the model's layer shapes (tiny model: hidden 128)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    return [python, "-m", "offload_tools.bench", "--hidden", str(int(cfg["hidden_size"])),
            "--intermediate", str(int(cfg["intermediate_size"])), "--layers", str(int(cfg["num_hidden_layers"])),
            "--group-size", "2", "--num-in-group", "1", "--forwards", str(forwards), "--repeats", str(repeats)]


def run_copy_bench(run_dir: Path, model_dir: Path, env: Mapping[str, str], cwd: Path,
                   timeout_s: float = 300.0) -> dict | None:
    """Run the bench, write ``<run_dir>/copy-bench.json``; return its dict, None when it failed.

    A failure (the bench fails, or its line is not a valid ``CopyBench``) is reported by the
    caller, never raised (the run's evidence is complete anyway).
    """
    try:
        argv = copy_bench_argv(model_dir)
        r = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                           check=False)
    except (OSError, KeyError, ValueError, subprocess.TimeoutExpired):
        return None
    lines = [ln[len(BENCH_PREFIX):] for ln in r.stdout.splitlines() if ln.startswith(BENCH_PREFIX)]
    if r.returncode != 0 or len(lines) != 1:
        return None
    try:
        data = json.loads(lines[0])
        data["command"] = argv
        record = CopyBench.model_validate(data)
    except ValueError:
        return None
    write_json(run_dir / FILE_NAME, record)
    return record.model_dump(mode="json")


H2D_PREFIX = "OFFLOAD_H2D_BENCH "


def run_h2d_bench(run_dir: Path, python: str, device: str, nbytes: int, env: Mapping[str, str], cwd: Path,
                  timeout_s: float = 300.0) -> dict | None:
    """``python -m offload_tools.h2d_bench`` (pinned host-to-device copy of ``nbytes``, one layer) on ``device`` (cuda /
    npu) in the runtime's interpreter; writes ``<run_dir>/h2d-bench.json`` (``results_schema.records.copy_bench.H2DBench``
    with the command) and returns its dict; None when it failed (reported by the caller, never raised)."""

    argv = [python, "-m", "offload_tools.h2d_bench", "--bytes", str(int(nbytes)), "--device", device]
    try:
        r = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln[len(H2D_PREFIX):] for ln in r.stdout.splitlines() if ln.startswith(H2D_PREFIX)]
    if r.returncode != 0 or len(lines) != 1:
        return None
    try:
        record = H2DBench.model_validate({**json.loads(lines[0]), "command": argv})
    except ValueError:
        return None
    write_json(run_dir / H2D_FILE_NAME, record)
    return record.model_dump(mode="json")


def probe_h2d_bench(cfg: Any, run_dir: Path, python: str, base_env: Mapping[str, str], console: Any,
                    nbytes: int) -> None:
    """The probe's pinned host-to-device copy of ``nbytes`` (one layer's bytes: the largest of the plan's
    ``choose_need`` sizes) on a CUDA / NPU runtime (once per run)."""

    if (run_dir / H2D_FILE_NAME).is_file() or cfg.bench_command:
        return
    rt = cfg.runtime
    env = {k: v for k, v in base_env.items() if k not in CONTROLLED_ENV}
    env.update({str(k): str(v) for k, v in rt.env.items()})
    env["PYTHONPATH"] = str(REPO_ROOT)
    if run_h2d_bench(run_dir, str(rt.python or python), str(rt.device), nbytes, env, REPO_ROOT) is None:
        console.print("[yellow]offload_tools.h2d_bench failed; the choice has no copy bandwidth beside its fit[/]")
