"""Simulated process values with this host's noise, for stating the verdict rule's error rates and power.

What is modelled: one case process measures ``rounds`` rounds; round ``r`` of process ``p`` runs at
``exp(c + u_p + e_pr)`` tok/s, with ``u_p ~ N(0, process_sd^2)`` (between processes: placement, load at
start) and ``e_pr ~ N(0, round_sd^2)`` (between rounds); the process's value is what its record holds,
tokens over wall seconds of its rounds, i.e. the harmonic mean of its round rates (every round generates
the same tokens). Options: a *two-cluster* arm (each process falls in a second mode ``cluster_gap`` slower
with probability ``cluster_p``: host-load run 3 measured 117, 137, 138, 112 tok/s), and a *linear drift*
over the schedule (``drift_per_process``: the host's speed changes by that fraction per process started,
given the process's position in the run's order), and a *shared block effect* (``sequential_rates``' ``block_sd``:
the processes of one block, the label's and the reference's, share a log shift ``~ N(0, block_sd^2)``: the host's
speed moving in episodes of 10-40 s, ``docs/measurements/noise-source-2026-12-05.md``). The defaults are this host's components
(``/work/shared/cases/observed-2026-12-05.md``: between-process SD about 2.5%, round SD 2-4%, 4 rounds).

``call_rate`` runs the production rule (``analysis.comparison.verdict_rule.decide``) on simulated arms and
returns the fraction of ``slower`` / ``faster`` calls with its binomial standard error: under no effect the
false-call rate, under an effect the power. The tests (``tests/analysis/test_verdict_coverage.py``) and
``scripts/verdict_power.py`` use it.

What is deliberately not modelled: correlation between arms beyond the shared block effect (e.g. a host speed
that decays with the distance in time between two processes of a block), rounds as samples (the rule never uses
them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analysis.comparison.sequential import SequentialDesign, label_looks
from analysis.comparison.verdict_rule import CONFIDENCE, DEFAULT_MARGIN_PCT, decide

CALLS = ("slower", "faster")


@dataclass(frozen=True)
class Noise:
    """Noise of one arm's processes (module docstring); SDs are of log tok/s (0.025 = about 2.5%).

    Attributes:
        process_sd: between-process SD.
        round_sd: round-to-round SD inside a process.
        rounds: measured rounds per process (>= 1).
        cluster_gap: the second mode's deficit (0.15 = 15% slower); 0 = one mode.
        cluster_p: probability that a process falls in the second mode.
        drift_per_process: relative speed change per schedule position (-0.01 = 1% slower per process).
    """

    process_sd: float = 0.025
    round_sd: float = 0.03
    rounds: int = 4
    cluster_gap: float = 0.0
    cluster_p: float = 0.5
    drift_per_process: float = 0.0


def process_values(rng: np.random.Generator, n: int, noise: Noise, *, effect: float = 1.0,
                   positions: Sequence[int] | None = None, shared: np.ndarray | None = None) -> np.ndarray:
    """``n`` simulated per-process throughputs (arbitrary unit, centre 1.0 times ``effect``).

    Args:
        rng: numpy generator (seeded by the caller).
        n: processes (>= 1).
        noise: the arm's noise.
        effect: multiplicative effect of the arm (0.95 = a 5% cost).
        positions: schedule position of each process (length ``n``) for the drift; None = no drift.
        shared: a log shift per process (length ``n``) that other arms' processes of the same block share (the block
            effect); None = none.

    Raises:
        ValueError: ``positions`` or ``shared`` of another length than ``n``.
    """
    u = noise.process_sd * rng.standard_normal(n)
    if shared is not None:
        if len(shared) != n:
            raise ValueError(f"process_values: {len(shared)} shared shifts for {n} processes")
        u = u + np.asarray(shared, dtype=float)
    if noise.cluster_gap:
        u = u + np.where(rng.random(n) < noise.cluster_p, math.log1p(-noise.cluster_gap), 0.0)
    if positions is not None:
        if len(positions) != n:
            raise ValueError(f"process_values: {len(positions)} positions for {n} processes")
        u = u + np.log1p(noise.drift_per_process * np.asarray(positions, dtype=float))
    rounds = np.exp(u[:, None] + noise.round_sd * rng.standard_normal((n, noise.rounds)))
    return effect * noise.rounds / np.sum(1.0 / rounds, axis=1)


def aa_bound(alpha: float, reps: int) -> float:
    """The highest simulated A/A false-call rate that still meets a nominal ``alpha``: ``alpha + 2 SE``, the
    binomial standard error of a rate ``alpha`` over ``reps`` comparisons (5.80% at alpha 5%, 3000 reps)."""
    return alpha + 2.0 * math.sqrt(alpha * (1.0 - alpha) / reps)


def rate_and_se(hits: int, reps: int) -> tuple[float, float]:
    """``(hits / reps, its binomial standard error)``."""
    p = hits / reps
    return p, math.sqrt(max(p * (1.0 - p), 1e-12) / reps)


def call_rate(n_a: int, n_b: int, noise: Noise, *, reps: int, seed: int, effect: float = 1.0,
              noise_b: Noise | None = None, positions: tuple[Sequence[int], Sequence[int]] | None = None,
              margin_pct: float = DEFAULT_MARGIN_PCT, confidence: float = CONFIDENCE,
              calls: Sequence[str] = CALLS) -> tuple[float, float]:
    """Fraction of ``reps`` simulated comparisons that ``decide(a, b)`` calls one of ``calls``, and its SE.

    Args:
        n_a, n_b: processes per arm.
        noise: arm A's noise (and B's unless ``noise_b``).
        reps, seed: simulated comparisons and the generator's seed.
        effect: A's multiplicative effect (1.0: A/A; 0.9: a 10% cost).
        positions: (A's, B's) schedule positions for the drift.
        margin_pct, confidence: passed to ``decide``.
        calls: verdicts counted (default: ``slower`` and ``faster``).

    Returns:
        ``(rate, standard error)``.
    """
    rng = np.random.default_rng(seed)
    nb_noise = noise if noise_b is None else noise_b
    pa, pb = positions if positions is not None else (None, None)
    hits = 0
    for _ in range(reps):
        a = process_values(rng, n_a, noise, effect=effect, positions=pa)
        b = process_values(rng, n_b, nb_noise, positions=pb)
        hits += decide(a, b, margin_pct=margin_pct, confidence=confidence).verdict in calls
    return rate_and_se(hits, reps)


@dataclass(frozen=True)
class SequentialRates:
    """What ``sequential_rates`` found over its replicates (rates are fractions, SEs binomial).

    Attributes:
        calls, calls_se: ``slower`` or ``faster`` at any look (A/A: the false-call rate; under an effect: power).
        slower: ``slower`` at any look.
        equivalent: ``equivalent`` at any look.
        inconclusive: open at the budget.
        mean_processes: mean processes of the label at its stopping look (the reference runs at least as many).
        by_look: fraction of replicates stopped at each look (the budget's includes ``inconclusive``).
    """

    calls: float
    calls_se: float
    slower: float
    equivalent: float
    inconclusive: float
    mean_processes: float
    by_look: tuple[float, ...]


def sequential_rates(design: SequentialDesign, noise: Noise, *, reps: int, seed: int, effect: float = 1.0,
                     noise_b: Noise | None = None, positions: tuple[Sequence[int], Sequence[int]] | None = None,
                     block_sd: float = 0.0, calls: Sequence[str] = CALLS) -> SequentialRates:
    """Simulate the production sequential rule (``analysis.comparison.sequential.label_looks``, which takes the
    design's pairing) over every look.

    Each replicate draws ``design.budget`` processes per arm (``process_values``; ``positions``: each arm's
    schedule positions, budget long, for the drift; block ``j``'s two processes share a log shift
    ``~ N(0, block_sd^2)``) and takes the looks in order until one stops the label.

    Args:
        design: the sequential design.
        noise: the label's noise (and the reference's unless ``noise_b``).
        reps, seed: replicates and the generator's seed.
        effect: the label's multiplicative effect (1.0: A/A; 0.95: a 5% cost).
        positions: (label's, reference's) schedule positions, each ``design.budget`` long.
        block_sd: SD (log) of the shift the two arms' processes of one block share; 0: none.
        calls: verdicts counted in ``calls``.
    """
    rng = np.random.default_rng(seed)
    nb_noise = noise if noise_b is None else noise_b
    pa, pb = positions if positions is not None else (None, None)
    n = design.budget
    hits = slower = equivalent = inconclusive = processes = 0
    stops = [0] * len(design.looks)
    for _ in range(reps):
        shared = block_sd * rng.standard_normal(n) if block_sd else None
        a = process_values(rng, n, noise, effect=effect, positions=pa, shared=shared)
        b = process_values(rng, n, nb_noise, positions=pb, shared=shared)
        last = label_looks(a, b, design, with_mde=False)[-1]
        hits += last.verdict in calls
        slower += last.verdict == "slower"
        equivalent += last.verdict == "equivalent"
        inconclusive += last.verdict == "inconclusive"
        processes += last.processes
        stops[last.look - 1] += 1
    p, se = rate_and_se(hits, reps)
    return SequentialRates(p, se, slower / reps, equivalent / reps, inconclusive / reps, processes / reps,
                           tuple(s / reps for s in stops))


@dataclass(frozen=True)
class RunRates:
    """What ``run_rates`` found over its simulated runs.

    Attributes:
        processes: mean processes of a run counted as ``run_rates`` says (the baseline's plus the counted labels').
        conclusive: fraction of runs whose counted labels all stopped conclusive (not ``inconclusive``).
        slower: fraction of runs whose counted labels were all called ``slower``.
        label_slower: per label, the fraction of runs in which it was called ``slower``.
    """

    processes: float
    conclusive: float
    slower: float
    label_slower: tuple[float, ...]


def run_rates(design: SequentialDesign, costs: Sequence[float], noise: Noise, *, reps: int, seed: int,
              block_sd: float = 0.0, counted: Sequence[int] | None = None) -> RunRates:
    """Simulate whole sequential runs: a baseline and one label per cost, the labels' looks by the production
    ``label_looks`` (the design's pairing), the baseline running until the last label stops (as the runner does).

    Each run draws ``design.budget`` blocks; block ``j``'s processes (the baseline's and every label's) share a log
    shift ``~ N(0, block_sd^2)``.

    Args:
        design: the sequential design.
        costs: each label's true cost (fraction: 0.25 = 25% slower than the baseline).
        noise: every arm's noise.
        reps, seed: runs and the generator's seed.
        block_sd: SD (log) of the shift one block's processes share.
        counted: indices of the labels whose processes (and verdicts) count (default: all); the baseline runs as
            long as any label is open, counted or not (a known-size control keeps it running).
    """
    rng = np.random.default_rng(seed)
    idx = list(range(len(costs))) if counted is None else list(counted)
    n = design.budget
    total = conclusive = slower = 0
    label_slower = [0] * len(costs)
    for _ in range(reps):
        shared = block_sd * rng.standard_normal(n) if block_sd else None
        b = process_values(rng, n, noise, shared=shared)
        ends = [label_looks(process_values(rng, n, noise, effect=1.0 - c, shared=shared), b, design,
                            with_mde=False)[-1] for c in costs]
        total += max(e.processes for e in ends) + sum(ends[i].processes for i in idx)
        conclusive += all(ends[i].verdict != "inconclusive" for i in idx)
        slower += all(ends[i].verdict == "slower" for i in idx)
        for i, e in enumerate(ends):
            label_slower[i] += e.verdict == "slower"
    return RunRates(total / reps, conclusive / reps, slower / reps, tuple(x / reps for x in label_slower))
