"""``summary/sequential.png`` (``analysis.report.sequential_plot``): each label's interval at every look, drawn with
the recorded numbers, readable (no text on text, no legend on a point)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from analysis.comparison.sequential import SequentialDesign, look_verdict
from analysis.comparison.sequential_check import look_rows
from analysis.report.sequential_plot import LOOK_CI_LEGEND, look_gid, plot_looks
from results_schema.records.sequential import LabelLook, LookDecision
from tests.support.figure_checks import drawn_intervals, legend_covered_points, overlapping_texts, same_4_digits

DESIGN = SequentialDesign((3, 4, 6))


def _lines() -> list[LookDecision]:
    """Three looks: a 35% cost stops at look 1, a noisy label stays open to the budget (production ``look_verdict``)."""
    rng = np.random.default_rng(57)
    base = 200 * np.exp(0.03 * rng.standard_normal(6))
    vals = {"current_g1_n1": 130 * np.exp(0.03 * rng.standard_normal(6)),
            "current_g2_n1": 190 * np.exp(0.15 * rng.standard_normal(6))}
    lines, open_labels = [], list(vals)
    for k, n in enumerate(DESIGN.looks):
        looked = []
        for label in open_labels:
            lv = look_verdict(vals[label][:n], base[:n], DESIGN, k)
            d = lv.decision
            looked.append(LabelLook(label=label, verdict=lv.verdict, processes=n, reference_processes=n,  # type: ignore[arg-type]
                                    ci_low_pct=d.ci_low_pct, ci_high_pct=d.ci_high_pct, center_pct=d.center_pct,
                                    method=d.method, mde_pct=None, reason=lv.reason(DESIGN)))
        open_labels = [x.label for x in looked if x.verdict == "open"]
        nxt = DESIGN.looks[k + 1] - n if open_labels and k + 1 < len(DESIGN.looks) else 0
        lines.append(LookDecision(phase="same_runtime", look=k + 1, blocks=n, looks=DESIGN.looks, target_pct=5.0,
                                  alpha=0.05, spending="pocock", look_alpha=DESIGN.look_alphas()[k],
                                  baseline="baseline", labels=tuple(looked), next_blocks=nxt))
        if not open_labels:
            break
    return lines


@pytest.fixture(scope="module")
def lines() -> list[LookDecision]:
    got = _lines()
    assert [[x.verdict for x in d.labels] for d in got] == [["slower", "open"], ["open"], ["inconclusive"]]
    return got


def test_each_look_draws_the_recorded_interval_and_the_legend_names_it(lines) -> None:
    fig = plot_looks(lines, note="run r1; model tiny; cpu: test")
    drawn = drawn_intervals(fig, prefix="look:")
    want = {look_gid(d.phase, x.label, d.look): (1 + x.ci_low_pct / 100, 1 + x.ci_high_pct / 100)
            for d in lines for x in d.labels if x.ci_low_pct is not None and x.ci_high_pct is not None}
    assert set(drawn) == set(want) and len(want) == 4
    for gid, (lo, hi) in want.items():
        assert same_4_digits(drawn[gid][0], lo) and same_4_digits(drawn[gid][1], hi), gid
    legend = " ".join(" ".join(t.get_text().split()) for t in fig.axes[0].get_legend().get_texts())
    assert " ".join(LOOK_CI_LEGEND.split()) in legend
    # the table prints the same numbers at the same level
    rows = look_rows(lines)
    assert rows[0][5] == f"CI96.9 Welch t {lines[0].labels[0].ci_low_pct:+.1f}%..{lines[0].labels[0].ci_high_pct:+.1f}%"
    plt.close(fig)


def test_no_text_overlaps_text_and_no_legend_covers_a_point(lines) -> None:
    fig = plot_looks(lines, note="run r1; model tiny; cpu: test")
    assert overlapping_texts(fig) == [] and legend_covered_points(fig) == []
    plt.close(fig)


def test_no_look_is_refused() -> None:
    with pytest.raises(ValueError, match="no look"):
        plot_looks([])
