"""The verifier's baseline self-check: agreeing baselines change nothing; disagreeing ones give the noise floor."""

from __future__ import annotations

import pytest
from pathlib import Path

from analysis.accuracy.verifier import main, render_markdown, verify
from analysis.accuracy.table import render_csv

from .conftest import FakeEngine, make_run, offload


def _twisted(*indices: int) -> type[FakeEngine]:
    class Twisted(FakeEngine):
        twist = staticmethod(lambda i, text: f"other {i}" if i in indices else text)
        twist_baseline = True
    return Twisted


def _run(root: Path, model: Path, base_r1: type[FakeEngine], current: type[FakeEngine]) -> Path:
    """Baseline run twice (r0 plain, r1 ``base_r1``), then current (4,1) with ``current``: gsm8k only."""
    make_run(root / "baseline-r0", model, datasets=("gsm8k",), cases=(("baseline", offload()),))
    make_run(root / "cur-r0", model, datasets=("gsm8k",), cases=(("current", offload(4, 1)),), engine_factory=current)
    make_run(root / "baseline-r1", model, datasets=("gsm8k",), cases=(("baseline", offload()),),
             engine_factory=base_r1)
    return root


def _check(report, name: str, label: str):
    return next(c for c in report.checks if c.name == name and c.label == label)


@pytest.mark.heavy  # measured 2.0 s in the fast tier (its budget is 2 minutes)
def test_agreeing_baselines_change_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    report = verify(_run(tmp_path / "r", tiny_model_dir, FakeEngine, FakeEngine), limit=50)
    assert report.passed
    (a,) = report.baselines
    assert a.agree and a.runs == 2 and a.judged_by == "identity" and a.differing_examples == ()
    assert _check(report, "identity", "current_g4_n1").status == "pass"
    assert not [c for c in report.checks if c.name == "noise_floor"]
    assert "2 runs agree (identical examples): offload cases judged by identity" in render_markdown(report)
    assert render_csv(report).splitlines()[1].endswith(",identity")


@pytest.mark.heavy  # measured 6.0 s in the fast tier (its budget is 2 minutes)
def test_disagreeing_baselines_give_the_noise_floor_verdict_not_an_offload_failure(tmp_path: Path,
                                                                                  tiny_model_dir: Path) -> None:
    # baseline r1 differs from r0 on example 0; the offload case differs from both baselines on example 3 only
    report = verify(_run(tmp_path / "r", tiny_model_dir, _twisted(0), _twisted(3)), limit=50)
    (a,) = report.baselines
    assert not a.agree and a.judged_by == "noise_floor" and a.differing_examples == (0,)
    agreement = _check(report, "baseline_agreement", "baseline")
    assert agreement.status == "pass" and "BASELINE NOT DETERMINISTIC on this runtime" in agreement.message
    floor = _check(report, "noise_floor", "current_g4_n1")
    assert floor.status == "pass" and "match no baseline run on 1 example(s) [3] vs floor 1" in floor.message
    assert not [c for c in report.checks if c.name in ("identity", "drop")]
    assert report.passed
    md = render_markdown(report)
    assert "BASELINE NOT DETERMINISTIC on this runtime" in md and "paired per-example comparison" in md
    assert render_csv(report).splitlines()[1].endswith(",noise_floor")


@pytest.mark.heavy  # measured 6.3 s in the fast tier (its budget is 2 minutes)
def test_an_offload_case_beyond_the_floor_fails_saying_it_was_judged_against_it(tmp_path: Path,
                                                                               tiny_model_dir: Path) -> None:
    report = verify(_run(tmp_path / "r", tiny_model_dir, _twisted(0), _twisted(2, 3)), limit=50)
    floor = _check(report, "noise_floor", "current_g4_n1")
    assert floor.status == "fail" and "on 2 example(s) [2, 3] vs floor 1" in floor.message
    assert not report.passed


def test_cli_prints_the_noise_floor_mode(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    run = _run(tmp_path / "r", tiny_model_dir, _twisted(0), FakeEngine)
    assert main([str(run), "--limit", "50", "--no-write"]) == 0
    assert "BASELINE NOT DETERMINISTIC" in capsys.readouterr().out
