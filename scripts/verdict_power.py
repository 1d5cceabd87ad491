"""Print the verdict rule's simulated error rates and power (the figures of docs/measurements/verdict-rule-*.md).

What is modelled: the production rule (``analysis.comparison.verdict_rule.decide`` for processes,
``analysis.serving.stats.block_verdict`` for serving blocks) run on arms simulated by
``analysis.comparison.verdict_sim`` (this host's components: between-process SD 2.5%, round SD 2-4%,
4 rounds; a two-cluster arm 15% apart; a linear drift over the order ``runners.planning.plan.schedule``
gives the default design's 3 labels x 4 repeats). Printed per setting: the A/A false-call rate
(``slower`` or ``faster``) with its binomial SE and the bound alpha + 2 SE, and the power (``slower``) at a
5% and a 10% cost. Serving blocks: A/A rate and power of ``block_verdict`` with 2 and 3 blocks (a label
process and two baselines per block, a block effect shared by the block's processes).

Usage: ``python scripts/verdict_power.py [--reps N] [--seed S]`` (about a minute per 1000 reps on one core).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.comparison.verdict_rule import CONFIDENCE  # noqa: E402
from analysis.comparison.verdict_sim import Noise, aa_bound, call_rate, process_values, rate_and_se  # noqa: E402
from analysis.serving.stats import block_verdict  # noqa: E402
from runners.planning.plan import schedule  # noqa: E402

ALPHA = 1.0 - CONFIDENCE
HOST = Noise()
SETTINGS: dict[str, Noise] = {
    "host, round SD 2%": Noise(round_sd=0.02),
    "host, round SD 4%": Noise(round_sd=0.04),
    "two-cluster 15% apart (p 0.5)": Noise(cluster_gap=0.15),
    "two-cluster 15% apart (p 0.25)": Noise(cluster_gap=0.15, cluster_p=0.25),
}
COUNTS = ((4, 4), (2, 2), (3, 3), (6, 6), (2, 6), (6, 2), (3, 5), (2, 4), (4, 6))


def design_positions(labels: int, repeats: int) -> dict[int, list[int]]:
    """Schedule positions of each label index under the runner's rotated order (``runners.planning.plan``)."""
    cases = [SimpleNamespace(label=f"l{i}", repeats=repeats, phase="p") for i in range(labels)]
    out: dict[int, list[int]] = {}
    for sc in schedule({"p": cases}):  # type: ignore[dict-item]
        out.setdefault(int(sc.case.label[1:]), []).append(sc.index)
    return out


def blocks_rate(k: int, *, reps: int, seed: int, effect: float = 1.0, block_sd: float = 0.05,
                noise: Noise = HOST, calls: tuple[str, ...] = ("slower", "faster")) -> tuple[float, float]:
    """``block_verdict`` (lower is better: latency = 1 / speed) over ``k`` blocks of one label and two
    baselines sharing a block effect (SD ``block_sd``); returns (rate of ``calls``, SE)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        blocks = []
        for _k in range(k):
            shift = math.exp(block_sd * rng.standard_normal())
            lab = shift / process_values(rng, 1, noise, effect=effect)
            base = shift / process_values(rng, 2, noise)
            blocks.append((list(lab), list(base)))
        hits += block_verdict(blocks)["verdict"] in calls
    return rate_and_se(hits, reps)


def _line(name: str, p: float, se: float, reps: int | None = None) -> str:
    """One printed setting; with ``reps`` (an A/A rate) also the bound alpha + 2 SE and OVER when above it."""
    tail = ""
    if reps:
        lim = aa_bound(ALPHA, reps)
        tail = f"  (bound alpha + 2 SE = {lim * 100:.2f}%){'  OVER' if p > lim else ''}"
    return f"  {name:<44} {p * 100:6.2f}% ± {se * 100:.2f}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=53)
    args = ap.parse_args(argv)
    reps, seed = args.reps, args.seed
    print(f"A/A false-call rate (slower or faster) of decide, nominal {ALPHA:.0%}, {reps} comparisons each")
    for name, noise in SETTINGS.items():
        print(name)
        for na, nb in COUNTS:
            print(_line(f"{na} vs {nb}", *call_rate(na, nb, noise, reps=reps, seed=seed), reps))
    pos = design_positions(3, 4)
    print("linear drift over the default design's rotated order (3 labels x 4 repeats; label vs baseline)")
    for drift in (-0.005, -0.01, -0.02):
        d = Noise(drift_per_process=drift)
        print(_line(f"{drift * 100:+.1f}% per process", *call_rate(4, 4, d, reps=reps, seed=seed,
                                                                    positions=(pos[2], pos[0])), reps))
    blocked = (list(range(4, 8)), list(range(4)))
    print(_line("-1.0% per process, blocked AAAA BBBB order", *call_rate(
        4, 4, Noise(drift_per_process=-0.01), reps=reps, seed=seed, positions=blocked))
        + "  (no rule can: the order charges the drift to B)")
    print("power of decide: P(slower) at a cost")
    for name, noise in {"host, round SD 3%": HOST, **SETTINGS}.items():
        for na, nb in ((4, 4), (6, 6), (8, 8)):
            for cost in (0.05, 0.10):
                p, se = call_rate(na, nb, noise, reps=reps // 4, seed=seed, effect=1 - cost, calls=("slower",))
                print(_line(f"{name}, {na} vs {nb}, {cost:.0%} cost", p, se))
    print("serving blocks (block_verdict, lower is better; block effect SD 5%)")
    for k in (2, 3):
        print(_line(f"{k} blocks, A/A", *blocks_rate(k, reps=reps, seed=seed), reps))
        for cost in (0.05, 0.10, 0.30):
            p, se = blocks_rate(k, reps=reps // 4, seed=seed, effect=1 - cost, calls=("slower",))
            print(_line(f"{k} blocks, {cost:.0%} slower", p, se))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
