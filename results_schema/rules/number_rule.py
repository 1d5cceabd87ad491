"""Where a numeric input has a meaning: one rule for every number a user gives a run or an analysis.

What is modelled: :class:`NumberRange`, the interval a number must lie in (bounds open or closed, +infinity
allowed only where it has a stated meaning), and :meth:`NumberRange.refusal`, the one line refusing a value
outside it. NaN is never inside a range: every comparison with NaN is false, so a NaN need, budget, rate or
margin would otherwise pass a ``< 0`` check and fail later in arithmetic (``int(round(nan))`` raises).
The config's ranges (``conf.ranges``) and the numeric flags of ``python -m analysis`` (``analysis.cli``) are
both checked by it; :meth:`NumberRange.of_field` reads a record field's own bounds, so a config field that
becomes a record field (the workload) is not given its range twice.

What is deliberately not modelled: rules across fields (``offload_num_in_group <= offload_group_size``,
``input_len + max_tokens <= max_model_len``): the planner states those.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, get_args, get_origin

from pydantic import BaseModel


@dataclass(frozen=True)
class NumberRange:
    """An interval of allowed values.

    Attributes:
        low: lower bound (``-math.inf`` = none).
        low_open: the bound itself is refused (``> low`` rather than ``>= low``).
        high: upper bound (``math.inf`` = none).
        high_open: the upper bound itself is refused.
        inf_meaning: what ``+inf`` means where it is allowed (``"every request at t = 0"``); empty = refused.
        unit: the unit named in a refusal (``"GiB"``, ``"s"``, ``"req/s"``); empty = none.
    """

    low: float = 0.0
    low_open: bool = False
    high: float = math.inf
    high_open: bool = False
    inf_meaning: str = ""
    unit: str = ""

    def contains(self, value: float) -> bool:
        """True iff ``value`` is allowed: not NaN, finite unless ``inf_meaning``, inside the bounds."""
        v = float(value)
        if math.isnan(v):
            return False
        if math.isinf(v):
            return v > 0 and bool(self.inf_meaning)
        above = v > self.low if self.low_open else v >= self.low
        below = v < self.high if self.high_open else v <= self.high
        return above and below

    def allowed(self, *, integer: bool = False) -> str:
        """``"a finite number > 0 (s)"``, ``"a number in [0, 1]"``, ``"... or .inf (every request at t = 0)"``;
        ``integer``: ``"a whole number >= 1"``."""
        kind = "a whole number" if integer else "a finite number"
        if math.isinf(self.low) and math.isinf(self.high):
            text = kind
        elif math.isinf(self.high):
            text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        elif math.isinf(self.low):
            text = f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = (f"{'a whole' if integer else 'a'} number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        if self.unit:
            text += f" ({self.unit})"
        if self.inf_meaning:
            text += f" or .inf ({self.inf_meaning})"
        return text

    def refusal(self, key: str, value: float) -> str | None:
        """The one line refusing ``value`` at ``key`` (``"need_gib=nan: must be a finite number >= 0 (GiB)"``),
        or None when it is allowed."""
        if self.contains(value):
            return None
        return f"{key}={value!r}: must be {self.allowed(integer=isinstance(value, int))}"

    def parse(self, text: str, *, integer: bool = False) -> float:
        """``text`` (a command-line value) as a number in this range.

        Args:
            text: as typed (``"0.5"``, ``"nan"``, ``"-1"``).
            integer: the value must be a whole number (returned as ``int``).

        Raises:
            ValueError: ``"nan: must be a finite number >= 0 (GiB)"`` (not a number, not whole, or outside).
        """
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(f"{text}: must be {self.allowed(integer=integer)}") from None
        if not self.contains(value):
            raise ValueError(f"{text}: must be {self.allowed(integer=integer)}")
        return value

    @classmethod
    def of_field(cls, model: type[BaseModel], name: str, *, unit: str = "") -> "NumberRange":
        """The range a numeric field of a pydantic record states itself (``ge`` / ``gt`` / ``le`` / ``lt``, also
        inside ``Optional[Annotated[...]]``), so a config field that becomes that record field is checked by the
        record's own bounds (``conf.ranges``: the workload). ``unit`` names the unit in a refusal.

        Raises:
            KeyError: ``model`` has no field ``name``.
        """
        info = model.model_fields[name]
        metadata = list(info.metadata)
        for arg in (info.annotation, *get_args(info.annotation)):
            if get_origin(arg) is Annotated:
                metadata += [m for extra in get_args(arg)[1:] for m in getattr(extra, "metadata", [extra])]
        low, low_open, high, high_open = 0.0, False, math.inf, False
        for m in metadata:
            if getattr(m, "ge", None) is not None:
                low, low_open = float(m.ge), False
            if getattr(m, "gt", None) is not None:
                low, low_open = float(m.gt), True
            if getattr(m, "le", None) is not None:
                high, high_open = float(m.le), False
            if getattr(m, "lt", None) is not None:
                high, high_open = float(m.lt), True
        return cls(low=low, low_open=low_open, high=high, high_open=high_open, unit=unit)

    def arg_type(self, *, integer: bool = False) -> Callable[[str], float]:
        """An ``argparse`` ``type=`` reading a value inside this range (:meth:`parse`); a refusal is argparse's
        ``argument --need-gib: nan: must be a finite number >= 0 (GiB)``."""

        def read(text: str) -> float:
            try:
                return self.parse(text, integer=integer)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        return read
