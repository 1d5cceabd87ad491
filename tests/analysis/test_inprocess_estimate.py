"""The in-process copy-share estimate (analysis.comparison.inprocess), simulated through the production functions.

Claims: pairs are read in ABBA order (A and B of every pair, whichever ran first); one process's estimate is the
paired rule over its pairs; the pooled estimate is one paired estimate per process, t over processes. Under a host
whose speed moves in time (an AR(1) slowdown shared by the rounds of a process: autocorrelation 0.62 between rounds
about 2 s apart and a level SD of 15%, as measured on the 2-vCPU Xeon on 2026-12-05, plus 2% round noise and a
per-process offset of 10%), the pooled estimate recovers a known B/A ratio of 0.8, its 95% interval covers it at
about the nominal rate, and an A/A design (ratio 1) calls `slower`/`faster` at about 5%; and ABBA pairing beats the
same rounds compared unpaired.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.comparison import inprocess
from analysis.comparison.verdict_rule import decide
from offload.inprocess import round_arms

PHI, LEVEL_SD, ROUND_SD, PROCESS_SD = 0.62, 0.15, 0.02, 0.10
"""Host model of the simulation (module docstring): AR(1) coefficient per round, stationary SD of the log slowdown,
white round noise, per-process log offset."""

REPS, PROCESSES, ROUNDS = 2000, 4, 8
SE = math.sqrt(0.05 * 0.95 / REPS)


def _process(rng: np.random.Generator, ratio: float, rounds: int = ROUNDS) -> tuple[tuple[str, ...], np.ndarray]:
    arms = round_arms(rounds)
    s = np.empty(rounds)
    s[0] = rng.normal(0.0, LEVEL_SD)
    for i in range(1, rounds):
        s[i] = PHI * s[i - 1] + rng.normal(0.0, LEVEL_SD * math.sqrt(1 - PHI ** 2))
    log_tok = math.log(170.0) + rng.normal(0.0, PROCESS_SD) - s + rng.normal(0.0, ROUND_SD, rounds)
    log_tok += np.array([math.log(ratio) if a == "B" else 0.0 for a in arms])
    return arms, np.exp(log_tok)


def _pooled(rng: np.random.Generator, ratio: float):
    return inprocess.pooled_estimate([_process(rng, ratio) for _ in range(PROCESSES)])


def test_pairs_are_read_as_a_and_b_whichever_ran_first():
    a, b = inprocess.pair_values(tuple("ABBA"), [10.0, 8.0, 9.0, 11.0])
    assert list(a) == [10.0, 11.0] and list(b) == [8.0, 9.0]
    with pytest.raises(ValueError, match="one 'A' and one 'B'"):
        inprocess.pair_values(tuple("AABB"), [1.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="even, non-zero count"):
        inprocess.pair_values(tuple("ABB"), [1.0, 1.0, 1.0])


def test_one_process_estimate_is_the_paired_rule_over_its_pairs():
    d = inprocess.process_estimate(tuple("ABBAABBA"), [100.0, 80.0, 81.0, 101.0, 99.0, 79.0, 80.0, 100.0])
    assert d.method == "paired t" and d.n_a == 4
    assert d.verdict == "slower" and -21.5 < d.center_pct < -19.0


def test_the_pooled_estimate_counts_processes_not_rounds():
    rng = np.random.default_rng(1)
    procs = [_process(rng, 0.8) for _ in range(3)]
    d = inprocess.pooled_estimate(procs)
    assert d.n_a == 3 and d.df == 2.0
    rows = inprocess.label_rows("p", "current_g2_n1_abba", "abba", [(i, a, t, True) for i, (a, t) in enumerate(procs)])
    assert [r.repeat for r in rows] == [0, 1, 2, None] and rows[-1].units == 3 and rows[0].units == 4
    lines = inprocess.report_lines(rows)
    assert lines[0] == inprocess.TITLE and "not the verdict of record" in lines[0]
    assert "not independent replicates" in lines[1]
    assert "pooled" in lines[-1] and "3 processes" in lines[-1]


@pytest.mark.heavy  # measured 1.8 s (2000 simulated 4-process designs)
def test_the_pooled_estimate_recovers_a_known_ratio_and_covers_it_at_about_the_nominal_rate():
    rng = np.random.default_rng(53)
    truth = -20.0
    cover, centers = 0, []
    for _ in range(REPS):
        d = _pooled(rng, 0.8)
        cover += d.ci_low_pct <= truth <= d.ci_high_pct
        centers.append(d.center_pct)
    assert abs(float(np.mean(centers)) - truth) < 0.5
    assert abs(cover / REPS - 0.95) <= 2.5 * SE, cover / REPS


@pytest.mark.heavy  # measured 1.7 s (2000 simulated 4-process A/A designs)
def test_an_aa_design_calls_about_five_percent():
    rng = np.random.default_rng(54)
    calls = sum(_pooled(rng, 1.0).verdict in ("slower", "faster") for _ in range(REPS))
    rate = calls / REPS
    assert 0.05 - 2.5 * SE <= rate <= 0.05 + 2 * SE, rate


def test_abba_pairing_is_narrower_than_the_same_rounds_unpaired():
    rng = np.random.default_rng(55)
    paired, unpaired = [], []
    for _ in range(200):
        arms, tok = _process(rng, 0.8, rounds=16)
        a, b = inprocess.pair_values(arms, tok)
        paired.append(inprocess.process_estimate(arms, tok))
        unpaired.append(decide(b, a))
    width = [np.median([d.ci_high_pct - d.ci_low_pct for d in ds]) for ds in (paired, unpaired)]
    assert width[0] < 0.85 * width[1]
