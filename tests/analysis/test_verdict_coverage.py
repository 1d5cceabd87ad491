"""The verdict rule's stated coverage, shown by simulating the production functions.

A/A (no effect): ``decide`` (processes, unpaired) and ``analysis.serving.stats.block_verdict`` (serving blocks,
paired) call ``slower`` or ``faster`` in at most alpha + 2 simulation SEs of the comparisons, at this host's
variance components (between-process SD 2.5%, round SD 2-4%, 4 rounds: /work/shared/cases/observed-2026-12-05.md),
with a two-cluster arm (modes 15% apart) and with a linear drift over the runner's rotated order. Fixed seeds.
Power is printed by ``scripts/verdict_power.py`` (docs/measurements/verdict-rule-2026-12-05.md), not asserted.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.comparison.verdict_rule import CONFIDENCE
from analysis.comparison.verdict_sim import Noise, aa_bound, call_rate, process_values, rate_and_se
from analysis.serving.stats import block_verdict
from runners.planning.plan import schedule

ALPHA = 1.0 - CONFIDENCE
REPS = 3000
BOUND = aa_bound(ALPHA, REPS)  # 5.80%
COUNTS = [(4, 4), (2, 2), (2, 6), (6, 2), (3, 5), (2, 4)]


@pytest.mark.heavy  # about 10 s: 12 x 3000 decide calls
@pytest.mark.parametrize("round_sd", [0.02, 0.04])
@pytest.mark.parametrize(("n_a", "n_b"), COUNTS)
def test_no_effect_at_this_hosts_components_is_called_at_most_alpha(round_sd, n_a, n_b):
    p, se = call_rate(n_a, n_b, Noise(process_sd=0.025, round_sd=round_sd), reps=REPS, seed=5300 + n_a * 10 + n_b)
    assert p <= BOUND, f"{n_a} vs {n_b}, round SD {round_sd}: {p:.2%} ± {se:.2%} false calls"


@pytest.mark.heavy  # about 10 s
@pytest.mark.parametrize("cluster_p", [0.5, 0.25])
@pytest.mark.parametrize(("n_a", "n_b"), COUNTS)
def test_no_effect_with_two_cluster_arms_is_called_at_most_alpha(cluster_p, n_a, n_b):
    """Processes fall in two modes 15% apart (host-load run 3: 117, 137, 138, 112 tok/s), both arms alike.
    Welch alone calls 13-14% here at 2 vs 6; the pooled t bounds it."""
    p, se = call_rate(n_a, n_b, Noise(cluster_gap=0.15, cluster_p=cluster_p), reps=REPS, seed=5400 + n_a * 10 + n_b)
    assert p <= BOUND, f"{n_a} vs {n_b}, two clusters p={cluster_p}: {p:.2%} ± {se:.2%} false calls"


def _positions(labels: int, repeats: int) -> dict[int, list[int]]:
    """Each label's positions in the runner's rotated order (``runners.planning.plan.schedule``)."""
    cases = [SimpleNamespace(label=f"l{i}", repeats=repeats, phase="p") for i in range(labels)]
    out: dict[int, list[int]] = {}
    for sc in schedule({"p": cases}):
        out.setdefault(int(sc.case.label[1:]), []).append(sc.index)
    return out


@pytest.mark.heavy  # about 5 s
@pytest.mark.parametrize("drift", [-0.01, -0.02])
@pytest.mark.parametrize(("labels", "label"), [(3, 1), (3, 2), (4, 3)])
def test_no_effect_under_a_linear_drift_over_the_rotated_order_is_called_at_most_alpha(drift, labels, label):
    """The default (3 labels x 4 repeats) and smollm2 (4 x 4) orders: a host slowing 1-2% per process (12-32%
    over the run) spreads over every label; the last label against the baseline, the furthest apart."""
    pos = _positions(labels, 4)
    p, se = call_rate(4, 4, Noise(drift_per_process=drift), reps=REPS, seed=5500 + labels * 10 + label,
                      positions=(pos[label], pos[0]))
    assert p <= BOUND, f"drift {drift:+.0%}/process, label {label} of {labels}: {p:.2%} ± {se:.2%} false calls"


def _blocks_false_rate(k: int, reps: int, seed: int, noise: Noise) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        blocks = []
        for _b in range(k):
            shift = math.exp(0.05 * rng.standard_normal())  # the block's share of a drifting host (5% SD)
            blocks.append((list(shift / process_values(rng, 1, noise)), list(shift / process_values(rng, 2, noise))))
        hits += block_verdict(blocks)["verdict"] in ("slower", "faster")
    return rate_and_se(hits, reps)


@pytest.mark.heavy  # about 6 s
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("noise", [Noise(), Noise(cluster_gap=0.15)], ids=["host", "two-cluster"])
def test_serving_blocks_without_an_effect_are_called_at_most_alpha(k, noise):
    """``block_verdict`` (one label process and two baselines per block, latency = 1 / speed): the range rule it
    replaced had 2/9 at 2 blocks as its own bound."""
    p, se = _blocks_false_rate(k, REPS, 5600 + k, noise)
    assert p <= BOUND, f"{k} blocks: {p:.2%} ± {se:.2%} false calls"


def test_a_clear_cost_is_called_slower_at_four_processes_a_side():
    """Not a power claim (that is printed by scripts/verdict_power.py): a 20% cost at this host's noise is seen."""
    p, _se = call_rate(4, 4, Noise(), reps=40, seed=5700, effect=0.8, calls=("slower",))
    assert p == 1.0
