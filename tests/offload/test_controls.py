"""The serving speed control (offload.controls): a sleeping forward pre-hook, its lines, its refusals."""

from __future__ import annotations

import time

import pytest
import torch

from offload import controls


def test_parse_step_delay_ms_accepts_numbers_and_refuses_the_rest() -> None:
    assert controls.parse_step_delay_ms("") == 0.0
    assert controls.parse_step_delay_ms("20") == 20.0
    for bad in ("abc", "-1", "nan", "inf", "10001"):
        with pytest.raises(ValueError, match="OFFLOAD_STEP_DELAY_MS"):
            controls.parse_step_delay_ms(bad)


def test_the_hook_sleeps_before_every_forward_and_changes_no_output(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    want = model(x)
    line = controls.apply_step_delay(model, 30.0)
    assert line == controls.applied_line(30.0, "Linear")
    assert controls.apply_step_delay(model, 30.0) == line  # once per model
    t0 = time.perf_counter()
    got = [model(x) for _ in range(3)]
    took = time.perf_counter() - t0
    assert took >= 3 * 0.030
    assert all(torch.equal(g, want) for g in got)
    out = capsys.readouterr().out.splitlines()
    assert out.count(line) == 1
    assert [ln for ln in out if ln.startswith(controls.ACTED)] == [
        f"{controls.ACTED} step_delay_ms=30: first forward delayed"]


def test_from_env_is_inert_unset_and_needs_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    class Runner:
        model = None

    monkeypatch.delenv(controls.STEP_DELAY_ENV, raising=False)
    assert controls.apply_step_delay_from_env(Runner()) is None
    monkeypatch.setenv(controls.STEP_DELAY_ENV, "5")
    with pytest.raises(ValueError, match="no loaded model"):
        controls.apply_step_delay_from_env(Runner())
    r = Runner()
    r.model = torch.nn.Identity()  # type: ignore[assignment]
    assert controls.apply_step_delay_from_env(r) == controls.applied_line(5.0, "Identity")
    with pytest.raises(ValueError, match="delay > 0"):
        controls.apply_step_delay(torch.nn.Identity(), 0.0)


def test_a_graph_wrapped_or_non_eager_model_is_refused_not_silently_undelayed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Wrapper:  # like vLLM's CUDAGraphWrapper: not a module, forwards attributes to the inner model
        def __init__(self) -> None:
            self.inner = torch.nn.Identity()

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

    class Runner:
        model = Wrapper()

    monkeypatch.setenv(controls.STEP_DELAY_ENV, "5")
    with pytest.raises(ValueError, match="needs an eager model"):
        controls.apply_step_delay_from_env(Runner())

    class Config:
        enforce_eager = False

    class GraphRunner:
        model = torch.nn.Identity()
        model_config = Config()

    with pytest.raises(ValueError, match="enforce_eager=False"):
        controls.apply_step_delay_from_env(GraphRunner())
