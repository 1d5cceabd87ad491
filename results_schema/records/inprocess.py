"""What an in-process case measured: the arm, the offloader's mode and its copies of every measured round.

What is modelled (``InProcessRounds``, ``BenchRecord.in_process``): a CPU case process with this project's offloader
installed runs its measured rounds in ABBA order of two arms (``offload.inprocess``): ``A`` = copies off, every
offloaded parameter read in place from the offloader's host buffer; ``B`` = normal prefetch. Pair ``k`` (rounds
``2k``, ``2k + 1``) ran the same prompts, so greedy decoding must give both rounds the same tokens. Design ``abba``
switches the mode with the arm; ``aa`` / ``bb`` keep one mode in both arms (the A/A control).

The rules checked here (one pure check each, in the validator): whole ABBA blocks, the arms in ABBA order, every
round's mode the design's, no copy issued in an in-place round, ``tokens_identical`` equal to what the pairs'
digests say (checked by ``BenchRecord``, which holds the rounds).

What is deliberately not modelled: any statistic (``analysis.comparison.inprocess``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from results_schema.records.base import NonNegInt, StrictModel

InProcessDesign = Literal["abba", "aa", "bb"]
Arm = Literal["A", "B"]

ABBA: tuple[Arm, ...] = ("A", "B", "B", "A")
"""The repeating order of the arms (``offload.inprocess.ABBA``)."""


def design_modes(design: str, arms: tuple[str, ...]) -> tuple[str, ...]:
    """The offloader mode each round of ``design`` runs: the arm (``abba``), all ``A`` (``aa``), all ``B`` (``bb``)."""
    if design == "abba":
        return arms
    return tuple(("A" if design == "aa" else "B") for _ in arms)


class InProcessRounds(StrictModel):
    """The in-process design of one bench process (see the module docstring)."""

    design: InProcessDesign = Field(description="abba (A/B), aa or bb (A/A controls in one offloader mode).")
    arms: tuple[Arm, ...] = Field(description="Arm of every measured round, in order (ABBA repeated).")
    modes: tuple[Arm, ...] = Field(
        description="Offloader mode of every measured round as the offloader reported it after the switch: A = "
                    "copies off, parameters in the host buffer; B = normal prefetch.")
    copies: tuple[NonNegInt, ...] = Field(
        description="Copies the offloader issued during every measured round (its copies_issued difference).")
    tokens_identical: bool = Field(
        description="Every pair's two rounds (same prompts) generated the same tokens (their round digests agree).")

    @model_validator(mode="after")
    def _check(self) -> "InProcessRounds":
        n = len(self.arms)
        if n == 0 or n % 4:
            raise ValueError(f"in_process: {n} measured rounds; whole ABBA blocks need a multiple of 4")
        if len(self.modes) != n or len(self.copies) != n:
            raise ValueError(f"in_process: {n} arms, {len(self.modes)} modes, {len(self.copies)} copy counts")
        want = tuple(ABBA[i % 4] for i in range(n))
        if self.arms != want:
            raise ValueError(f"in_process: arms {''.join(self.arms)} are not in ABBA order")
        if self.modes != design_modes(self.design, self.arms):
            raise ValueError(f"in_process: modes {''.join(self.modes)} are not design {self.design!r}'s")
        copied = [i for i, (m, c) in enumerate(zip(self.modes, self.copies, strict=True)) if m == "A" and c]
        if copied:
            raise ValueError(f"in_process: in-place rounds {copied} issued copies (mode A issues none)")
        return self


def check_in_process_rounds(ip: InProcessRounds, rounds: Sequence[Any], min_rounds: int, min_s: float | None) -> None:
    """The record-level rules of an in-process record (``BenchRecord`` calls it with its rounds).

    One arm per measured round; the pairs' token digests agree exactly when ``tokens_identical`` says so; the
    window stopped at the first whole ABBA block that reached both minima (``min_rounds`` rounded up to a multiple
    of 4, and ``min_s`` seconds).

    Args:
        ip: the record's ``in_process``.
        rounds: the record's ``RoundResult`` models (``token_digest``, ``elapsed_s``).
        min_rounds: ``workload.measured_rounds``.
        min_s: ``workload.min_measured_s`` (None = 0).

    Raises:
        ValueError: naming the rule broken.
    """
    n = len(rounds)
    if len(ip.arms) != n:
        raise ValueError(f"in_process: {len(ip.arms)} arms for {n} measured rounds")
    same = all(rounds[k].token_digest == rounds[k + 1].token_digest for k in range(0, n, 2))
    if same != ip.tokens_identical:
        raise ValueError(f"in_process: tokens_identical is {ip.tokens_identical} but the pairs' digests say {same}")
    need = max(4, -(-int(min_rounds) // 4) * 4)
    before = sum(r.elapsed_s for r in rounds[:-4])
    if n > need and before >= (min_s or 0.0):
        raise ValueError(f"in_process: {n} rounds although the window before the last ABBA block ({n - 4} rounds, "
                         f"{before:.6g} s) already reached {need} rounds and min_measured_s ({min_s})")
