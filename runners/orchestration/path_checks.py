"""Every path a run needs, checked before any process starts: a bad one is a config error (exit 2).

What is modelled: the results root (a folder this process can create a run directory in:
not a file, not under a file, not on a file system that refuses new folders such as
``/proc``), the new run directory (must not exist yet), and the model directory (a given
``model.path`` must be a folder; the tiny model's ``cache_dir`` a folder or creatable). The
check that a folder can be created is a real one: a uniquely named folder is made in the
nearest existing ancestor and removed at once (permission bits alone say nothing for root,
nor for read-only or virtual file systems). Each failure is one line naming the key, the
value and what is wrong.

What is deliberately not modelled: the resume directory (``runners.orchestration.rundir.load_resumed_config``),
pins files (``runners.pins``), the model's content (the identity gate), dataset manifests
(``runners.orchestration.accuracy_phase``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from conf.schema import Config
from runners.errors import EXIT_CONFIG, RunnerError
from runners.models.built import BUILT_SOURCES
from runners.paths import abs_path


def folder_problem(path: Path) -> str | None:
    """Why a folder cannot be used or created at ``path``; None when it can.

    Returns:
        e.g. ``"it is a file"``, ``"/a/b is a file, not a folder"``, ``"cannot create a folder in /proc
        (No such file or directory)"``.
    """
    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    ancestor = path
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a folder"
    try:
        probe = tempfile.mkdtemp(prefix=".write-check-", dir=ancestor)
    except OSError as exc:
        return f"cannot create a folder in {ancestor} ({exc.strerror or exc})"
    os.rmdir(probe)
    return None


def output_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as an output file (a folder, or its folder cannot be made); None when it can."""
    if path.is_dir():
        return "it is a folder; give a file name"
    if (problem := folder_problem(path.expanduser().absolute().parent)) is not None:
        return f"its folder cannot be used: {problem}"
    return None


def check_run_paths(cfg: Config, resuming: bool) -> None:
    """Refuse a bad results root, an existing run directory or a bad model path (exit 2, one line).

    Args:
        cfg: the typed config.
        resuming: True for a resume (the run directory exists and was checked when it was loaded).

    Raises:
        RunnerError: (config) naming the key, its value and the problem.
    """
    if not resuming:
        root = abs_path(cfg.results_root)
        if (problem := folder_problem(root)) is not None:
            raise RunnerError(f"config: results_root={cfg.results_root} ({root}): {problem}", EXIT_CONFIG)
        run_id = cfg.run_id
        if run_id and (root / cfg.experiment_name / run_id).exists():
            raise RunnerError(f"config: run directory {root / cfg.experiment_name / run_id} already "
                              "exists; refusing to reuse it (choose another run_id, or resume=<dir>)", EXIT_CONFIG)
    model = cfg.model
    if model.source in BUILT_SOURCES:
        cache = abs_path(model.cache_dir)
        if (problem := folder_problem(cache)) is not None:
            raise RunnerError(f"config: model.cache_dir={model.cache_dir} ({cache}): {problem}", EXIT_CONFIG)
        return
    path = model.path
    if path in (None, "???"):  # declared but not given: the identity gate refuses it (fail closed, exit 3)
        return
    d = abs_path(str(path), Path.cwd())
    if not d.is_dir():
        what = "a file, not a folder" if d.exists() else "missing"
        raise RunnerError(f"config: model.path={path} ({d}) is {what}; give the local model directory "
                          "(with its SHA256SUMS manifest)", EXIT_CONFIG)
