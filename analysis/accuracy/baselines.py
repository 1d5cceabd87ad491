"""The accuracy verifier's baseline self-check: do the baseline runs of a task agree with each other?

What is modelled (used by ``analysis.accuracy.verifier.verify``):

* ``agreement`` compares the baseline runs (repeats) of one task: same examples SHA-256 -> they agree
  and offload cases are judged by identity, as before. Otherwise the baseline is not deterministic on
  this runtime (on accelerators two greedy runs can differ: kernels chosen by batch shape, atomics);
  the floor is the set of example indices whose generated tokens (``output_token_sha256``) differ
  between baseline runs.
* ``check_vs_floor`` judges one offload case against that floor, paired per example, instead of
  identity: (1) the examples where the case's tokens match *no* baseline run must be no more than the
  floor's count; (2) its accuracy is compared with the baseline's on the same items by an exact
  McNemar test (``paired_drop``): over the items every baseline run scores alike (the items whose
  correctness differs between baseline runs are the baselines' own discordance, the floor, and are
  left out), ``lost`` = baseline right and case wrong, ``gained`` = baseline wrong and case right; the
  one-sided exact McNemar p is ``P(X >= lost)`` for ``X ~ Binomial(lost + gained, 1/2)`` (McNemar 1947;
  the exact form: the conditional binomial test on the discordant pairs, e.g. Agresti, *Categorical
  Data Analysis*, 3rd ed., sec. 11.1). The case fails when that drop is significant
  (``p < MCNEMAR_ALPHA``) and its net size ``(lost - gained) / examples`` exceeds ``max_accuracy_drop``.
  An unpaired comparison of the two accuracies ignores which items moved and can call a real drop
  equivalent (lm-evaluation-harness #3831: p 0.08 unpaired vs 0.008 paired on 220 items).

What is deliberately not modelled: an equivalence bound (a case passes unless a drop is shown, as the
identity rule passes a case unless a difference is shown); more than the per-item correctness.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.accuracy.checks import Checks
from results_schema.records.accuracy import AccuracyExample, AccuracyResult, BaselineAgreement, Task
from results_schema.rules.accuracy_rule import baseline_judgement

Rows = list[AccuracyExample] | None

NOISE_NOTE = ("BASELINE NOT DETERMINISTIC on this runtime: its runs disagree with each other, so offload cases "
              "are judged against the baseline-vs-baseline floor with a paired per-example comparison, not by "
              "identity")


MCNEMAR_ALPHA = 0.05
"""One-sided level of the paired drop test (the conventional 5%)."""


@dataclass(frozen=True)
class PairedDrop:
    """The exact McNemar comparison of one case with the baseline runs on the same items.

    Attributes:
        lost: items every baseline run got right and the case got wrong.
        gained: items every baseline run got wrong and the case got right.
        floor: items whose correctness differs between baseline runs (left out of the test).
        examples: items compared (the case's rows present in every baseline run).
        p: one-sided exact McNemar p of a drop, ``P(X >= lost)``, ``X ~ Binomial(lost + gained, 1/2)``
            (1.0 when there is no discordant item).
    """

    lost: int
    gained: int
    floor: int
    examples: int
    p: float

    @property
    def net_drop(self) -> float:
        """``(lost - gained) / examples``: the accuracy the case lost net, a fraction (0 when no items)."""
        return (self.lost - self.gained) / self.examples if self.examples else 0.0

    def significant(self, max_accuracy_drop: float) -> bool:
        """A drop shown at ``MCNEMAR_ALPHA`` and larger than the tolerance ``max_accuracy_drop``."""
        return self.p < MCNEMAR_ALPHA and self.net_drop > max_accuracy_drop

    def describe(self) -> str:
        """One clause for the check's message, e.g. ``exact McNemar: lost 14, gained 2 (p = 0.0021) ...``."""
        return (f"exact McNemar vs the baseline on the items its runs score alike: lost {self.lost}, gained "
                f"{self.gained} of {self.examples} (p = {self.p:.4g}, one-sided; {self.floor} item(s) the baseline "
                f"runs themselves score differently left out)")


def mcnemar_exact_p(lost: int, gained: int) -> float:
    """One-sided exact McNemar p of a drop: ``P(X >= lost)``, ``X ~ Binomial(lost + gained, 1/2)``.

    Raises:
        ValueError: a negative count.
    """
    if lost < 0 or gained < 0:
        raise ValueError(f"discordant counts must be >= 0, got lost={lost}, gained={gained}")
    n = lost + gained
    return math.fsum(math.comb(n, k) for k in range(lost, n + 1)) / 2 ** n if n else 1.0


def paired_drop(rows: Sequence[AccuracyExample], base_rows: Sequence[Sequence[AccuracyExample]]) -> PairedDrop:
    """Compare a case's per-item correctness with the baseline runs' (``PairedDrop``; at least one baseline run)."""
    base = [{x.index: x.correct for x in r} for r in base_rows]
    lost = gained = floor = examples = 0
    for x in rows:
        scored = [b.get(x.index) for b in base]
        if None in scored:
            continue
        examples += 1
        if len(set(scored)) > 1:
            floor += 1
        elif scored[0] and not x.correct:
            lost += 1
        elif not scored[0] and x.correct:
            gained += 1
    return PairedDrop(lost=lost, gained=gained, floor=floor, examples=examples, p=mcnemar_exact_p(lost, gained))


def _tokens(rows: Sequence[AccuracyExample]) -> dict[int, str]:
    return {x.index: x.output_token_sha256 for x in rows}


def agreement(task: Task, runs: Sequence[tuple[AccuracyResult, Path, Rows]]) -> BaselineAgreement:
    """Compare the baseline runs of ``task`` (``(result, path, examples)`` in repeat order; >= 1 run)."""
    shas = tuple(r.examples_sha256 for r, _p, _rows in runs)
    judged = baseline_judgement(shas)
    agree = judged != "noise_floor"
    differing: set[int] = set()
    if not agree:
        tables = [_tokens(rows) for _r, _p, rows in runs if rows is not None]
        for i in sorted(set().union(*[set(t) for t in tables])) if tables else []:
            if len({t.get(i) for t in tables}) > 1:
                differing.add(i)
    return BaselineAgreement(task=task, label=runs[0][0].label, runs=len(runs), agree=agree, examples_sha256=shas,
                             accuracies=tuple(r.accuracy for r, _p, _rows in runs),
                             differing_examples=tuple(sorted(differing)), judged_by=judged)


def add_agreement_check(checks: Checks, a: BaselineAgreement) -> None:
    """One ``baseline_agreement`` check per task: what the baseline runs showed and how cases are judged."""
    if a.judged_by == "single_baseline":
        checks.add("baseline_agreement", a.task, a.label, None,
                   f"{a.task}: one baseline run: its determinism on this runtime is not checked (run >= 2)")
    elif a.agree:
        checks.add("baseline_agreement", a.task, a.label, True,
                   f"{a.task}: {a.runs} baseline runs agree (identical examples, sha256 {a.examples_sha256[0][:12]}...): "
                   "offload cases are judged by identity")
    else:
        accs = ", ".join(f"{x:.4f}" for x in a.accuracies)
        shown = ", ".join(map(str, a.differing_examples[:20])) + (" ..." if len(a.differing_examples) > 20 else "")
        checks.add("baseline_agreement", a.task, a.label, True,
                   f"{a.task}: {NOISE_NOTE}. {a.runs} baseline runs differ on {len(a.differing_examples)} "
                   f"example(s) [{shown}]; accuracies {accs}")


def check_vs_floor(checks: Checks, result: AccuracyResult, rows: Rows, a: BaselineAgreement,
                   base_rows: Sequence[Rows], max_accuracy_drop: float) -> PairedDrop | None:
    """The ``noise_floor`` check of one offload case (replaces ``identity`` and ``drop``; see the module docstring).

    Returns:
        The paired comparison (None when the examples are unusable: the check then fails).
    """
    task, label = result.task, result.label
    usable = [r for r in base_rows if r is not None]
    if rows is None or not usable:
        checks.add("noise_floor", task, label, False,
                   f"case {label} ({task}): examples unusable, cannot be compared with the baseline floor")
        return None
    tables = [_tokens(r) for r in usable]
    left = [x.index for x in rows if all(t.get(x.index) != x.output_token_sha256 for t in tables)]
    paired = paired_drop(rows, usable)
    ok = len(left) <= len(a.differing_examples) and not paired.significant(max_accuracy_drop)
    checks.add("noise_floor", task, label, ok,
               f"case {label} ({task}) judged against the baseline-vs-baseline floor (paired per-example, not "
               f"identity): tokens match no baseline run on {len(left)} example(s) {left[:20]} vs floor "
               f"{len(a.differing_examples)}; {paired.describe()}: "
               + (f"a drop of {paired.net_drop:.4f} net, beyond max_accuracy_drop {max_accuracy_drop:g}"
                  if paired.significant(max_accuracy_drop) else
                  f"no significant drop (alpha {MCNEMAR_ALPHA:g}, max_accuracy_drop {max_accuracy_drop:g})"))
    return paired
