"""The choose run's noise term from the probe's pooled between-process variance (``analysis.model.probe_noise``).

Coverage is shown by simulating the production functions: probe processes drawn from a known lognormal (fixed
seeds), the noise term (``probe_noise``), the interval (``offload_tools.choice.interval_half_width_pct`` and
``predict`` under the true model, so the noise term is all the interval holds), and a new process's retention
against the probe's baseline median (as the runner takes it) inside or outside it.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest

from analysis.comparison.verdict_rule import t_quantile
from analysis.model.choice import decide, recompute
from analysis.model.probe_noise import DF_FLOOR, noise_text, probe_noise
from offload_tools.choice import Setting, calibration_settings, interval_half_width_pct, predict
from offload_tools.transfer_model import TransferModel
from results_schema.records.choice import NoiseArm
from tests.analysis.choose_synth import _probe_cases, predict_decision

LAYERS, PROMPTS, BASE, LAYER_B = 8, 4, 100.0, 1 << 20
TRUTH = TransferModel(BASE, PROMPTS, LAYERS, LAYER_B, LAYER_B / (0.1 * PROMPTS / BASE), "serial")
"""Serial: one layer's copy costs a tenth of the baseline step."""
SIMS, SIGMA = 10_000, 0.02


def _coverage(baselines: int, calibration: int, seed: int) -> tuple[float, float, int]:
    """``(coverage, its simulation SE, df)`` of the noise interval over ``SIMS`` probes of ``baselines`` baseline
    processes and ``calibration`` processes per calibration setting, each a fresh lognormal (SD ``SIGMA`` of log)."""
    rng = np.random.default_rng(seed)
    settings = calibration_settings(LAYERS)
    target = Setting(2, 1, 1)  # a setting the probe did not measure
    layer_bytes = dict.fromkeys(range(LAYERS), LAYER_B)
    hits, df = 0, -1
    for _ in range(SIMS):
        arms = {"baseline": list(BASE * np.exp(rng.normal(0.0, SIGMA, baselines)))}
        for s in settings:
            mean = BASE * TRUTH.retention(s.group_size, s.num_in_group, s.prefetch_step)
            arms[s.label()] = list(mean * np.exp(rng.normal(0.0, SIGMA, calibration)))
        noise = probe_noise(arms)
        df = noise.df
        (p,) = predict(TRUTH, [target], layer_bytes, 0, interval_half_width_pct(noise.half_width_pct, 0.0))
        new = BASE * p.retention * math.exp(rng.normal(0.0, SIGMA))
        hits += p.retention_low <= new / statistics.median(arms["baseline"]) <= p.retention_high
    cov = hits / SIMS
    return cov, math.sqrt(0.95 * 0.05 / SIMS), df


@pytest.mark.parametrize(("baselines", "calibration", "seed", "want_df"), [
    (2, 3, 21, 5),   # above the floor: 8 processes in 3 arms
    (2, 1, 22, 1),   # the default probe: 4 processes in 3 arms, below the floor (the t interval at 1 df)
    (4, 2, 23, 5),   # a median of 4 baselines (the pi/2 factor: at or above the stated level)
])
def test_the_pooled_interval_covers_a_new_process_at_its_stated_level(baselines, calibration, seed, want_df) -> None:
    cov, se, df = _coverage(baselines, calibration, seed)
    print(f"coverage {cov:.4f} (SE {se:.4f}) with {baselines} baselines, {calibration} per calibration setting, {df} df")
    assert df == want_df
    assert abs(cov - 0.95) <= 2 * se or (baselines > 2 and 0.95 <= cov <= 0.95 + 4 * se), cov


def test_pooling_uses_every_repeated_arm_and_its_df() -> None:
    arms = {"baseline": [100.0, 98.0, 101.0], "a": [80.0, 81.0], "b": [60.0]}
    n = probe_noise(arms)
    logs = [np.log(arms["baseline"]), np.log(arms["a"])]
    pooled = sum(float(((y - y.mean()) ** 2).sum()) for y in logs) / 3
    assert (n.df, n.processes, n.arms, n.baselines) == (3, 6, 3, 3)
    assert n.sd_pct == pytest.approx(100 * math.sqrt(pooled))
    assert n.t == pytest.approx(t_quantile(0.975, 3))
    assert n.half_width_pct == pytest.approx(100 * n.t * math.sqrt(pooled * (1 + math.pi / 2 / 3)))
    assert not n.below_floor


def test_below_the_floor_the_interval_is_never_narrower_than_the_range_and_says_so() -> None:
    n = probe_noise({"baseline": [100.0, 99.0], "current_g1_n1": [70.0], "current_g2_n1_p3": [85.0]})
    assert n.df == 1 < DF_FLOOR and n.half_width_pct >= n.range_pct == pytest.approx(100 / 99.5)
    text = noise_text(n)
    assert f"1 df is below the floor of {DF_FLOOR}" in text and "pooled SD 0.71%" in text
    assert "t(1) = 12.706" in text and f"upper bound is {n.sd_high_pct:.1f}%" in text
    zero = probe_noise({"baseline": [100.0], "current_g1_n1": [70.0]})
    assert zero.df == 0 and zero.half_width_pct == 0.0 and "0 df" in noise_text(zero)


@pytest.mark.filterwarnings("ignore:invalid value encountered in log")
def test_bad_probe_arms_are_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match="'baseline' arm"):
        probe_noise({"current_g1_n1": [70.0, 71.0]})
    with pytest.raises(ValueError, match="positive finite"):
        probe_noise({"baseline": [100.0, -1.0]})


def test_the_decision_line_states_the_df_and_the_pooled_sd_and_recompute_checks_the_noise() -> None:
    arms = (NoiseArm(label="baseline", tok_s=(100.5, 99.5)), NoiseArm(label="current_g1_n1", tok_s=(70.0, 71.0)),
            NoiseArm(label="current_g2_n1_p3", tok_s=(85.0, 84.0, 86.0)))
    n = probe_noise({a.label: a.tok_s for a in arms})
    d = predict_decision(1 << 20, _probe_cases())
    d = d.model_copy(update={"noise_arms": arms})
    empty = pd.DataFrame(columns=["phase", "label", "retention", "implementation", "released_bytes", "front_excluded"])
    res = decide([d], empty, pd.DataFrame(columns=["phase"]),
                 verify_phase="verify", processes_run=7, margin_pct=5.0)
    (line,) = [ln for ln in res.lines if ln.startswith("choose (predict): model form")]
    assert f"pooled SD {n.sd_pct:.2f}% of log tok/s, {n.df} df" in line and n.df == 4
    assert "from 7 probe processes in 3 arms" in line and "range of two" not in line
    assert any("noise" in x and "recomputed from its probe arms" in x for x in recompute(d))  # noise_pct: the range
