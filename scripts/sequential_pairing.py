"""Print the paired-vs-unpaired comparison of the sequential design (the tables of docs/sequential.md, "Pairing").

What is modelled: the production rule (``analysis.comparison.sequential.label_looks``, every look taken, the
design's ``pairing`` choosing ``decide`` or ``decide_paired``) on arms simulated by
``analysis.comparison.verdict_sim`` with a shared block effect (the label's and the baseline's process of one block
share a log shift of SD ``block``; each process adds its own SD ``own`` and 4 rounds of SD 2%), for the default's
looks (3, 4, 6) and smollm2's (3, 4, 5), Pocock-type spending of 5%, target 5%, both pairings:

* A/A false calls (``slower`` or ``faster`` at any look) at (a) block 5% + own 5% (and the real runs' median
  paired/unpaired SD ratio, block 7% + own 5%; no block effect; the real runs' median components, block 6% + own
  9%: docs/measurements/paired-backtest-2026-12-05.md), (b) two-cluster arms (modes 15% apart, p 0.5
  and 0.25, with block 5%), (c) a linear drift of -2% per process over the runner's ABBA blocks of 2 labels (own 2.5%,
  without and with block 5%); the bound alpha + 2 SE (``aa_bound``);
* power (``slower`` at any look) and processes per arm at the stopping look at costs of 5%, 10% and 25%;
* whole default-like runs (``run_rates``): a baseline, costs 25% and 40% and a 10% known-size control whose
  processes are not counted (the baseline runs until the control stops too): mean baseline+offload processes and
  the share of runs with both offload labels conclusive.

Usage: ``python scripts/sequential_pairing.py [--reps N] [--seed S]`` (about 3 minutes per 1000 reps on one core).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.comparison.sequential import SequentialDesign  # noqa: E402
from analysis.comparison.verdict_sim import Noise, aa_bound, run_rates, sequential_rates  # noqa: E402
from runners.planning.blocks import block_positions  # noqa: E402

ROUND_SD = 0.02
AA: dict[str, tuple[Noise, float, bool]] = {
    "(a) block 5% + own 5%": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.05, False),
    "(a) block 7% + own 5% (real runs' median ratio)": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.07, False),
    "(a) no block, own 5%": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.0, False),
    "(a) block 6% + own 9% (real runs' median components)": (Noise(process_sd=0.09, round_sd=ROUND_SD), 0.06, False),
    "(b) two clusters 15% apart p 0.5, block 5%": (Noise(cluster_gap=0.15, round_sd=ROUND_SD), 0.05, False),
    "(b) two clusters 15% apart p 0.25, block 5%": (Noise(cluster_gap=0.15, cluster_p=0.25, round_sd=ROUND_SD),
                                                    0.05, False),
    "(c) drift -2%/process, ABBA, own 2.5%": (Noise(drift_per_process=-0.02, round_sd=ROUND_SD), 0.0, True),
    "(c) drift -2%/process, ABBA, block 5% + own 5%": (Noise(process_sd=0.05, drift_per_process=-0.02,
                                                             round_sd=ROUND_SD), 0.05, True),
}
POWER: dict[str, tuple[Noise, float]] = {
    "block 5% + own 5%": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.05),
    "block 7% + own 5%": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.07),
    "no block, own 5%": (Noise(process_sd=0.05, round_sd=ROUND_SD), 0.0),
    "block 6% + own 9%": (Noise(process_sd=0.09, round_sd=ROUND_SD), 0.06),
}
COSTS = (0.05, 0.10, 0.25)


def designs(looks: tuple[int, ...]) -> tuple[SequentialDesign, SequentialDesign]:
    return SequentialDesign(looks), SequentialDesign(looks, pairing="block")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=5353)
    ap.add_argument("--looks", type=int, nargs="+", default=[3, 4, 6])
    args = ap.parse_args(argv)
    reps, seed = args.reps, args.seed
    unpaired, paired = designs(tuple(args.looks))
    bound = aa_bound(unpaired.alpha, reps)
    print(f"looks {list(unpaired.looks)}, pocock-type spending, alpha 0.05, target 5%, {reps} replicates, seed {seed}, "
          f"rounds SD {100 * ROUND_SD:g}% x 4; bound alpha + 2 SE = {100 * bound:.2f}%")
    print("| A/A setting | unpaired false calls | paired false calls |")
    print("|---|---|---|")
    pos = block_positions(2, unpaired.budget)
    for i, (name, (noise, block, drift)) in enumerate(AA.items()):
        cells = []
        for d in (unpaired, paired):
            r = sequential_rates(d, noise, reps=reps, seed=seed + i, block_sd=block,
                                 positions=(pos[2], pos[0]) if drift else None)
            cells.append(f"{100 * r.calls:.2f}% ± {100 * r.calls_se:.2f}" + (" OVER" if r.calls > bound else ""))
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    print()
    print("| setting | true cost | unpaired: slower, processes per arm | paired: slower, processes per arm |")
    print("|---|---|---|---|")
    for j, (name, (noise, block)) in enumerate(POWER.items()):
        for cost in COSTS:
            cells = []
            for d in (unpaired, paired):
                r = sequential_rates(d, noise, reps=reps, seed=seed + 100 + j, block_sd=block, effect=1 - cost)
                cells.append(f"{100 * r.slower:.1f}%, {r.mean_processes:.2f}")
            print(f"| {name} | {100 * cost:.0f}% | {cells[0]} | {cells[1]} |")
    print()
    print("| setting (costs 25%, 40%; control 10% not counted) | unpaired: processes, both conclusive, control slower "
          "| paired: processes, both conclusive, control slower |")
    print("|---|---|---|")
    for j, (name, (noise, block)) in enumerate(POWER.items()):
        cells = []
        for d in (unpaired, paired):
            r = run_rates(d, (0.25, 0.40, 0.10), noise, reps=reps // 4, seed=seed + 300 + j, block_sd=block,
                          counted=(0, 1))
            cells.append(f"{r.processes:.2f}, {100 * r.conclusive:.1f}%, {100 * r.label_slower[2]:.1f}%")
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
