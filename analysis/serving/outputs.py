"""Outputs compared under load: each request's output tokens vs the baseline's, same prompt, same rate.

What is modelled (input: the ``ServingRun`` lines of a run and their ``rate-<i>.requests.json`` files):
every completed request records the SHA-256 of the output token ids the server streamed
(``RequestOutcome.output_token_ids_sha256``); requests are greedy, seeded and fixed-length, and the
dataset gives request ``j`` the same prompt at every rate and in every case. Per (phase, configured
rate), the baseline processes give, per request index, the set of digests they produced:

* the baselines agree on every request (one digest each): a case's request is compared by identity;
  the case is ``identical`` when every compared request matches, else ``differs``;
* the baselines disagree on some requests (batch composition under load can change greedy tokens on
  a runtime): those request indices are the *floor*; a case is judged as the accuracy verifier and
  the greedy token rule do (``analysis.accuracy.baselines``, ``results_schema.rules.token_rule``),
  paired per request: the requests whose digest matches *no* baseline process's digest for that
  request must all lie in the floor and be no more than the floor's count (``within_baseline_noise``),
  else ``differs``: a request every baseline process agrees on must match. A baseline process itself
  is then ``within_baseline_noise``; the report says so (``NOISE_NOTE``);
* no baseline process at that rate: ``no_baseline`` (nothing to compare with; a warning).

The baseline processes include speed controls (``ServingRun.step_delay_ms > 0``, ``offload.controls``): a
baseline whose every forward sleeps, so it serves as slowly as an offloaded server and forms its decode
batches as that one would, while moving no byte. Where a slower server alone changes greedy tokens, the
controls disagree with the undelayed baselines on those requests and the floor holds them; where it does
not, the floor stays empty and an offload case's mismatch is an error. The message names how many of the
baseline processes are controls.

A case that ``differs`` at any rate fails: an error naming the case, the rate, its position in the
sweep and the request indices, so the serving validation and the run are INVALID (exit 6).

What is deliberately not modelled: which token differs first (the records hold digests), sampled
requests (temperature > 0 is refused: outputs are then not comparable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from results_schema.codec.io import RecordError, StrictJSONError, read_json
from results_schema.records.serving import ServingRequests, ServingRun
from results_schema.rules.floor_rule import is_offload_label, is_speed_control

OutputStatus = Literal["identical", "differs", "within_baseline_noise", "no_baseline"]

NOISE_NOTE = ("baseline not deterministic under this load: its processes (speed controls included, where the phase "
              "runs any) generated different tokens for some requests, so offload cases are judged against that "
              "floor per request (paired: a mismatch must lie on a request the baseline processes disagree on), "
              "not by identity")


def rate_text(rate: float | None) -> str:
    """``inf`` or the rate in req/s (``4``, ``0.5``)."""
    return "inf" if rate is None or math.isinf(rate) else f"{rate:g}"


@dataclass(frozen=True)
class OutputCheck:
    """One case process at one rate against its phase's baselines at that rate.

    Attributes:
        phase, label, implementation, repeat: the case process.
        rate_rps: configured rate (None = inf); ``position``: its index in this process's sweep.
        compared: requests compared (completed here and in at least one baseline process).
        mismatched: request indices whose digest matches no baseline process's digest for that request.
        floor: request indices whose digests differ between baseline processes.
        baselines: baseline processes at this rate (speed controls included).
        controls: how many of them are speed controls (a step delay, no byte moved).
        status: the rule's verdict (module docstring).
    """

    phase: str
    label: str
    implementation: str
    repeat: int
    rate_rps: float | None
    position: int
    compared: int
    mismatched: tuple[int, ...]
    floor: tuple[int, ...]
    baselines: int
    status: OutputStatus
    controls: int = 0

    def message(self) -> str:
        """One line naming the case, the rate, its position and the requests."""
        head = (f"{self.phase}/{self.label}-r{self.repeat} at {rate_text(self.rate_rps)} req/s (position "
                f"{self.position} of its sweep)")
        if self.status == "no_baseline":
            return f"{head}: no baseline process at this rate, outputs not compared"
        who = f"{self.baselines} baseline processes" + (
            f" ({self.controls} of them speed controls)" if self.controls else "")
        floor = (f"; the {who} disagree on requests {list(self.floor)} (floor {len(self.floor)})" if self.floor
                 else f"; the {who} agree")
        return (f"{head}: output tokens of {len(self.mismatched)} of {self.compared} requests differ from the "
                f"baseline's for the same prompts: requests {list(self.mismatched)}{floor}")


def judge(digests: Sequence[str | None], baseline: Sequence[Sequence[str | None]], *,
          is_baseline: bool) -> tuple[int, tuple[int, ...], tuple[int, ...], OutputStatus]:
    """The rule for one process at one rate (pure; see the module docstring).

    Args:
        digests: the process's per-request digests, in dataset order (None = the request failed).
        baseline: each baseline process's per-request digests at the same rate.
        is_baseline: the process is itself a baseline process.

    Returns:
        ``(compared, mismatched, floor, status)``.
    """
    if not baseline:
        return 0, (), (), "no_baseline"
    n = max(len(digests), *(len(b) for b in baseline))
    sets: list[set[str]] = [set() for _ in range(n)]
    for b in baseline:
        for j, d in enumerate(b):
            if d is not None:
                sets[j].add(d)
    floor = tuple(j for j, s in enumerate(sets) if len(s) > 1)
    compared, bad = 0, []
    for j, d in enumerate(digests):
        if d is None or not sets[j]:
            continue
        compared += 1
        if d not in sets[j]:
            bad.append(j)
    mismatched = tuple(bad)
    if not floor:
        return compared, mismatched, floor, "identical" if not mismatched else "differs"
    inside = set(floor)
    if is_baseline or (len(mismatched) <= len(floor) and all(j in inside for j in mismatched)):
        return compared, mismatched, floor, "within_baseline_noise"
    return compared, mismatched, floor, "differs"


def _digests(run_dir: Path, r: ServingRun) -> list[str | None] | None:
    try:
        reqs = read_json(run_dir / r.rate.requests_path, ServingRequests)
    except (OSError, RecordError, StrictJSONError):
        return None  # named by analysis.serving.request_checks
    return [x.output_token_ids_sha256 if x.success else None for x in reqs.requests]


def check_outputs(run_dir: Path, runs: Sequence[ServingRun]) -> list[OutputCheck]:
    """Every (case process, rate) of ``runs`` judged against its phase's baselines at that rate."""
    by_rate: dict[tuple[str, float | None], list[tuple[ServingRun, list[str | None]]]] = {}
    for r in runs:
        d = _digests(run_dir, r)
        if d is not None:
            by_rate.setdefault((r.phase, r.rate.request_rate_rps), []).append((r, d))
    out = []
    for (phase, rate), items in by_rate.items():
        base = [d for r, d in items if not is_offload_label(r.implementation)]
        controls = sum(1 for r, _d in items if is_speed_control(r.implementation, r.step_delay_ms))
        for r, d in items:
            compared, bad, floor, status = judge(d, base, is_baseline=not is_offload_label(r.implementation))
            out.append(OutputCheck(phase=phase, label=r.label, implementation=r.implementation, repeat=r.repeat,
                                   rate_rps=rate, position=r.rate.index, compared=compared, mismatched=bad,
                                   floor=floor, baselines=len(base), status=status, controls=controls))
    return sorted(out, key=lambda c: (c.phase, c.label, c.repeat, math.inf if c.rate_rps is None else c.rate_rps))


def output_errors(checks: Sequence[OutputCheck], runs: Sequence[ServingRun]) -> tuple[list[str], list[str]]:
    """``(errors, warnings)``: every ``differs`` is an error; no baseline and the floor are warnings.

    Sampled requests (temperature > 0) are an error: their outputs cannot be compared.
    """
    errors = [f"outputs under load: {c.message()}" for c in checks if c.status == "differs"]
    warnings = [f"outputs under load: {c.message()}" for c in checks if c.status == "no_baseline"]
    if any(c.floor for c in checks):
        warnings.append(f"outputs under load: {NOISE_NOTE}")
    hot = sorted({f"{r.phase}/{r.label}" for r in runs if r.load.temperature != 0})
    if hot:
        errors.append(f"outputs under load: {hot} sampled with temperature > 0: outputs cannot be compared with "
                      "the baseline's (greedy requests only)")
    return errors, warnings
