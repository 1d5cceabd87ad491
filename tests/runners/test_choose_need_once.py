"""A choose run computes its need and the model's sizes once per runner process, a resume included
(``runners.planning.choose_plan.choose_need``, carried in the plan): ``need_bytes`` and ``model_sizes`` are counted
over a whole run with the fake bench (probe, copy bench, decision, verify phase), then over its resume."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

import runners.planning.choose_plan as choose_plan
from results_schema.records.choice import read_decisions
from runners.errors import EXIT_OK
from tests.runners.helpers import FAKE_BENCH, compose_cfg
from tests.shared_runs import run_matrix


def _count(monkeypatch: pytest.MonkeyPatch, calls: Counter) -> None:
    """Count every call of ``need_bytes`` / ``model_sizes``, through whichever module a caller bound them in."""
    for name in ("need_bytes", "model_sizes"):
        real = getattr(choose_plan, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("runners") and getattr(mod, name, None) is real:
                monkeypatch.setattr(mod, name, counted)


@pytest.mark.heavy  # a choose run of 8 fake case processes and its resume (about 20 s)
def test_need_and_model_sizes_are_computed_once_per_runner_process_resume_included(monkeypatch, tmp_path: Path):
    ov = ["+experiment=choose", "model=tiny", f"results_root={tmp_path}", "run_id=t", "need_gib=0.001",
          f"bench_command=[{sys.executable},{FAKE_BENCH}]", "progress=false", "analyze=false",
          "phases.probe.measured_rounds=1", "phases.verify.measured_rounds=1",
          "phases.probe.min_measured_s=0", "phases.verify.min_measured_s=0"]
    calls: Counter = Counter()
    _count(monkeypatch, calls)
    assert run_matrix(compose_cfg(*ov), ov) == EXIT_OK
    run_dir = tmp_path / "choose" / "t"
    assert [d.stage for d in read_decisions(run_dir)][:1] == ["predict"]  # the decision path ran
    assert calls == Counter(need_bytes=1, model_sizes=1)
    calls.clear()
    resume = [f"resume={run_dir}"]
    assert run_matrix(compose_cfg(*resume), resume) == EXIT_OK
    assert calls == Counter(need_bytes=1, model_sizes=1)
