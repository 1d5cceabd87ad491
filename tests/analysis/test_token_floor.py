"""Performance token check: identity while baselines agree; the per-round floor when two baselines' tokens differ."""

from __future__ import annotations

import random
from types import SimpleNamespace

from analysis.validation.checks import check_tokens, token_digest_status as token_status
from analysis.validation.common import Collector
from results_schema.records.models import CaseRun
from tests.support.synthetic import SynthCase, digest, make_case_run


def _run(label: str, impl: str, repeat: int, rounds: tuple[str, str, str], g: int = 0, n: int = 0) -> CaseRun:
    cr = make_case_run("p", SynthCase(label, impl, g, n), repeat, random.Random(repeat))
    rr = tuple(x.model_copy(update={"token_digest": digest(d)}) for x, d in zip(cr.record.rounds, rounds))
    rec = cr.record.model_copy(update={"rounds": rr, "token_digest": digest("".join(digest(d) for d in rounds))})
    return cr.model_copy(update={"record": rec})


def _data(*runs: CaseRun) -> SimpleNamespace:
    return SimpleNamespace(case_runs=[(None, i + 1, cr) for i, cr in enumerate(runs)])


def _collect(data) -> list:
    col = Collector()
    check_tokens(data, col)
    return [i for _check, i in col.issues]


def test_agreeing_baselines_judge_by_identity():
    data = _data(_run("baseline", "baseline", 0, ("a", "b", "c")), _run("baseline", "baseline", 1, ("a", "b", "c")),
                 _run("cur", "current", 0, ("a", "b", "x"), 4, 1))
    assert token_status(data)[("p", "cur", 0)] == "differs"
    (issue,) = _collect(data)
    assert issue.code == "token_digest_differs" and "must be identical" in issue.message


def test_disagreeing_baselines_give_the_floor_verdict_not_an_offload_failure():
    # the two baselines differ on round 2; the offload case leaves both on round 2 only: within the floor
    data = _data(_run("baseline", "baseline", 0, ("a", "b", "c")), _run("baseline", "baseline", 1, ("a", "b", "d")),
                 _run("cur", "current", 0, ("a", "b", "e"), 4, 1))
    st = token_status(data)
    assert st[("p", "cur", 0)] == "within_baseline_noise" and st[("p", "baseline", 1)] == "within_baseline_noise"
    issues = _collect(data)
    assert [(i.code, i.severity) for i in issues] == [("baseline_not_deterministic", "warning")]
    assert "baseline not deterministic on this runtime" in issues[0].message and "[2]" in issues[0].message


def test_a_case_beyond_the_floor_is_an_error_saying_it_was_judged_against_it():
    data = _data(_run("baseline", "baseline", 0, ("a", "b", "c")), _run("baseline", "baseline", 1, ("a", "b", "d")),
                 _run("cur", "current", 0, ("z", "b", "e"), 4, 1))
    errors = [i for i in _collect(data) if i.severity == "error"]
    assert len(errors) == 1 and "beyond the baseline-vs-baseline floor" in errors[0].message
    assert "rounds [0, 2] match no baseline process vs floor [2]" in errors[0].message
