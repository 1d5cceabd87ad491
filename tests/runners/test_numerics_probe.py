"""Claims about the numerics probe run in the background of the identity stage."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from runners.identity import gates


def _no_probe(python: str, env: Any, timeout_s: float = 120.0) -> dict[str, object]:
    raise AssertionError("numerics_of is faked in these tests: the probe is never called")


def test_probe_returns_what_numerics_of_returns_computed_in_another_thread(monkeypatch):
    seen: list[str] = []

    def fake(cfg, probe_torch):
        seen.append(threading.current_thread().name)
        return ("numerics of", cfg.k)

    monkeypatch.setattr(gates, "numerics_of", fake)
    assert gates.NumericsProbe(cast(Any, SimpleNamespace(k=1)), _no_probe).result() == ("numerics of", 1)
    assert seen == ["numerics-probe"]


def test_probe_error_is_raised_by_result_and_discarded_by_wait(monkeypatch):
    def broken(cfg, probe_torch):
        raise ValueError("probe broke")

    monkeypatch.setattr(gates, "numerics_of", broken)
    probe = gates.NumericsProbe(cast(Any, SimpleNamespace()), _no_probe)
    probe.wait()
    with pytest.raises(ValueError, match="probe broke"):
        probe.result()


def test_identity_stage_waits_for_the_probe_when_the_gate_fails(monkeypatch):
    from runners.orchestration import stages
    from runners.errors import EXIT_IDENTITY, RunnerError
    from runners.orchestration.execute import Timings

    ended = threading.Event()

    def slow(cfg, probe_torch):
        ended.wait(0.2)
        ended.set()
        return ()

    def failing_gate(cfg, runtimes, when, previous=None):
        raise RunnerError("identity gate: pin differs", EXIT_IDENTITY)

    monkeypatch.setattr(gates, "numerics_of", slow)
    monkeypatch.setattr(gates, "gather_identity", failing_gate)
    monkeypatch.setattr(stages, "build_model_once", lambda model: 0.0)
    cfg = cast(Any, SimpleNamespace(model=None))  # the stage reads cfg.model only (the build is faked)
    plan = stages.Plan(cfg=cfg, runtimes=(), overrides=(), items=(), phases=(), accuracy_phases=(),
                       resume_dir=None)
    with pytest.raises(RunnerError, match="pin differs"):
        stages.identity_gate(plan, Timings(t_start=0.0), _no_probe)
    assert ended.is_set()  # the probe ended before the failure propagated: no probe process left behind
