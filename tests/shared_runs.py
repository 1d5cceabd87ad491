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
what the measurement reads (interpreter, model directory, working directory, environment) except
environment values wholly under this session's temporary directory (per-test run and cache paths; the probe keeps
the ones that choose its torch or threads, ``tests.shared_probe.READ_ALWAYS``), pytest's own ``PYTEST_*``
variables, the test fakes' own ``FAKE_*`` knobs (read only by ``tests/runners/fake_*.py``) and the store's own
``TESTS_SHARED_*`` variables (no product module reads a ``FAKE_`` or ``TESTS_SHARED_`` variable:
``tests/test_shared_runs.py`` greps for one); the probe's rule is ``tests/shared_probe.py``'s.
Failed measurements (empty dict / None) are never shared, so a test of a failing probe or bench
still gets its failure. A runner subprocess a test starts through ``tests/runners/matrix_entry.py``
(``tests.runners.helpers.RUNNER``) shares the torch probe through the store and measures its copy bench
itself; a test that calls ``runners.matrix.run_matrix`` itself, and a subprocess runner started as
``python -m runners.matrix``, measure for themselves.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from conf.schema import Config
from runners.orchestration.host_measures import HostMeasures
from tests.shared_probe import STORE_ENV, TMP_ROOT_ENV, env_key, shared_probe


def shared_copy_bench(real: Callable[..., dict | None], file_name: str, tmp_root: str) -> Callable[..., dict | None]:
    """``run_copy_bench`` that runs ``real`` once per (model, environment, cwd, timeout); later calls copy its file."""
    cache: dict[Any, tuple[bytes, dict]] = {}

    @functools.wraps(real)
    def bench(run_dir: Path, model_dir: Path, env: Mapping[str, str], cwd: Path, timeout_s: float = 300.0) -> dict | None:
        key = (str(model_dir), env_key(env, tmp_root), str(cwd), timeout_s)
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

    Nothing is patched: :func:`run_matrix` passes them into ``runners.matrix.run_matrix``. The probe's store and
    this process's temporary directory are also put in the environment (``tests.shared_probe.STORE_ENV``,
    ``TMP_ROOT_ENV``; removed at the session's end) for the runner subprocesses the tests start through
    ``tests/runners/matrix_entry.py``.
    """
    from runners.orchestration import copy_bench
    from runners.identity import numerics

    base = tmp_path_factory.getbasetemp()
    tmp_root = str(base)
    run_root = base.parent if base.name.startswith("popen-gw") else base  # an xdist worker's: the workers' common one
    store = run_root / "shared-torch-probe"
    host = HostMeasures(probe_torch=shared_probe(numerics.probe_torch, tmp_root, store),
                        run_copy_bench=shared_copy_bench(copy_bench.run_copy_bench, copy_bench.FILE_NAME, tmp_root))
    _SHARED.append(host)
    before = {k: os.environ.get(k) for k in (STORE_ENV, TMP_ROOT_ENV)}
    os.environ.update({STORE_ENV: str(store), TMP_ROOT_ENV: tmp_root})
    try:
        yield host
    finally:
        _SHARED.remove(host)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def shared_host() -> HostMeasures:
    """The session's shared host measurements (the real ones outside a pytest session)."""
    return _SHARED[-1] if _SHARED else HostMeasures()


def run_matrix(cfg: Config, overrides: Sequence[str] = ()) -> int:
    """``runners.matrix.run_matrix`` with the session's shared host measurements injected."""
    from runners.matrix import run_matrix as real

    return real(cfg, overrides, host=shared_host())
