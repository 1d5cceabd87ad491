"""The look design a sequential phase declares, as the runner's looks use it: one constructor for the throughput
looks (``runners.orchestration.sequential``, which re-exports it) and the serving looks
(``runners.orchestration.serving_sequential``).

What is modelled: ``conf.schema_matrix.SequentialConfig`` of a phase (looks, target, alpha, spending, pairing) as an
``analysis.comparison.sequential.SequentialDesign``. What is deliberately not modelled: whether the design is valid
(``runners.planning.plan`` refuses a bad one before any process starts, ``results_schema.rules.sequential_rule``);
a choose run's verify series (``runners.orchestration.choose_verify.series_design``: each decision declares its own).
"""

from __future__ import annotations

from analysis.comparison.sequential import SequentialDesign
from conf.schema import Config


def design(cfg: Config, phase: str) -> SequentialDesign:
    """The phase's ``SequentialDesign`` (checked at planning).

    Raises:
        KeyError: ``phase`` is not a phase of ``cfg``.
        ValueError: the design is not valid (``check_design``'s line; planning refuses it first).
    """
    seq = cfg.phases[phase].sequential
    return SequentialDesign(tuple(int(n) for n in seq.looks), float(seq.target_pct), float(seq.alpha), str(seq.spending),
                            str(seq.pairing))
