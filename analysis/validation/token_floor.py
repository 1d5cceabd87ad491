"""Greedy token identity against the phase baseline, and the baseline-vs-baseline floor when baselines disagree.

What is modelled: per phase, the baseline processes' token digests. When every baseline process generated the
same tokens (one digest) a case is ``identical`` or ``differs`` by its digest, as before. When two baseline
processes' tokens differ, the baseline is not deterministic on this runtime (accelerator kernels chosen by batch
shape, atomics): the floor is the set of measured-round indices whose per-round token digests differ between
baseline processes, and a case is judged by a paired per-round comparison instead of identity: the rounds whose
digest matches *no* baseline process's digest for that round must be no more than the floor's count
(``within_baseline_noise``); more is ``differs``.

What is deliberately not modelled: per-request tokens (the records hold per-round digests only).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from analysis.load import RunData
from results_schema.models import CaseRun

NOISE_NOTE = ("baseline not deterministic on this runtime: its processes generated different tokens, so offload "
              "cases are judged against the baseline-vs-baseline floor per measured round (paired), not by identity")


def round_digests(cr: CaseRun) -> tuple[str, ...]:
    """Token digests of the first ``measured_rounds`` rounds (the ones ``token_digest`` covers)."""
    r = cr.record
    return tuple(x.token_digest for x in r.rounds[: r.workload.measured_rounds])


@dataclass
class PhaseFloor:
    """The baseline processes of one phase: their digests and, per round index, their round digests."""

    digests: set[str] = field(default_factory=set)
    rounds: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))

    @property
    def deterministic(self) -> bool:
        return len(self.digests) <= 1

    @property
    def floor_rounds(self) -> list[int]:
        """Round indices whose digests differ between baseline processes."""
        return sorted(i for i, ds in self.rounds.items() if len(ds) > 1)

    def rounds_left(self, cr: CaseRun) -> list[int]:
        """Round indices where ``cr``'s digest matches no baseline process's digest for that round."""
        return [i for i, d in enumerate(round_digests(cr)) if d not in self.rounds.get(i, set())]


def phase_floors(data: RunData) -> dict[str, PhaseFloor]:
    """``{phase: PhaseFloor}`` over the baseline processes of each phase."""
    out: dict[str, PhaseFloor] = defaultdict(PhaseFloor)
    for _p, _l, cr in data.case_runs:
        if cr.record.implementation == "baseline":
            f = out[cr.record.phase]
            f.digests.add(cr.record.token_digest)
            for i, d in enumerate(round_digests(cr)):
                f.rounds[i].add(d)
    return dict(out)


def token_status(data: RunData) -> dict[tuple[str, str, int], str]:
    """``identical`` / ``differs`` / ``within_baseline_noise`` / ``no_baseline`` per (phase, label, repeat).

    A baseline process is ``identical`` when its phase's baselines agree, ``within_baseline_noise`` otherwise.
    """
    floors = phase_floors(data)
    out = {}
    for _p, _l, cr in data.case_runs:
        r = cr.record
        f = floors.get(r.phase)
        key = (r.phase, r.label, r.repeat)
        if f is None:
            out[key] = "no_baseline"
        elif f.deterministic:
            out[key] = "identical" if r.token_digest in f.digests else "differs"
        elif r.implementation == "baseline":
            out[key] = "within_baseline_noise"
        else:
            out[key] = "within_baseline_noise" if len(f.rounds_left(cr)) <= len(f.floor_rounds) else "differs"
    return out
