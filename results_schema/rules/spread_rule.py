"""The spread rule: how far repeated measurements of one unchanged setting lie apart, one rule live and offline.

What is modelled: ``spread_pct(xs) = (max - min) / median x 100`` over repeated measurements (percent of the
median). Applied live by the runner (``runners.orchestration.choose_decide``: the probe baselines' spread, the choice's
noise floor) and offline by the analysis (``analysis.comparison.noise_floor``: a phase's baseline processes;
``analysis.serving.stats``: a serving rate's baselines).

What is deliberately not modelled: a distribution (the range of a few processes, not a standard deviation:
``analysis.comparison.variance`` estimates the components); fewer than two values or a median <= 0 have no
spread (None).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread_pct(xs: Sequence[float]) -> float | None:
    """The spread of repeated measurements: ``(max - min) / median`` in percent.

    Returns:
        The spread (percent, >= 0); None with fewer than 2 values or a median <= 0.
    """
    if len(xs) < 2:
        return None
    med = float(statistics.median(xs))
    return (max(xs) - min(xs)) / med * 100.0 if med > 0 else None
