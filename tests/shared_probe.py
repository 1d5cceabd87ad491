"""The torch probe shared between the runs of one pytest run, in-process and in runner subprocesses.

``runners.identity.numerics.probe_torch`` starts a Python process that imports torch to read torch / oneDNN
versions, threads and the ATen CPU capability: 1.2-1.3 CPU-s on the 2-core test host, each time a run starts
(57 probes in one test stage, 2026-12-06, ``docs/measurements/test-stage-cpu-2026-12-06.md``).
:func:`shared_probe` runs the real probe once per key and hands later calls the same dict; the key holds
what the probe reads (interpreter, working directory, environment, timeout) except environment values wholly under
this session's temporary directory (per-test run and cache paths) unless the variable can change which torch the
probe imports or its threads (:data:`READ_ALWAYS`), and the variables named by :data:`IGNORED_PREFIXES`. Failed
probes (an empty dict) are never shared. Not in the key: the process's CPU affinity (torch's default thread count
follows it; every test process of a stage inherits the same one).

Two users: ``tests/shared_runs.py`` (the in-process runs of each xdist worker) and
``tests/runners/matrix_entry.py`` (a runner subprocess a test starts), which find the session's store and
temporary directory in :data:`STORE_ENV` and :data:`TMP_ROOT_ENV` (set by ``tests.shared_runs``'s session
fixture). No pytest here: a runner subprocess imports this module.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from results_schema.codec.files import write_text_atomic

IGNORED_PREFIXES = ("PYTEST_", "FAKE_", "TESTS_SHARED_")
"""Variables no measurement reads: pytest's own, the knobs of the test fakes (``tests/runners/fake_*.py``), and
this module's two (``tests/test_shared_runs.py`` checks that no product module reads a ``FAKE_`` or
``TESTS_SHARED_`` variable)."""

STORE_ENV = "TESTS_SHARED_PROBE_STORE"
"""The session's store: a directory, one JSON file per key (shared by the xdist workers of one pytest run)."""

TMP_ROOT_ENV = "TESTS_SHARED_TMP_ROOT"
"""The pytest process's temporary directory (values under it are left out of the key)."""


READ_ALWAYS = ("PYTHON", "LD_", "OMP_", "KMP_", "GOMP_", "MKL_", "DNNL_", "ONEDNN_", "ATEN_", "VLLM_CPU_")
"""Prefixes of variables kept in the key even when their value points into the session's temporary directory: the
ones that choose which torch the probe imports (``PYTHONPATH``, ``PYTHONHOME``, ``LD_PRELOAD``,
``LD_LIBRARY_PATH``) or its threads and ISA (``runners.identity.numerics.THREAD_ENV``)."""


def _under(value: str, tmp_root: str) -> bool:
    """True when every ``os.pathsep`` part of ``value`` is ``tmp_root`` or a path below it (a sibling session
    directory such as ``pytest-10`` beside ``pytest-1`` is not below it)."""
    parts = value.split(os.pathsep)
    return all(p == tmp_root or p.startswith(tmp_root.rstrip(os.sep) + os.sep) for p in parts)


def env_key(env: Mapping[str, str], tmp_root: str) -> tuple[tuple[str, str], ...]:
    """The environment minus :data:`IGNORED_PREFIXES` and minus values wholly under this session's temporary
    directory (per-test run and cache paths), except variables of :data:`READ_ALWAYS`."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(IGNORED_PREFIXES)
                        and (k.startswith(READ_ALWAYS) or not _under(v, tmp_root))))


def shared_probe(real: Callable[..., dict[str, object]], tmp_root: str,
                 store: Path | None = None) -> Callable[..., dict[str, object]]:
    """``probe_torch`` that runs ``real`` once per (python, environment, cwd, timeout) and shares its dict; with ``store`` (a
    directory) also between the processes that share it (the xdist workers of one pytest run and the runner
    subprocesses they start): one JSON file per key, written whole (``results_schema.codec.files.write_text_atomic``), read by the others. Two
    processes may both probe a key first: the same dict."""
    cache: dict[Any, dict[str, object]] = {}

    @functools.wraps(real)
    def probe(python: str, env: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, object]:
        key = (python, env_key(env, tmp_root), os.getcwd(), timeout_s)  # cwd: ``python -c`` puts it on sys.path
        if key not in cache:
            file = None if store is None else store / f"{hashlib.sha256(json.dumps(key).encode()).hexdigest()}.json"
            if file is not None and file.is_file():
                cache[key] = json.loads(file.read_text())
            else:
                found = real(python, env, timeout_s)
                if not found:
                    return found
                cache[key] = found
                if file is not None:
                    write_text_atomic(file, json.dumps(found))
        return copy.deepcopy(cache[key])

    return probe


def session_probe(real: Callable[..., dict[str, object]],
                  environ: Mapping[str, str] = os.environ) -> Callable[..., dict[str, object]] | None:
    """:func:`shared_probe` of ``real`` on the store and temporary directory ``environ`` names
    (:data:`STORE_ENV`, :data:`TMP_ROOT_ENV`); None when either is unset or empty (no pytest session)."""
    store, tmp_root = environ.get(STORE_ENV), environ.get(TMP_ROOT_ENV)
    if not store or not tmp_root:
        return None
    return shared_probe(real, tmp_root, Path(store))
