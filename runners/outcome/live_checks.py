"""Live output checks: each finished case's outputs against its phase's baselines finished so far.

What is modelled: ``token_check`` (a bench record's greedy tokens, ``results_schema.rules.token_rule``),
``accuracy_output_check`` (an accuracy case's per-example outputs, ``results_schema.rules.accuracy_rule``),
and ``seed_bench`` / ``seed_accuracy`` (on resume, the baselines recorded before the interruption). The
baselines so far and the mismatches found are kept in a ``LiveState`` (the runner's ``RunState``). The
case kinds call them (``runners.kinds.base.CaseKind.output_check`` / ``seed``).

What is deliberately not modelled: the verdict (the validation's ``analysis.validation.checks.check_tokens``
and the accuracy verifier judge all baselines at the end), printing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from results_schema.records.accuracy import AccuracyCaseRun
from results_schema.codec.io import read_jsonl
from results_schema.records.models import BenchRecord, CaseRun
from results_schema.rules.accuracy_rule import baseline_judgement
from results_schema.rules.token_rule import PhaseFloor, token_status
from runners.outcome.accuracy import accuracy_cases_name
from runners.outcome.bench import runs_name


class LiveState(Protocol):
    """What the live checks read and add to (``runners.orchestration.execute.RunState`` has it)."""

    baseline_records: dict[str, list[Any]]
    """Per phase, the bench baseline records finished so far."""
    accuracy_baseline_digests: dict[str, list[str]]
    """Per ``<phase>/accuracy/<task>``, each baseline run's ``examples_sha256``."""
    token_mismatches: list[str]
    """``<phase>/<label>-r<repeat>: <status>`` of every case whose outputs differ."""


def seed_bench(state: LiveState, run_dir: Path, phase: str) -> None:
    """On resume: the phase's baseline records from the lines already in ``<phase>-runs.jsonl``."""
    path = run_dir / runs_name(phase)
    for run in read_jsonl(path, CaseRun) if path.is_file() else ():
        if run.record.implementation == "baseline":
            state.baseline_records.setdefault(run.record.phase, []).append(run.record)


def seed_accuracy(state: LiveState, run_dir: Path, phase: str) -> None:
    """On resume: the accuracy baselines' ``examples_sha256`` from ``<phase>-accuracy-cases.jsonl``."""
    acc = run_dir / accuracy_cases_name(phase)
    for line in read_jsonl(acc, AccuracyCaseRun) if acc.is_file() else ():
        if line.implementation == "baseline":
            accuracy_output_check(state, line)


def token_check(state: LiveState, rec: BenchRecord) -> str | None:
    """Live greedy token check of one bench record: ``results_schema.rules.token_rule`` over the baselines so far.

    The rule is the validation's (``analysis.validation.checks.check_tokens``), applied to the phase's
    baseline processes finished so far, so that a case whose tokens differ is never printed or counted
    as ``ok``. Returns ``None`` (a baseline, a sampled workload, or no baseline finished yet in this
    phase: nothing to say), ``"tokens identical to baseline"``, ``"tokens within the baseline-vs-baseline
    floor"`` or a ``"TOKENS DIFFER ..."`` status (also appended to ``state.token_mismatches``).
    """

    if rec.implementation == "baseline":
        state.baseline_records.setdefault(rec.phase, []).append(rec)
        return None
    if rec.workload.temperature != 0.0:
        return None
    floor = PhaseFloor.of(state.baseline_records.get(rec.phase, ()))
    status = token_status(rec, floor)
    if status == "no_baseline":
        return None
    if status == "identical":
        return "tokens identical to baseline"
    if status == "within_baseline_noise":
        return "tokens within the baseline-vs-baseline floor (baseline not deterministic on this runtime)"
    how = (f"digest {rec.token_digest[:12]} vs {sorted(floor.digests)[0][:12]}" if floor.deterministic else
           f"rounds {floor.rounds_left(rec)} match no baseline process vs floor {floor.floor_rounds}")
    line = (f"TOKENS DIFFER from the {rec.phase} baseline (greedy decoding: must be identical; "
            f"{how}); the validation judges it against every baseline process of the phase")
    state.token_mismatches.append(f"{rec.phase}/{rec.label}-r{rec.repeat}: {line}")
    return line


def accuracy_output_check(state: LiveState, line: AccuracyCaseRun) -> str | None:
    """Live output-identity check of one accuracy case (``AccuracyCaseRun``) against its phase's baseline.

    The verifier's rule (``results_schema.rules.accuracy_rule``) over the baseline runs finished so far, per task:
    under identity the case's ``examples_sha256`` must equal the first baseline run's. Returns ``None`` (the
    first baseline run, or no baseline yet), ``"outputs identical to baseline"``, an ``"OUTPUTS DIFFER ..."``
    status (also appended to ``state.token_mismatches``), for a later baseline run ``"outputs identical to the
    first baseline run"`` / ``"BASELINE NOT DETERMINISTIC ..."``, or, once the baseline runs differ, a note
    that the case is judged against their floor (not a mismatch: the verifier judges it so).
    """

    digests = state.accuracy_baseline_digests
    keys = {o.task: f"{line.phase}/accuracy/{o.task}" for o in line.results}
    if line.implementation == "baseline":
        again = [o.task for o in line.results if digests.get(keys[o.task])]
        for o in line.results:
            digests.setdefault(keys[o.task], []).append(o.examples_sha256)
        noisy = [o.task for o in line.results if o.examples_sha256 != digests[keys[o.task]][0]]
        if noisy:
            return (f"BASELINE NOT DETERMINISTIC on this runtime: this baseline run differs from the first on "
                    f"{', '.join(noisy)}; the verifier judges offload cases against the baseline-vs-baseline floor "
                    "(paired per example), not by identity")
        return "outputs identical to the first baseline run" if again else None
    compared = [o for o in line.results if digests.get(keys[o.task])]
    if not compared:
        return None
    floor = [o.task for o in compared if baseline_judgement(digests[keys[o.task]]) == "noise_floor"]
    differ = [o.task for o in compared if o.task not in floor and o.examples_sha256 != digests[keys[o.task]][0]]
    if differ:
        status = (f"OUTPUTS DIFFER from the {line.phase} baseline on {', '.join(differ)} (greedy decoding: must be "
                  "identical); accuracy verification will fail unless the baseline runs disagree with each other "
                  "(then it judges against their floor)")
        state.token_mismatches.append(f"{line.phase}/{line.label}-r{line.repeat}: {status}")
        return status
    if floor:
        return (f"judged against the baseline-vs-baseline floor on {', '.join(floor)} (the baseline runs differ); "
                "the verifier decides")
    return "outputs identical to baseline"
