"""Which baseline processes form the timing floor (a phase's reference arm), one rule for the runner and the analysis.

What is modelled: a floor baseline is a case of implementation ``baseline`` without a step delay
(``step_delay_ms`` 0 or unset). A baseline with a step delay is the speed control (``offload.controls``: every forward
sleeps first): it is judged against the floor like an offload label, and its answer is known (``slower``). Applied
live by the runner (``runners.planning.plan``: a sequential serving phase needs two floor baselines;
``runners.orchestration.serving_sequential``: the arms every block runs) and offline by the analysis
(``analysis.serving.stats``: the floor a serving cell is judged against and its baselines;
``analysis.comparison.variance.reference_mask``: a throughput phase's reference arm, which every verdict vs "the
baseline" pools).

The two other arms of a serving or throughput phase follow from the same two fields: a speed control
(:func:`is_speed_control`) and an offload label (:func:`is_offload_label`: every implementation but ``baseline``,
the arms the looks judge). What is deliberately not modelled: which offload setting a label runs.
"""

from __future__ import annotations


def is_floor_baseline(implementation: str, step_delay_ms: float | None) -> bool:
    """Whether a case or process of ``implementation`` (its name, or a str enum of it) with ``step_delay_ms`` (ms
    slept before each forward; None or 0: none) is a floor baseline: ``baseline`` without a step delay."""
    return str(implementation) == "baseline" and not step_delay_ms


def is_speed_control(implementation: str, step_delay_ms: float | None) -> bool:
    """Whether a case or process is the speed control: ``baseline`` with a step delay (``offload.controls``)."""
    return str(implementation) == "baseline" and bool(step_delay_ms)


def is_offload_label(implementation: str) -> bool:
    """Whether a case or process of ``implementation`` is an offload label (any implementation but ``baseline``)."""
    return str(implementation) != "baseline"
