"""The paired A/A experiment's rows (``+experiment=aa_paired``) hold their error rate and their stated power,
simulated through the production functions that print them.

Each replicate is one whole run of the design as the experiment's config declares it (its arms in their order, its
one look at ``BLOCKS`` blocks, its target, alpha and spending): its ABBA blocks
(``runners.planning.blocks.block_order``: the runner's order) of the 5 arms (baseline, the speed control,
baseline_twin, current_g2_n1, current_g2_n1_twin), one process each, simulated by
``analysis.comparison.verdict_sim.process_values`` (a process's own SD, 4 rounds, a log shift the
processes of one block share, a linear drift over the run's order, two-cluster arms). The replicate's runs table goes
through the production path of a report: ``sequential_verdicts`` (the look the run records, recomputed), then
``dimensioning.aa_comparisons`` (the A/A and control rows) and ``dimensioning.dimensioning_lines`` (the printed
lines, whose "A/A calls: k of 2" is checked against the rows). Settings (SDs of log tok/s):

* A/A: block 6% + own 4%; block 6% + own 9% (the real runs' median components,
  ``docs/measurements/paired-backtest-2026-12-05.md``); a drift of -2% per process over the run's order (own 2.5%);
  both current arms two-cluster (each process 15% slower with probability 0.5) on a block shift of 5%. Every A/A
  comparison's false-call rate (``slower`` or ``faster``) is at most ``verdict_sim.aa_bound`` (alpha + 2 SE).
* Power (block 6% + own 5.5%): the printed paired MDE (``power.detectable_paired_cost_pct`` at the true SD of the
  per-block log ratio, ``BLOCKS`` blocks, 95%) states 80% power at its cost, 11.1% at 6
  blocks; the control set at that cost (a known 10-15% cost) is called ``slower`` against baseline and against
  baseline_twin within 5 points of 80%.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from analysis.comparison.dimensioning import aa_comparisons, dimensioning_lines
from analysis.comparison.power import detectable_paired_cost_pct
from analysis.comparison.sequential_verdict import sequential_verdicts
from analysis.comparison.verdict_sim import Noise, aa_bound, process_values, rate_and_se
from results_schema.records.sequential import LabelLook, LookDecision
from runners.planning.blocks import block_positions
from tests.runners.helpers import compose_cfg

_PHASE = compose_cfg("+experiment=aa_paired").phases["same_runtime"]
"""The experiment's phase, from its config: the simulated design is the one it runs (its arms in block order, its one
look, its target, alpha and spending, the control's delay)."""
CONTROL = "control_delay_2_6ms"
LABELS = [str(c.label) for c in _PHASE.cases]  # after the baseline, in the config's order: the runner's block order
DELAY_MS = {str(c.label): float(c.step_delay_ms or 0.0) for c in _PHASE.cases}
IMPL = {"baseline": "baseline", **{str(c.label): str(c.implementation) for c in _PHASE.cases}}
(BLOCKS,) = _PHASE.sequential.looks
"""The experiment's blocks (its one look: the budget)."""
REPS = 900
"""Simulated runs per A/A setting: the bound (alpha + 2 SE) is 6.45% at 900 (a rule at twice its alpha, 10%, calls
more than that in >= 99% of seeds); each replicate is a whole report path (about 2.4 CPU-ms here), so the file costs
about 15 CPU-s of the suite's critical path. scripts/aa_paired_sim.py runs 2000 per setting for docs/sequential.md."""
POWER_REPS = 1500
"""Simulated runs for the stated power (SE 1.0 point at 80%: the 5-point tolerance is 4.8 SE)."""


def look_line(blocks: int) -> LookDecision:
    """The run's one look line as ``+experiment=aa_paired`` records it, at ``blocks`` blocks (``BLOCKS``: the
    experiment's; its verdicts are recomputed, never read)."""
    seq = _PHASE.sequential
    return LookDecision(phase="same_runtime", look=1, blocks=blocks, looks=(blocks,), target_pct=seq.target_pct,
                        alpha=seq.alpha, spending=seq.spending, pairing=seq.pairing, look_alpha=seq.alpha,
                        baseline="baseline",
                        labels=tuple(LabelLook(label=lb, verdict="inconclusive", processes=blocks,
                                               reference_processes=blocks, ci_low_pct=None, ci_high_pct=None,
                                               center_pct=None, method="paired t", reason="recomputed by the analysis")
                                     for lb in LABELS), next_blocks=0)


def _runs(rng: np.random.Generator, block_sd: float, noise: Noise, current: Noise, control_cost: float,
          blocks: int) -> pd.DataFrame:
    shared = block_sd * rng.standard_normal(blocks)
    pos = block_positions(len(LABELS), blocks)
    rows = []
    for i, label in enumerate(["baseline", *LABELS]):
        arm = current if label.startswith("current") else noise
        effect = 1.0 - control_cost if label == CONTROL else 0.8 if label.startswith("current") else 1.0
        vals = process_values(rng, blocks, arm, effect=effect, positions=pos[i], shared=shared)
        rows += [{"phase": "same_runtime", "label": label, "repeat": r, "throughput_tok_s": 100.0 * float(v),
                  "implementation": IMPL[label], "step_delay_ms": DELAY_MS.get(label, 0.0)}
                 for r, v in enumerate(vals)]
    return pd.DataFrame(rows)


def simulate(seed: int, block_sd: float, noise: Noise, current: Noise | None = None, control_cost: float = 0.12,
             reps: int = REPS, paired: bool = True, blocks: int = BLOCKS) -> dict[str, int]:
    """Calls per comparison over ``reps`` simulated runs of ``blocks`` blocks (keys ``A/A <a> vs <b>``,
    ``control <a> vs <b>``; a control counts ``slower``). ``paired=False``: the same runs judged as a fixed design (no
    look line: ``aa_comparisons``' unpaired rule, ``+experiment=aa_noise``'s), for comparison
    (``scripts/aa_paired_sim.py``)."""
    rng = np.random.default_rng(seed)
    line = look_line(blocks)
    hits: dict[str, int] = {}
    for _ in range(reps):
        runs = _runs(rng, block_sd, noise, current or noise, control_cost, blocks)
        seq = sequential_verdicts([line], runs, with_mde=False) if paired else {}
        rows = aa_comparisons(runs, sequential=seq)
        printed = re.search(r"A/A calls: (\d) of 2", "\n".join(dimensioning_lines(rows, [])))
        assert printed and int(printed.group(1)) == sum(r["called"] for r in rows if r["kind"] == "A/A")
        assert all(r.get("method") == f"paired t, {blocks} blocks" for r in rows) == paired
        for r in rows:
            key = f"{r['kind']} {r['a_label']} vs {r['b_label']}"
            hit = r["called"] if r["kind"] == "A/A" else r["verdict"] == "slower"
            hits[key] = hits.get(key, 0) + int(hit)
    return hits


AA_SETTINGS = {
    "block 6% + own 4%": (0.06, Noise(process_sd=0.04, round_sd=0.02), None),
    "block 6% + own 9%": (0.06, Noise(process_sd=0.09, round_sd=0.02), None),
    "drift -2%/process, own 2.5%": (0.0, Noise(process_sd=0.025, round_sd=0.02, drift_per_process=-0.02), None),
    "two-cluster current arms p 0.5, block 5%": (0.05, Noise(process_sd=0.025, round_sd=0.02),
                                                 Noise(process_sd=0.025, round_sd=0.02, cluster_gap=0.15)),
}


@pytest.mark.heavy  # 4 x 900 simulated runs through the report's functions (about 9 CPU-s)
@pytest.mark.parametrize("name", list(AA_SETTINGS))
def test_the_paired_aa_rows_call_no_more_than_alpha_plus_two_se(name: str) -> None:
    block_sd, noise, current = AA_SETTINGS[name]
    hits = simulate(5352 + list(AA_SETTINGS).index(name), block_sd, noise, current)
    aa = {k: v for k, v in hits.items() if k.startswith("A/A")}
    assert len(aa) == 2
    for k, v in aa.items():
        rate, se = rate_and_se(v, REPS)
        assert rate <= aa_bound(0.05, REPS), f"{name}: {k} called in {rate:.2%} ± {se:.2%} of {REPS} runs"


@pytest.mark.heavy  # 1500 simulated runs (about 4 CPU-s)
def test_the_known_size_control_is_called_at_the_power_its_paired_mde_states() -> None:
    noise = Noise(process_sd=0.055, round_sd=0.02)  # own 5.5%: the MDE at 6 blocks lands in the control's 10-15%
    rng = np.random.default_rng(5399)  # the true SD of one block's log ratio, from many simulated processes
    a, b = (process_values(rng, 200_000, noise, shared=np.zeros(200_000)) for _ in range(2))
    sd_d = float(np.std(np.log(a) - np.log(b)))
    mde = detectable_paired_cost_pct(BLOCKS, sd_d, margin_pct=5.0, confidence=0.95)
    assert 10.0 <= mde <= 15.0  # a known 10-15% cost
    hits = simulate(5398, 0.06, noise, control_cost=mde / 100.0, reps=POWER_REPS)
    for b_label in ("baseline", "baseline_twin"):
        rate, se = rate_and_se(hits[f"control {CONTROL} vs {b_label}"], POWER_REPS)
        assert abs(rate - 0.80) <= 0.05, f"control vs {b_label} at its MDE {mde:.1f}%: {rate:.1%} ± {se:.1%}"
