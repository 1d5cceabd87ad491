"""The live token check and the validation apply one rule (``results_schema.rules.token_rule``)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.validation.checks import token_digest_status
from results_schema.records.models import CaseRun
from runners.orchestration.execute import RunState
from runners.outcome.live_checks import token_check
from tests.support.synthetic import SynthCase, digest, make_case_run


def _run(label: str, impl: str, repeat: int, rounds: tuple[str, str, str], g: int = 0, n: int = 0) -> CaseRun:
    cr = make_case_run("p", SynthCase(label, impl, g, n), repeat, random.Random(repeat))
    rr = tuple(x.model_copy(update={"token_digest": digest(d)}) for x, d in zip(cr.record.rounds, rounds))
    rec = cr.record.model_copy(update={"rounds": rr, "token_digest": digest("".join(digest(d) for d in rounds))})
    return cr.model_copy(update={"record": rec})


LIVE = {"identical": "tokens identical to baseline", "differs": "TOKENS DIFFER",
        "within_baseline_noise": "tokens within the baseline-vs-baseline floor"}


@pytest.mark.parametrize("baselines, case, expected", [
    ((("a", "b", "c"), ("a", "b", "c")), ("a", "b", "c"), "identical"),
    ((("a", "b", "c"), ("a", "b", "c")), ("a", "b", "x"), "differs"),
    ((("a", "b", "c"), ("a", "b", "d")), ("a", "b", "e"), "within_baseline_noise"),  # 1 round left, floor 1
    ((("a", "b", "c"), ("a", "b", "d")), ("a", "x", "e"), "differs"),                # 2 rounds left, floor 1
], ids=["agree-identical", "agree-differs", "floor-within", "floor-beyond"])
def test_live_status_is_the_validation_status_once_the_baselines_ran(baselines, case, expected) -> None:
    runs = [_run("baseline", "baseline", i, r) for i, r in enumerate(baselines)] + [_run("cur", "current", 0, case, 4, 1)]
    offline = token_digest_status(SimpleNamespace(case_runs=[(None, i, cr) for i, cr in enumerate(runs)]))
    assert offline[("p", "cur", 0)] == expected
    state = RunState(run_dir=Path("."), model_dir=Path("."), python="python", bench_command=None, formal=False,
                     progress=SimpleNamespace())
    assert [token_check(state, cr.record) for cr in runs[:-1]] == [None, None]
    live = token_check(state, runs[-1].record)
    assert live is not None and live.startswith(LIVE[expected])
    assert bool(state.token_mismatches) == (expected == "differs")


def test_no_baseline_yet_says_nothing() -> None:
    state = RunState(run_dir=Path("."), model_dir=Path("."), python="python", bench_command=None, formal=False,
                     progress=SimpleNamespace())
    assert token_check(state, _run("cur", "current", 0, ("a", "b", "c"), 4, 1).record) is None
