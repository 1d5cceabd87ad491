"""An in-process case is never a front point: ``soundness.point_exclusions`` names it, ``aggregate`` keeps it off.

Claim: a label whose records carry ``in_process`` (the runs frame's ``in_process`` column) gets
``INPROCESS_NOTE`` among its exclusions and is neither on the Pareto front nor the knee, while the same label
without it is on the front.
"""

from __future__ import annotations

from pathlib import Path

from analysis.aggregate import aggregate
from analysis.comparison.soundness import INPROCESS_NOTE, point_exclusions
from analysis.load import load_run
from tests.support.synthetic import SynthPhase, default_cases, write_run_dir


def test_an_in_process_label_is_kept_off_the_front(tmp_path: Path) -> None:
    cases = default_cases(mean=100.0, sd=0.3, points=((2, 1), (1, 1)), slowdown_per_layer=0.05)
    data = load_run(write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=3)]))
    before = aggregate(data).set_index("label")
    assert bool(before.loc["current_g1_n1", "pareto"])
    mask = data.runs["label"] == "current_g1_n1"
    data.runs["in_process"] = data.runs["in_process"].astype(object)
    data.runs.loc[mask, "in_process"] = "abba"
    assert INPROCESS_NOTE in point_exclusions(data.runs)[("same_runtime", "current_g1_n1")]
    after = aggregate(data).set_index("label")
    assert not bool(after.loc["current_g1_n1", "pareto"]) and not bool(after.loc["current_g1_n1", "knee"])
    assert INPROCESS_NOTE in after.loc["current_g1_n1", "front_excluded"]
    assert ("same_runtime", "current_g2_n1") not in point_exclusions(data.runs)
