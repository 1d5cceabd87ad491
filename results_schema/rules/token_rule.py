"""The greedy token rule: does a case generate the tokens of its phase's baseline processes?

What is modelled: one rule, applied live by the runner (``runners.orchestration.execute.token_check``,
to the baseline processes of the phase finished so far) and offline by the validation
(``analysis.validation.checks.check_tokens``, to every baseline process of the phase):

* no baseline process: ``no_baseline`` (nothing to compare with);
* every baseline process generated the same tokens (one ``token_digest``): a case is
  ``identical`` when its digest equals theirs, else ``differs``;
* the baseline processes disagree (the baseline is not deterministic on this runtime:
  accelerator kernels chosen by batch shape, atomics): the floor is the set of measured-round
  indices whose per-round digests differ between baseline processes; a case is judged by a
  paired per-round comparison: the rounds whose digest matches *no* baseline process's digest
  for that round must be no more than the floor's count (``within_baseline_noise``); more is
  ``differs``. A baseline process itself is then ``within_baseline_noise``.

Live, a case checked before a later baseline process shows that the baseline is not deterministic
is judged by identity; the verdict is the offline one over all baseline processes.

What is deliberately not modelled: sampled workloads (the callers decide what a difference means
when ``temperature != 0``), per-request tokens (the records hold per-round digests only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from results_schema.records.models import BenchRecord

TokenStatus = Literal["identical", "differs", "within_baseline_noise", "no_baseline"]

NOISE_NOTE = ("baseline not deterministic on this runtime: its processes generated different tokens, so offload "
              "cases are judged against the baseline-vs-baseline floor per measured round (paired), not by identity")




def round_digests(record: BenchRecord) -> tuple[str, ...]:
    """Token digests of the first ``measured_rounds`` rounds (the ones ``token_digest`` covers)."""
    return tuple(x.token_digest for x in record.rounds[: record.workload.measured_rounds])


@dataclass(frozen=True)
class PhaseFloor:
    """The baseline processes of one phase: their digests and, per round index, their round digests."""

    digests: frozenset[str]
    rounds: tuple[frozenset[str], ...]

    @classmethod
    def of(cls, baselines: Iterable[BenchRecord]) -> PhaseFloor:
        """The floor of these baseline records (any order)."""
        digests: set[str] = set()
        rounds: list[set[str]] = []
        for rec in baselines:
            digests.add(rec.token_digest)
            for i, d in enumerate(round_digests(rec)):
                if i == len(rounds):
                    rounds.append(set())
                rounds[i].add(d)
        return cls(frozenset(digests), tuple(frozenset(r) for r in rounds))

    @property
    def deterministic(self) -> bool:
        """True when the baseline processes agree (at most one digest)."""
        return len(self.digests) <= 1

    @property
    def floor_rounds(self) -> list[int]:
        """Round indices whose digests differ between baseline processes."""
        return [i for i, ds in enumerate(self.rounds) if len(ds) > 1]

    def rounds_left(self, record: BenchRecord) -> list[int]:
        """Round indices where ``record``'s digest matches no baseline process's digest for that round."""
        return [i for i, d in enumerate(round_digests(record))
                if i >= len(self.rounds) or d not in self.rounds[i]]


def token_status(record: BenchRecord, floor: PhaseFloor | None) -> TokenStatus:
    """The rule above for one record against its phase's baseline floor (None or empty: no baseline).

    Returns:
        ``identical``, ``differs``, ``within_baseline_noise`` or ``no_baseline``.
    """
    if floor is None or not floor.digests:
        return "no_baseline"
    if floor.deterministic:
        return "identical" if record.token_digest in floor.digests else "differs"
    if record.implementation == "baseline":
        return "within_baseline_noise"
    return "within_baseline_noise" if len(floor.rounds_left(record)) <= len(floor.floor_rounds) else "differs"


def phase_floors(records: Sequence[BenchRecord]) -> dict[str, PhaseFloor]:
    """``{phase: PhaseFloor}`` over the baseline records of each phase (phases without one are absent)."""
    by_phase: dict[str, list[BenchRecord]] = {}
    for rec in records:
        if rec.implementation == "baseline":
            by_phase.setdefault(rec.phase, []).append(rec)
    return {phase: PhaseFloor.of(recs) for phase, recs in by_phase.items()}
