"""Measurements that every in-process runner test repeats identically, run once per test session.

A test that runs ``runners.matrix.run_matrix`` in the pytest process pays, besides its cases, for
two real measurements of this host that do not depend on the test:

* ``runners.identity.numerics.probe_torch``: a Python process that imports torch to read torch / oneDNN
  versions, threads and ATen CPU capability (about 2 s of CPU);
* ``runners.orchestration.copy_bench.run_copy_bench``: ``python -m offload_tools.bench`` on the model's layer shapes
  (CPU runs with offload cases and ``analyze=true``; about 10 s of CPU).

:func:`share_host_measurements` (autouse, ``tests/conftest.py``) builds a
``runners.orchestration.host_measures.HostMeasures`` whose functions run each measurement for real
the first time a key is seen and hand later calls with the same key the same result;
:func:`run_matrix` injects it into ``runners.matrix.run_matrix`` (nothing is patched): the probe's dict, and for
the copy bench the bytes of ``copy-bench.json`` the real run wrote (written into the new run
directory unchanged) and its dict. The probe's dicts are also shared between the xdist workers of one pytest
run (one JSON file per key under the run's temporary directory, ``shared-torch-probe/``). The key holds
everything the measurement reads (interpreter, model directory, working directory, environment) except
environment values that point into this session's temporary directory (per-test run and cache paths, which these
measurements ignore), pytest's own ``PYTEST_*`` variables, and the test fakes' own ``FAKE_*`` knobs (read only
by ``tests/runners/fake_*.py``; no product module reads a ``FAKE_`` variable: ``tests/test_shared_runs.py`` greps
for one).
Failed measurements (empty dict / None) are never shared, so a test of a failing probe or bench
still gets its failure. A test that calls ``runners.matrix.run_matrix`` itself, and a subprocess
runner (``python -m runners.matrix``), measure for themselves.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from conf.schema import Config
from runners.orchestration.host_measures import HostMeasures


IGNORED_PREFIXES = ("PYTEST_", "FAKE_")
"""Variables no measurement reads: pytest's own, and the knobs of the test fakes (``tests/runners/fake_*.py``)."""


def _env_key(env: Mapping[str, str], tmp_root: str) -> tuple[tuple[str, str], ...]:
    """The environment minus :data:`IGNORED_PREFIXES` and values under this session's temporary directory."""
    return tuple(sorted((k, v) for k, v in env.items() if tmp_root not in v and not k.startswith(IGNORED_PREFIXES)))


def shared_probe(real: Callable[..., dict[str, object]], tmp_root: str,
                 store: Path | None = None) -> Callable[..., dict[str, object]]:
    """``probe_torch`` that runs ``real`` once per (python, environment, timeout) and shares its dict; with ``store`` (a
    directory) also between the processes that share it (the xdist workers of one pytest run): one JSON file per
    key, written whole (``os.replace``), read by the others. Two processes may both probe a key first: the same dict."""
    cache: dict[Any, dict[str, object]] = {}

    @functools.wraps(real)
    def probe(python: str, env: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, object]:
        key = (python, _env_key(env, tmp_root), timeout_s)
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
                    file.parent.mkdir(parents=True, exist_ok=True)
                    fd, part = tempfile.mkstemp(dir=file.parent, suffix=".part")
                    with os.fdopen(fd, "w") as f:
                        f.write(json.dumps(found))
                    os.replace(part, file)
        return copy.deepcopy(cache[key])

    return probe


def shared_copy_bench(real: Callable[..., dict | None], file_name: str, tmp_root: str) -> Callable[..., dict | None]:
    """``run_copy_bench`` that runs ``real`` once per (model, environment, cwd, timeout); later calls copy its file."""
    cache: dict[Any, tuple[bytes, dict]] = {}

    @functools.wraps(real)
    def bench(run_dir: Path, model_dir: Path, env: Mapping[str, str], cwd: Path, timeout_s: float = 300.0) -> dict | None:
        key = (str(model_dir), _env_key(env, tmp_root), str(cwd), timeout_s)
        if key not in cache:
            data = real(run_dir, model_dir, env, cwd, timeout_s)
            if data is None:
                return None
            cache[key] = ((Path(run_dir) / file_name).read_bytes(), copy.deepcopy(data))
        written, data = cache[key]
        (Path(run_dir) / file_name).write_bytes(written)
        return copy.deepcopy(data)

    return bench


_SHARED: list[HostMeasures] = []
"""The session's shared :class:`HostMeasures` (set by :func:`share_host_measurements`)."""


@pytest.fixture(scope="session", autouse=True)
def share_host_measurements(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostMeasures]:
    """The session's :class:`HostMeasures`: :func:`shared_probe` and :func:`shared_copy_bench` of the real ones.

    Nothing is patched: :func:`run_matrix` passes them into ``runners.matrix.run_matrix``.
    """
    from runners.orchestration import copy_bench
    from runners.identity import numerics

    base = tmp_path_factory.getbasetemp()
    tmp_root = str(base)
    run_root = base.parent if base.name.startswith("popen-gw") else base  # an xdist worker's: the workers' common one
    host = HostMeasures(probe_torch=shared_probe(numerics.probe_torch, tmp_root, run_root / "shared-torch-probe"),
                        run_copy_bench=shared_copy_bench(copy_bench.run_copy_bench, copy_bench.FILE_NAME, tmp_root))
    _SHARED.append(host)
    try:
        yield host
    finally:
        _SHARED.remove(host)


def shared_host() -> HostMeasures:
    """The session's shared host measurements (the real ones outside a pytest session)."""
    return _SHARED[-1] if _SHARED else HostMeasures()


def run_matrix(cfg: Config, overrides: Sequence[str] = ()) -> int:
    """``runners.matrix.run_matrix`` with the session's shared host measurements injected."""
    from runners.matrix import run_matrix as real

    return real(cfg, overrides, host=shared_host())
