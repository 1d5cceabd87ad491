"""What a protocol makes of one data row: system turn, user turn, gold answer, GPQA option order."""

from __future__ import annotations

from dataclasses import dataclass

LETTERS = "ABCD"
"""Choice letters, in shown order."""


@dataclass(frozen=True)
class Rendered:
    """One row under one protocol.

    Attributes:
        system: system turn text.
        user: user turn text.
        gold: gold answer in the protocol's normal form (number text or letter A-D).
        order: GPQA: original option index shown at A, B, C, D (0 = correct answer,
            1..3 = incorrect answers 1..3); None for GSM8K.
    """

    system: str
    user: str
    gold: str
    order: tuple[int, ...] | None

    def messages(self) -> list[dict[str, str]]:
        """Chat messages (system + user) for the model's chat template."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def to_json(self) -> dict[str, object]:
        """``{system, user, gold[, order]}`` as printed by ``python -m runners.incase.accuracy render``."""
        out: dict[str, object] = {"system": self.system, "user": self.user, "gold": self.gold}
        if self.order is not None:
            out["order"] = list(self.order)
        return out
