"""Print the sequential design's simulated error rates, power and processes (the figures of docs/sequential.md).

What is modelled: the production rule (``analysis.comparison.sequential.label_looks``, every look taken) on arms
simulated by ``analysis.comparison.verdict_sim.sequential_rates`` at this host's components (between-process SD
2.5-4%, round SD 2-4%, 4 rounds), a two-cluster arm (15% apart) and a linear drift over the runner's ABBA blocks
(``runners.planning.blocks``). Printed per design: the A/A false-call rate (``slower`` or ``faster`` at any look)
with its SE and the bound alpha + 2 SE; ``slower`` (power) at the target (5%) and at 10% and 30% costs, with the
mean processes per arm at the stopping look; a false ``equivalent`` at a 5.5% cost.

Usage: ``python scripts/sequential_power.py [--reps N] [--seed S]`` (about 20 s per 1000 reps on one core).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from analysis.comparison.sequential import SequentialDesign, label_looks  # noqa: E402
from analysis.comparison.verdict_sim import Noise, aa_bound, process_values, sequential_rates  # noqa: E402
from runners.planning.blocks import block_positions  # noqa: E402

DESIGNS = (SequentialDesign((3, 4, 6)), SequentialDesign((2, 3, 4, 6)), SequentialDesign((3, 4, 5)),
           SequentialDesign((3, 4, 6), spending="obrien_fleming"))
AA: dict[str, Noise] = {
    "SD 2.5% / rounds 2%": Noise(process_sd=0.025, round_sd=0.02),
    "SD 2.5% / rounds 4%": Noise(process_sd=0.025, round_sd=0.04),
    "SD 4% / rounds 4%": Noise(process_sd=0.04, round_sd=0.04),
    "two-cluster 15% apart (p 0.5)": Noise(cluster_gap=0.15),
    "two-cluster 15% apart (p 0.25)": Noise(cluster_gap=0.15, cluster_p=0.25),
}


def default_run_processes(design: SequentialDesign, costs: tuple[float, ...], noise: Noise, *, reps: int,
                          seed: int) -> tuple[float, float, float]:
    """A whole default-like run: a baseline and one label per cost share the baseline's processes; the baseline runs
    until the last label stops. Returns (mean processes of the run, baseline and labels; fraction of runs with every
    label conclusive; fraction with every label ``slower``)."""
    rng = np.random.default_rng(seed)
    total = conclusive = slower = 0
    for _ in range(reps):
        b = process_values(rng, design.budget, noise)
        ends = [label_looks(process_values(rng, design.budget, noise, effect=1 - c), b, design, with_mde=False)[-1]
                for c in costs]
        total += max(e.processes for e in ends) + sum(e.processes for e in ends)
        conclusive += all(e.verdict != "inconclusive" for e in ends)
        slower += all(e.verdict == "slower" for e in ends)
    return total / reps, conclusive / reps, slower / reps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=53)
    args = ap.parse_args(argv)
    reps, seed = args.reps, args.seed
    for d in DESIGNS:
        bound = aa_bound(d.alpha, reps)
        alphas = ", ".join(f"{a:.4f}" for a in d.look_alphas())
        print(f"design: looks {list(d.looks)} processes per arm, {d.spending}-type spending, alpha {d.alpha} "
              f"(per look {alphas}), target {d.target_pct:g}%, {reps} replicates, seed {seed}")
        settings = dict(AA)
        pos = block_positions(2, d.budget)
        settings["drift -2%/process, ABBA, 2 labels"] = Noise(drift_per_process=-0.02)
        for i, (name, noise) in enumerate(settings.items()):
            r = sequential_rates(d, noise, reps=reps, seed=seed + i,
                                 positions=(pos[2], pos[0]) if "drift" in name else None)
            over = "  OVER" if r.calls > bound else ""
            print(f"  A/A {name:<36} false calls {100 * r.calls:5.2f}% ± {100 * r.calls_se:.2f} (bound "
                  f"{100 * bound:.2f}%){over}; equivalent {100 * r.equivalent:5.1f}%; processes {r.mean_processes:.2f}")
        for sd in (0.025, 0.04, 0.10):
            for cost in (0.05, 0.10, 0.30):
                r = sequential_rates(d, Noise(process_sd=sd, round_sd=0.03), reps=reps, seed=seed + 100, effect=1 - cost)
                looks = "/".join(f"{100 * x:.0f}" for x in r.by_look)
                print(f"  cost {100 * cost:3.0f}% at SD {100 * sd:4.1f}%: slower {100 * r.slower:5.1f}%, equivalent "
                      f"{100 * r.equivalent:4.1f}%, inconclusive {100 * r.inconclusive:4.1f}%; processes per arm "
                      f"{r.mean_processes:.2f} (stopped by look, %: {looks})")
        r = sequential_rates(d, Noise(process_sd=0.025, round_sd=0.02), reps=reps, seed=seed + 200, effect=0.945)
        print(f"  false equivalent at a 5.5% cost (SD 2.5%): {100 * r.equivalent:.2f}% (bound {100 * bound:.2f}%)")
    d = DESIGNS[0]
    for costs in ((0.25, 0.40), (0.10, 0.30)):
        for sd in (0.025, 0.04, 0.10):
            n, conc, slow = default_run_processes(d, costs, Noise(process_sd=sd, round_sd=0.03), reps=reps // 4,
                                                  seed=seed + 300)
            print(f"default run (looks {list(d.looks)}), costs {', '.join(f'{100 * c:.0f}%' for c in costs)} at SD "
                  f"{100 * sd:.1f}%: {n:.2f} baseline+offload processes on average; every label conclusive "
                  f"{100 * conc:.1f}%, every label slower {100 * slow:.1f}% ({reps // 4} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
