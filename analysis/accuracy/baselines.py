"""The accuracy verifier's baseline self-check: do the baseline runs of a task agree with each other?

What is modelled (used by ``analysis.accuracy.verifier.verify``):

* ``agreement`` compares the baseline runs (repeats) of one task: same examples SHA-256 -> they agree
  and offload cases are judged by identity, as before. Otherwise the baseline is not deterministic on
  this runtime (on accelerators two greedy runs can differ: kernels chosen by batch shape, atomics);
  the floor is the set of example indices whose generated tokens (``output_token_sha256``) differ
  between baseline runs.
* ``check_vs_floor`` judges one offload case against that floor with a paired per-example comparison
  instead of identity: the examples where the case's tokens match *no* baseline run must be no more
  than the floor's count, and its accuracy must not fall below the lowest baseline accuracy by more
  than ``max_accuracy_drop``. The message lists, per example, where the case left every baseline
  (and the examples the case got right / wrong that baseline run 0 got wrong / right).

What is deliberately not modelled: a statistical test with more than two baseline runs' spread (the
floor is the observed disagreement, not an interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis.accuracy.checks import Checks
from results_schema.records.accuracy import AccuracyExample, AccuracyResult, BaselineAgreement, Task
from results_schema.rules.accuracy_rule import baseline_judgement

Rows = list[AccuracyExample] | None

NOISE_NOTE = ("BASELINE NOT DETERMINISTIC on this runtime: its runs disagree with each other, so offload cases "
              "are judged against the baseline-vs-baseline floor with a paired per-example comparison, not by "
              "identity")


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
                   base_rows: Sequence[Rows], max_accuracy_drop: float) -> None:
    """The ``noise_floor`` check of one offload case (replaces ``identity`` and ``drop``; see the module docstring)."""
    task, label = result.task, result.label
    usable = [r for r in base_rows if r is not None]
    if rows is None or not usable:
        checks.add("noise_floor", task, label, False,
                   f"case {label} ({task}): examples unusable, cannot be compared with the baseline floor")
        return
    tables = [_tokens(r) for r in usable]
    left = [x.index for x in rows if all(t.get(x.index) != x.output_token_sha256 for t in tables)]
    base0 = {x.index: x.correct for x in usable[0]}
    lost = [x.index for x in rows if base0.get(x.index) and not x.correct]
    gained = [x.index for x in rows if base0.get(x.index) is False and x.correct]
    floor_acc = min(a.accuracies) - max_accuracy_drop
    ok = len(left) <= len(a.differing_examples) and result.accuracy >= floor_acc - 1e-12
    checks.add("noise_floor", task, label, ok,
               f"case {label} ({task}) judged against the baseline-vs-baseline floor (paired per-example, not "
               f"identity): tokens match no baseline run on {len(left)} example(s) {left[:20]} vs floor "
               f"{len(a.differing_examples)}; vs baseline run 0: {len(lost)} lost {lost[:20]}, {len(gained)} gained "
               f"{gained[:20]}; accuracy {result.accuracy:.4f} vs lowest baseline {min(a.accuracies):.4f} "
               f"(- max_accuracy_drop {max_accuracy_drop:g})")
