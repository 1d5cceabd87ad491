"""The host measurements a run is given (``HostMeasures``) are the only ones it makes, new run or resume.

``runners.orchestration.stages.run_stages`` resolves ``host or HostMeasures()`` once; below it the probe
and the copy bench are required arguments, so no stage falls back to the real functions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from runners.errors import EXIT_OK
from runners.orchestration.host_measures import HostMeasures
from tests.runners.helpers import compose_cfg, fake_overrides
from tests.shared_runs import shared_host

ONE_POINT = "phases.same_runtime.points=[{g: 4, n: 1}]"


def _forbid_real_measures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the real probe and copy bench (module functions and ``HostMeasures()``'s defaults) by recorders."""
    from runners.identity import numerics
    from runners.orchestration import copy_bench

    real: list[str] = []

    def probe(python: str, env: Any, timeout_s: float = 120.0) -> dict[str, object]:
        real.append("probe_torch")
        return {}

    def bench(run_dir: Path, model_dir: Path, env: Any, cwd: Path, timeout_s: float = 300.0) -> dict | None:
        real.append("run_copy_bench")
        return None

    monkeypatch.setattr(numerics, "probe_torch", probe)
    monkeypatch.setattr(copy_bench, "run_copy_bench", bench)
    monkeypatch.setattr(HostMeasures.__init__, "__defaults__", (probe, bench))
    return real


def _recording(calls: list[str]) -> HostMeasures:
    """The session's shared measurements, each call recorded in ``calls``."""
    shared = shared_host()

    def probe(python: str, env: Any, timeout_s: float = 120.0) -> dict[str, object]:
        calls.append("probe_torch")
        return shared.probe_torch(python, env)

    def bench(run_dir: Path, model_dir: Path, env: Any, cwd: Path) -> dict | None:
        calls.append("run_copy_bench")
        return shared.run_copy_bench(run_dir, model_dir, env, cwd)

    return HostMeasures(probe_torch=probe, run_copy_bench=bench)


def test_a_new_run_directory_is_never_measured_without_the_identity_stages_numerics(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.orchestration.rundir import create_run_dir

    real = _forbid_real_measures(monkeypatch)
    cfg = compose_cfg(*fake_overrides(tmp_path, ONE_POINT))
    unmeasured = cast(Any, SimpleNamespace(numerics=None))
    with pytest.raises(ValueError, match="run_identity.numerics is None"):
        create_run_dir(cfg, [], unmeasured)
    assert real == [] and not any(tmp_path.iterdir())  # nothing measured, no directory made


@pytest.mark.heavy  # a fake-bench run and its resume, in process (cases are subprocesses)
def test_a_run_and_its_resume_measure_only_with_the_injected_host_measures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.matrix import run_matrix

    real = _forbid_real_measures(monkeypatch)
    new: list[str] = []
    overrides = fake_overrides(tmp_path, ONE_POINT)
    cfg = compose_cfg(*overrides)
    assert run_matrix(cfg, overrides, host=_recording(new)) == EXIT_OK
    run_dir = tmp_path / cfg.experiment_name / "t"
    assert new == ["probe_torch"]  # the new run's numerics identity, with the injected probe (one runtime)
    (run_dir / "SHA256SUMS").unlink()  # an unfinished run: the resume goes through every stage
    resumed: list[str] = []
    again = [f"resume={run_dir}"]
    assert run_matrix(compose_cfg(*again), again, host=_recording(resumed)) == EXIT_OK
    assert (run_dir / "SHA256SUMS").is_file()
    assert resumed == []  # a resume compares the recorded identity; it measures nothing
    assert real == []


def test_the_recorders_replace_what_host_measures_defaults_to(monkeypatch: pytest.MonkeyPatch) -> None:
    # the check above would be empty if HostMeasures() still built the real functions
    real = _forbid_real_measures(monkeypatch)
    host = HostMeasures()
    call: Callable[..., Any] = host.probe_torch
    call("python", {})
    assert real == ["probe_torch"]
