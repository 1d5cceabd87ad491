"""Where a group-sequential design has a meaning: one statement for the config's range table and the analysis.

What is modelled: the range of each value of a design (``LOOKS``: processes per arm at a look, a whole number >= 2,
since a t interval needs two; ``TARGET_PCT``: the smallest cost that matters, a finite percentage > 0; ``ALPHA``: the
total two-sided alpha over every look, in (0, 1)), the alpha-spending functions the rule knows (``SPENDING``), the
pairings a look's interval may use (``PAIRING``), and
:func:`check_design`, the one line refusing the first bad value of a whole design: those ranges plus the rule across
values (looks strictly increasing). ``conf.ranges`` refuses a config's ``SequentialConfig`` numbers with these
ranges when the config is typed; ``runners.planning.plan`` and ``analysis.comparison.sequential.SequentialDesign``
call :func:`check_design`.

What is deliberately not modelled: the statistics of the looks (``analysis.comparison.sequential``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import get_args

from results_schema.records.sequential import PairingName, SpendingName
from results_schema.rules.number_rule import NumberRange

SPENDING: tuple[str, ...] = get_args(SpendingName)
"""The alpha-spending functions (Lan and DeMets 1983): Pocock-type and O'Brien-Fleming-type; the values of the records'
``SpendingName``."""

PAIRING: tuple[str, ...] = get_args(PairingName)
"""The interval a look uses (``analysis.comparison.sequential``): ``none``, the unpaired t of the label's processes
against the baseline's (``verdict_rule.decide``); ``block``, the paired t of the per-block log ratio of the label's
process to the same block's baseline process, over the complete blocks (``verdict_rule.decide_paired``)."""

LOOKS = NumberRange(low=2, unit="processes per arm")
"""Each look: processes per arm, a whole number >= 2 (a t interval needs two)."""

TARGET_PCT = NumberRange(low=0, low_open=True, unit="%")
"""The target (the equivalence margin of every look): a finite percentage > 0."""

ALPHA = NumberRange(low=0, low_open=True, high=1, high_open=True)
"""The total two-sided alpha over every look: in (0, 1)."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_design(looks: Sequence[int], target_pct: float, alpha: float, spending: str,
                 pairing: str = "none", *, keys: Mapping[str, str] | None = None) -> str | None:
    """One line naming the first bad value of a design and what is allowed, or None when the design is allowed.

    Args:
        looks: processes per arm at each look (the last is the budget).
        target_pct: the smallest cost that matters, percent.
        alpha: total two-sided alpha over every look.
        spending: one of ``SPENDING``.
        pairing: one of ``PAIRING``.
        keys: the config key a value came from, by argument name, where it is not ``sequential.<name>`` (a choose
            run's verify phase: ``{"looks": "choose.verify_looks", "target_pct": "choose.verify_target_floor_pct"}``);
            the line names the value by it.
    """
    def key(name: str) -> str:
        return (keys or {}).get(name, f"sequential {name}")

    if not looks or any(not isinstance(n, int) or isinstance(n, bool) for n in looks):
        return f"{key('looks')} {list(looks)!r}: must be a non-empty list of process counts per arm (e.g. [3, 4, 5])"
    if not all(LOOKS.contains(n) for n in looks) or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
        return (f"{key('looks')} {list(looks)!r}: each must be {LOOKS.allowed(integer=True)} (a t interval needs "
                "two), strictly increasing")
    if not (_number(target_pct) and TARGET_PCT.contains(target_pct)):
        return f"{key('target_pct')} {target_pct!r}: must be {TARGET_PCT.allowed()} (e.g. 5)"
    if not (_number(alpha) and ALPHA.contains(alpha)):
        return f"{key('alpha')} {alpha!r}: must be {ALPHA.allowed()} (e.g. 0.05)"
    if spending not in SPENDING:
        return f"{key('spending')} {spending!r}: allowed values are {', '.join(SPENDING)}"
    if pairing not in PAIRING:
        return f"{key('pairing')} {pairing!r}: allowed values are {', '.join(PAIRING)}"
    return None
