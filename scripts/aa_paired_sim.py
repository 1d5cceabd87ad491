"""Print the simulated error rates of ``+experiment=aa_paired``'s rows (paired t over its ABBA blocks) beside the same
runs judged unpaired (``+experiment=aa_noise``'s fixed rule), through the report's functions.

Usage: ``.venv/bin/python scripts/aa_paired_sim.py [--reps 3000] [--seed 5352] [--blocks N]`` (``--blocks``: the
design at N blocks instead of the experiment's own, read from its config). The settings and the simulation are
``tests/analysis/test_aa_paired_coverage.py``'s (``simulate``); docs/sequential.md ("The paired A/A experiment")
holds the numbers. Each A/A rate is ``slower`` or ``faster`` per comparison (alpha 5%); the control's is ``slower``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.comparison.power import detectable_paired_cost_pct  # noqa: E402
from analysis.comparison.verdict_sim import Noise, aa_bound, rate_and_se  # noqa: E402
from tests.analysis.test_aa_paired_coverage import AA_SETTINGS, BLOCKS, simulate  # noqa: E402


def _fmt(hits: dict[str, int], reps: int) -> str:
    return "; ".join(f"{k}: {100 * rate_and_se(v, reps)[0]:.2f}% ± {100 * rate_and_se(v, reps)[1]:.2f}"
                     for k, v in hits.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=5352)
    ap.add_argument("--blocks", type=int, default=BLOCKS, help=f"blocks of the design (default {BLOCKS}: the "
                    "experiment's)")
    args = ap.parse_args()
    if not 2 <= args.blocks <= 50:
        print(f"aa_paired_sim.py: --blocks {args.blocks}: allowed 2..50 (a paired t needs 2 blocks)", file=sys.stderr)
        raise SystemExit(2)
    print(f"A/A bound alpha + 2 SE at {args.reps} runs: {100 * aa_bound(0.05, args.reps):.2f}%")
    settings = dict(AA_SETTINGS)
    settings["control power: block 6% + own 3%"] = (0.06, Noise(process_sd=0.03, round_sd=0.02), None)
    for i, (name, (block_sd, noise, current)) in enumerate(settings.items()):
        for paired in (True, False):
            hits = simulate(args.seed + i, block_sd, noise, current, control_cost=0.12, reps=args.reps, paired=paired,
                            blocks=args.blocks)
            print(f"{name} [{f'paired t, {args.blocks} blocks' if paired else 'unpaired (aa_noise rule)'}], control "
                  f"12%: {_fmt(hits, args.reps)}", flush=True)
    sd = (2 * (0.03 ** 2 + 0.02 ** 2 / 4)) ** 0.5
    print(f"paired MDE at {args.blocks} blocks, per-block log-ratio SD {100 * sd:.2f}% (approx.): "
          f"{detectable_paired_cost_pct(args.blocks, sd):.1f}%")


if __name__ == "__main__":
    main()
