"""Stop when the answer is known: a group-sequential design on top of the verdict rule, valid under every look.

What is modelled (``SequentialDesign``):

* **Looks**, declared before the run (config, never chosen from data): after ``looks[k]`` processes per arm
  (e.g. 3, 4, 5). The last look is the budget.
* **Alpha spending** (Lan and DeMets, Biometrika 1983): the alpha spent by information fraction ``t`` (processes
  per arm at the look over the budget's) is ``alpha(t)``; look ``k`` may spend ``alpha_k = alpha(t_k) -
  alpha(t_{k-1})``. Two spending functions: ``pocock`` (Pocock-type, ``alpha ln(1 + (e - 1) t)``, Lan and DeMets
  1983; spends early, so a large cost stops at the first look) and ``obrien_fleming`` (O'Brien-Fleming-type,
  ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``; spends almost nothing early).
* **The look's verdict**, by the design's ``pairing`` (declared in the config before the run, never chosen from
  data), at confidence ``1 - alpha_k`` with the equivalence margin set to the design's ``target_pct``:
  ``none``: ``analysis.comparison.verdict_rule.decide`` (the t interval of the log ratio of the label's
  per-process values to the reference's, the wider of Welch's and the pooled t); ``block``:
  ``analysis.comparison.verdict_rule.decide_paired`` over the look's complete blocks (the label's process and the
  same block's reference process both recorded; the t interval of the mean per-block log ratio, ``blocks - 1``
  df). ``slower`` / ``faster`` when the interval excludes 0, ``equivalent`` when it lies inside ``±target``
  (checked first), else the label stays open. A label open at the budget ends ``inconclusive`` with the minimum
  detectable cost its last look reached (``analysis.comparison.power.detectable_cost_pct`` at the last look's
  level and the arms' measured SDs; paired: ``detectable_paired_cost_pct`` at the SD of the per-block log ratios).
  Which values a look takes is one function, ``look_values``, that the runner, ``analysis validate`` and the
  verdict of record call.
* **Why the looks are combined by the union bound** (Bonferroni over the spent increments) and not by the
  joint normal distribution of the look statistics that Lan-DeMets boundaries assume: each look's interval is a
  t interval with 2-8 degrees of freedom and estimated variances, whose joint law across looks is not the
  canonical Brownian one. The union bound needs none of that: a false ``slower`` / ``faster`` over all looks has
  probability at most ``sum_k P(false call at look k) <= sum_k alpha_k = alpha``, whatever the correlation of the
  looks, as long as each look's interval has its stated coverage (the verdict rule's, simulated in
  ``tests/analysis/test_verdict_coverage.py``). It is conservative (the looks are positively correlated), which
  the simulations show (``tests/analysis/test_sequential_coverage.py``, ``scripts/sequential_power.py``,
  ``docs/sequential.md``). The same bound holds for a false ``equivalent`` at a true cost of at least the target
  (the equivalence call is the two one-sided tests at the same interval).

A label's looks use only its own processes of blocks ``1..looks[k]`` and the reference's (``look_values``;
in block order, ``label_looks``): a look's verdict is recomputed from the recorded values alone, which is how
``analysis validate`` checks the runner's recorded decisions (``analysis.comparison.sequential_check.recheck_looks``).

What is deliberately not modelled: the order of the processes (the runner's ABBA blocks,
``runners.orchestration.sequential``), contention (``analysis.comparison.soundness`` withholds a verdict resting
on a contended process after the run), multiple comparisons across labels (each label has its own alpha).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from analysis.comparison.power import detectable_cost_pct, detectable_paired_cost_pct
from analysis.comparison.verdict_rule import PAIRED, Decision, decide, decide_paired
from results_schema.records.sequential import DEFAULT_ALPHA, DEFAULT_PAIRING, DEFAULT_SPENDING, LookLine
from results_schema.rules.sequential_rule import SPENDING, check_design

__all__ = ["LookVerdict", "SequentialDesign", "label_looks", "line_design", "look_blocks", "look_values",
           "look_verdict", "spent_alpha"]

Values = Sequence[float] | np.ndarray
"""Per-process values of one arm (tok/s, > 0), in block order."""

CONCLUSIVE = ("slower", "faster", "equivalent")
"""Verdicts that stop a label."""


def spent_alpha(t: float, alpha: float, spending: str) -> float:
    """Alpha spent by information fraction ``t`` (0 <= t <= 1; Lan and DeMets 1983).

    ``pocock``: ``alpha ln(1 + (e - 1) t)``; ``obrien_fleming``: ``2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``. Both are 0
    at ``t = 0`` and ``alpha`` at ``t = 1``, increasing.

    Raises:
        ValueError: ``t`` outside [0, 1], ``alpha`` outside (0, 1), an unknown ``spending``.
    """
    if not 0.0 <= t <= 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"spent_alpha(t={t!r}, alpha={alpha!r}): needs 0 <= t <= 1 and 0 < alpha < 1")
    if spending == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    if spending == "obrien_fleming":
        if t == 0.0:
            return 0.0
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(t))
    raise ValueError(f"alpha spending {spending!r}: allowed values are {', '.join(SPENDING)}")


@dataclass(frozen=True)
class SequentialDesign:
    """A group-sequential design (module docstring).

    Attributes:
        looks: processes per arm at each look, strictly increasing, the first >= 2 (a t interval needs two);
            the last is the budget.
        target_pct: the smallest cost that matters (percent of the reference; the equivalence margin), > 0.
        alpha: total two-sided false-call probability over every look, in (0, 1).
        spending: one of ``results_schema.rules.sequential_rule.SPENDING``.
        pairing: one of ``results_schema.rules.sequential_rule.PAIRING``: ``none`` (each look ``decide``, unpaired) or
            ``block`` (each look ``decide_paired`` over its complete blocks).
    """

    looks: tuple[int, ...]
    target_pct: float = 5.0
    alpha: float = DEFAULT_ALPHA
    spending: str = DEFAULT_SPENDING
    pairing: str = DEFAULT_PAIRING

    def __post_init__(self) -> None:
        why = check_design(self.looks, self.target_pct, self.alpha, self.spending, self.pairing)
        if why is not None:
            raise ValueError(why)

    @property
    def paired(self) -> bool:
        """True when every look is the paired t over blocks (``pairing == "block"``)."""
        return self.pairing == "block"

    @property
    def budget(self) -> int:
        """Processes per arm at the last look."""
        return self.looks[-1]

    def look_alphas(self) -> tuple[float, ...]:
        """``alpha_k`` of every look (they sum to ``alpha``)."""
        spent = [spent_alpha(n / self.budget, self.alpha, self.spending) for n in self.looks]
        return tuple(s - p for s, p in zip(spent, [0.0, *spent[:-1]], strict=True))

    def confidence(self, k: int) -> float:
        """Two-sided confidence of look ``k`` (0-based): ``1 - alpha_k``."""
        return 1.0 - self.look_alphas()[k]


def line_design(line: LookLine) -> SequentialDesign:
    """The design a look line records (``LookLine.design_values``: its looks, target, alpha, spending and pairing),
    a throughput phase's or a serving phase's: what ``analysis validate``, the serving validation and the verdicts of
    record recompute its looks under.

    Raises:
        ValueError: the recorded design is not valid (``check_design``'s line).
    """
    return SequentialDesign(*line.design_values)


@dataclass(frozen=True)
class LookVerdict:
    """One label at one look.

    Attributes:
        look: 1-based look number.
        processes, reference_processes: values the look used (the label's, the reference's).
        alpha: the look's spent increment ``alpha_k``; ``confidence = 1 - alpha``.
        decision: ``decide``'s result at that confidence and margin ``target_pct``.
        stopped: True when the verdict is conclusive, or the look is the budget's.
        verdict: the decision's verdict (``inconclusive`` at the budget when not conclusive; ``open`` before it).
        mde_pct: at the budget, inconclusive: the cost ``decide`` at the last look's level calls ``slower`` with
            80% power at the arms' measured SDs (percent; inf: none below 100%); else NaN.
    """

    look: int
    processes: int
    reference_processes: int
    alpha: float
    decision: Decision
    stopped: bool
    verdict: str
    mde_pct: float = math.nan

    @property
    def confidence(self) -> float:
        return 1.0 - self.alpha

    def reason(self, design: SequentialDesign) -> str:
        """One line: the verdict, its interval and level, and why the label stops or stays open."""
        d = self.decision
        ci = (f"CI{100 * self.confidence:.3g} {d.method} {d.ci_low_pct:+.1f}%..{d.ci_high_pct:+.1f}%"
              if math.isfinite(d.ci_low_pct) else "no interval")
        why = {"slower": "excludes 0", "faster": "excludes 0", "equivalent": f"inside ±{design.target_pct:g}%"}
        paired = ", paired by block" if d.method == PAIRED else ""
        head = (f"look {self.look} ({self.processes} vs {self.reference_processes} processes{paired}, alpha "
                f"{self.alpha:.4f} of {design.alpha:g} {design.spending}-type): {ci}")
        if self.verdict in why:
            return f"{head}: {self.verdict} ({why[self.verdict]}); stopped"
        if self.verdict == "inconclusive":
            mde = "none below 100%" if not math.isfinite(self.mde_pct) else f"{self.mde_pct:.1f}%"
            return f"{head}: inconclusive at the budget ({design.budget} processes per arm); MDE {mde}"
        return f"{head}: neither outside 0 nor inside ±{design.target_pct:g}%; open"


def _mde(a: np.ndarray, b: np.ndarray, design: SequentialDesign, confidence: float) -> float:
    if design.paired:
        sd_d = float(np.std(np.log(a) - np.log(b), ddof=1))
        return detectable_paired_cost_pct(a.size, sd_d, margin_pct=design.target_pct, confidence=confidence)
    sd_a, sd_b = (float(np.std(np.log(x), ddof=1)) for x in (a, b))
    return detectable_cost_pct(a.size, sd_a, b.size, sd_b, margin_pct=design.target_pct, confidence=confidence)


def look_values(a: Mapping[int, float], b: Mapping[int, float], design: SequentialDesign,
                k: int) -> tuple[list[float], list[float]]:
    """The values look ``k`` (0-based) judges: ``(label's, reference's)``, in block order.

    Args:
        a, b: ``block index (0-based: the record's repeat) -> value`` of every recorded process of the label and of
            the reference (a failed process is absent).
        design: the design; ``pairing`` decides: ``none``, each side's values of blocks ``< looks[k]``; ``block``,
            the values of the complete blocks ``< looks[k]`` (both sides recorded: ``look_blocks``), aligned block
            by block.
        k: 0-based look index.

    Raises:
        ValueError: ``k`` outside the design's looks.
    """
    if not 0 <= k < len(design.looks):
        raise ValueError(f"look {k + 1}: the design has {len(design.looks)} looks")
    n = design.looks[k]
    if design.paired:
        both = look_blocks(a, b, design, k)
        return [a[r] for r in both], [b[r] for r in both]
    return [v for r, v in sorted(a.items()) if r < n], [v for r, v in sorted(b.items()) if r < n]


def look_blocks(a: Mapping[int, float], b: Mapping[int, float], design: SequentialDesign, k: int) -> list[int]:
    """The blocks (0-based: the record's repeat) whose values look ``k`` (0-based) of a design paired by block
    judges: the complete blocks ``< looks[k]`` (both sides recorded), in block order; ``look_values`` takes their
    values.

    Raises:
        ValueError: ``k`` outside the design's looks; a design that does not pair (``pairing: none``: each side
            keeps its own blocks).
    """
    if not 0 <= k < len(design.looks):
        raise ValueError(f"look {k + 1}: the design has {len(design.looks)} looks")
    if not design.paired:
        raise ValueError("look_blocks: the design does not pair by block (pairing none): each side keeps its own "
                         "blocks")
    n = design.looks[k]
    return sorted(r for r in a if r < n and r in b)


def look_verdict(a: Values, b: Values, design: SequentialDesign, k: int, *,
                 with_mde: bool = True) -> LookVerdict:
    """Look ``k`` (0-based) of one label at the look's confidence and margin ``target_pct``: ``decide(a, b)``
    (``pairing`` ``none``) or ``decide_paired(a, b)`` (``block``).

    Args:
        a, b: the label's and the reference's per-process values (tok/s, > 0) at that look (>= 1 each; paired: one
            per complete block each, ``a[j]`` and ``b[j]`` of the same block: ``look_values``).
        design: the design.
        k: 0-based look index.
        with_mde: False leaves ``mde_pct`` NaN at the budget (simulations: the MDE simulates 400 datasets).

    Raises:
        ValueError: ``k`` outside the design's looks; ``decide``'s errors (an empty side, a non-positive median);
            ``decide_paired``'s (unequal lengths, a non-positive reference value).
    """
    if not 0 <= k < len(design.looks):
        raise ValueError(f"look {k + 1}: the design has {len(design.looks)} looks")
    alpha = design.look_alphas()[k]
    av, bv = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rule = decide_paired if design.paired else decide
    d = rule(av, bv, margin_pct=design.target_pct, confidence=1.0 - alpha)
    last = k == len(design.looks) - 1
    if d.verdict in CONCLUSIVE:
        return LookVerdict(k + 1, av.size, bv.size, alpha, d, True, d.verdict)
    if not last:
        return LookVerdict(k + 1, av.size, bv.size, alpha, d, False, "open")
    mde = (math.nan if not with_mde else _mde(av, bv, design, 1.0 - alpha) if min(av.size, bv.size) >= 2
           else math.inf)
    return LookVerdict(k + 1, av.size, bv.size, alpha, d, True, "inconclusive", mde)


def label_looks(a: Values, b: Values, design: SequentialDesign, *,
                with_mde: bool = True) -> list[LookVerdict]:
    """Every look one label reaches: look ``k`` on the values ``look_values`` takes (values in block order: ``a[j]``
    and ``b[j]`` ran in block ``j + 1``), until a look stops it or the values run out (a look needs ``looks[k]``
    values on each side).

    A sequence has no missing block, and a look is taken only when both sides reach its blocks, so every block it
    judges is complete: ``look_values`` gives the first ``looks[k]`` values of each side under either pairing.

    Returns:
        The looks taken, in order; the last is ``stopped`` unless the values ran out first.
    """
    blocks_a, blocks_b = dict(enumerate(a)), dict(enumerate(b))
    out: list[LookVerdict] = []
    for k, n in enumerate(design.looks):
        if len(a) < n or len(b) < n:
            break
        lv = look_verdict(*look_values(blocks_a, blocks_b, design, k), design, k, with_mde=with_mde)
        out.append(lv)
        if lv.stopped:
            break
    return out

