"""Execute stage of a matrix run: every phase's cases through the executor, one line per case.

What is modelled: per phase an identity re-check (not before the first phase of a new run) and
the health gate, then one ``LaunchSpec`` per case (argv, explicit environment, files, limits),
run by the executor (local or Ray); each finished case is finalised by its kind's module
(``runners.outcome.bench``, ``runners.outcome.accuracy``, ``runners.outcome.serving``) and one line is appended (fsync) to
``<phase>-runs.jsonl`` / ``-accuracy-cases.jsonl`` / ``-serving.jsonl`` or ``-failures.jsonl``.
A formal run stops at its first unexpected outcome.

What is deliberately not modelled: process handling (``runners.incase.process_group``, ``runners.launching.executors``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from conf.schema import Config
from runners.paths import REPO_ROOT, CasePaths, new_run_id
from runners.orchestration.progress import Progress
from results_schema.codec.io import append_jsonl, read_jsonl
from results_schema.records.models import CaseRun
from results_schema.rules.accuracy_rule import baseline_judgement
from results_schema.rules.token_rule import PhaseFloor, token_status
from runners.launching.case_command import (HOST_MODEL_INFO_CACHE, case_argv, case_env, publish_model_infos,
    share_model_info_cache)
from runners.launching.executors import make_executor
from runners.outcome.accuracy import accuracy_cases_name
from runners.outcome.bench import finalize_bench

if TYPE_CHECKING:
    from results_schema.records.accuracy import AccuracyCaseRun
    from results_schema.records.serving import ServingRun
    from runners.identity.gates import GateObservation
    from runners.incase.process_group import ProcessOutcome
    from runners.outcome.finalized import Finalized
    from runners.planning.cases import LaunchSpec, ScheduledCase


@dataclass
class RunState:
    """What the case callbacks accumulate over the run (counts, unexpected lines, timings)."""

    run_dir: Path
    model_dir: Path
    python: str
    bench_command: Sequence[str] | None
    formal: bool
    progress: Progress
    accuracy_command: Sequence[str] | None = None
    bench_module: str = "runners.incase.bench_one"
    unexpected: list[str] = field(default_factory=list)
    expected_failures: int = 0
    successes: int = 0
    stopped: bool = False
    accuracy_baseline_digests: dict[str, list[str]] = field(default_factory=dict)
    baseline_records: dict[str, list[Any]] = field(default_factory=dict)
    token_mismatches: list[str] = field(default_factory=list)
    case_wall_s: float = 0.0
    finalize_s: float = 0.0
    finished: set[tuple[str, str, int]] = field(default_factory=set)


@dataclass
class Timings:
    """Runner wall time by stage (seconds); ``launch`` / ``cooldown`` come from the executor."""

    t_start: float
    identity: float = 0.0
    analysis: float = 0.0
    checksums: float = 0.0
    launch: float = 0.0
    cooldown: float = 0.0
    copy_bench: float = 0.0  # the CPU copy measurement: a process of its own, not runner overhead
    model_build: float = 0.0  # building the tiny model once (cached afterwards): set-up, not per-case overhead


def _success_status(fin: Finalized, acc_line: AccuracyCaseRun | None, serving_lines: Sequence[ServingRun]) -> str:
    """Progress status of a case that ended as expected without a failure line."""
    status = "ok"
    if acc_line is not None:
        status += " " + ", ".join(f"{o.task} {o.correct}/{o.num_examples} ({o.mode})" for o in acc_line.results)
    if serving_lines:
        ev = serving_lines[0].evidence
        status += (" " + ", ".join(f"{ln.rate.request_rate_rps or 'inf'} req/s: TPOT P50 {ln.rate.tpot.p50_ms:.1f} ms "
                                   f"(n {ln.rate.completed})"
                                   for ln in serving_lines)
                   + f"; wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
        hot = [ln for ln in serving_lines if ln.rate.host_load is not None and ln.rate.host_load.contended]
        if hot:
            status += "; CONTENDED at " + ", ".join(
                f"{ln.rate.request_rate_rps or 'inf'} req/s ({ln.rate.host_load.foreign_cores:.2f} foreign cores)"
                for ln in hot if ln.rate.host_load is not None) + " (verdicts resting on them are withheld)"
    if fin.run is not None:
        ev = fin.run.evidence
        rec = fin.run.record
        status += (f" {rec.throughput_tok_s:.1f} tok/s over {rec.elapsed_s:.2f} s measured in "
                   f"{len(rec.rounds)} rounds (min {rec.workload.min_measured_s or 0:g} s), "
                   f"wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
        if fin.note:  # e.g. the KV cache memory changed during the case
            status += f"; {fin.note}"
        hl = rec.host_load
        if hl is not None and hl.contended:
            status += (f"; CONTENDED: {hl.foreign_cores:.2f} foreign cores, steal {hl.steal_fraction * 100:.1f}% while "
                       f"it measured (verdicts resting on it are withheld)")
    return status


def seed_baselines(state: RunState, phases: Sequence[str]) -> None:
    """On resume: each phase's baseline records from the lines already in ``<phase>-runs.jsonl`` (and the
    accuracy baselines' ``examples_sha256`` from ``<phase>-accuracy-cases.jsonl``).

    Without it a resumed case whose tokens differ from a baseline recorded before the interruption
    would be printed and counted as ``ok`` (``token_check`` would have no reference).
    """

    from results_schema.records.accuracy import AccuracyCaseRun

    for phase in phases:
        path = state.run_dir / f"{phase}-runs.jsonl"
        for run in read_jsonl(path, CaseRun) if path.is_file() else ():
            if run.record.implementation == "baseline":
                state.baseline_records.setdefault(run.record.phase, []).append(run.record)
        acc = state.run_dir / accuracy_cases_name(phase)
        for line in read_jsonl(acc, AccuracyCaseRun) if acc.is_file() else ():
            if line.implementation == "baseline":
                accuracy_output_check(state, line)


def token_check(state: RunState, rec: Any) -> str | None:
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


def accuracy_output_check(state: RunState, line: Any) -> str | None:
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


def _finalize(sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome,
              run_dir: Path) -> tuple[Finalized, AccuracyCaseRun | None, list[ServingRun]]:
    """``(Finalized, accuracy line | None, serving lines)`` of one finished case process."""
    if sc.case.kind == "accuracy":
        from runners.outcome.accuracy import finalize_accuracy

        fin, acc_line = finalize_accuracy(sc, spec, outcome, run_dir)
        return fin, acc_line, []
    if sc.case.kind == "serving":
        from runners.outcome.serving import finalize_serving

        fin, serving_lines = finalize_serving(sc, spec, outcome, run_dir)
        return fin, None, list(serving_lines)

    fin = finalize_bench(sc, outcome, run_dir=run_dir, log_path=Path(spec.log_path),
                         evidence_path=Path(spec.evidence_path), record_path=Path(spec.record_path),
                         command=tuple(spec.argv))
    return fin, None, []


def _append_lines(run_dir: Path, phase: str, fin: Finalized, acc_line: AccuracyCaseRun | None,
                  serving_lines: Sequence[ServingRun]) -> None:

    if fin.run is not None:
        append_jsonl(run_dir / f"{phase}-runs.jsonl", fin.run)
    if acc_line is not None:
        append_jsonl(run_dir / accuracy_cases_name(phase), acc_line)
    for line in serving_lines:
        append_jsonl(run_dir / f"{phase}-serving.jsonl", line)
    if fin.failure is not None:
        append_jsonl(run_dir / f"{phase}-failures.jsonl", fin.failure)


def _on_done_impl(state: RunState, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome) -> bool:
    state.case_wall_s += outcome.wall_s
    fin, acc_line, serving_lines = _finalize(sc, spec, outcome, state.run_dir)
    _append_lines(state.run_dir, sc.case.phase, fin, acc_line, serving_lines)
    state.finished.add(sc.key)
    if fin.expected and fin.failure is not None:
        state.expected_failures += 1
        status = f"expected failure: {fin.failure.error_type or fin.failure.failure_type}"
    elif fin.expected:
        status = _success_status(fin, acc_line, serving_lines)
        mismatches = len(state.token_mismatches)
        tokens = (token_check(state, fin.run.record) if fin.run is not None
                  else accuracy_output_check(state, acc_line) if acc_line is not None else None)
        if tokens is not None and len(state.token_mismatches) > mismatches:  # the check recorded a mismatch
            status = tokens + status.removeprefix("ok")
        else:
            state.successes += 1
            status += f"; {tokens}" if tokens else ""
    else:
        if fin.failure is not None:
            status = f"FAILED [{fin.failure.failure_type}] {fin.failure.error_message}"
        else:
            status = f"UNEXPECTED SUCCESS: {fin.note}"
        state.unexpected.append(f"{sc.case.phase}/{sc.stem}: {status}")
    state.progress.finish(sc, status, outcome.wall_s)
    if state.formal and not fin.expected:
        state.stopped = True
        return False
    return True


def on_done(state: RunState, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome) -> bool:
    """Executor callback: finalise one case, append its line, print progress; False stops a formal run."""

    t0 = time.monotonic()
    try:
        return _on_done_impl(state, sc, spec, outcome)
    finally:
        publish_model_infos(state.run_dir, HOST_MODEL_INFO_CACHE)
        state.finalize_s += time.monotonic() - t0


def launch_spec(state: RunState, sc: ScheduledCase, base_env: Mapping[str, str]) -> LaunchSpec:
    """The ``LaunchSpec`` of one scheduled case: argv, explicit environment, files and limits."""
    from runners.planning.cases import LaunchSpec

    run_dir, phase = state.run_dir, sc.case.phase
    paths = CasePaths.of(run_dir, phase, sc.stem)
    for p in (paths.log, paths.evidence, paths.record):
        p.parent.mkdir(parents=True, exist_ok=True)
    share_model_info_cache(run_dir, sc.case.implementation, HOST_MODEL_INFO_CACHE)
    rt = sc.case.runtime
    python = str(rt.python or state.python)
    argv: Sequence[str]
    if sc.case.kind == "serving":
        from runners.planning.serving_spec import write_case_spec

        argv = write_case_spec(sc, model_dir=state.model_dir, run_dir=run_dir, python=python)
    else:
        argv = case_argv(sc, model_dir=state.model_dir, paths=paths, bench_command=state.bench_command,
                         python=python, accuracy_command=state.accuracy_command,
                         bench_module=state.bench_module)
    env = case_env(sc, run_dir=run_dir, paths=paths, base_env=base_env)
    explicit = state.accuracy_command if sc.case.kind == "accuracy" else state.bench_command
    if not explicit:  # an explicit command runs as given; otherwise inside the runtime
        from runners.identity.runtimes import wrap_prefix

        argv, env = wrap_prefix(rt, argv, env, base_env)
    return LaunchSpec(
        argv=tuple(argv), env=env, cwd=str(REPO_ROOT),
        log_path=str(paths.log), evidence_path=str(paths.evidence), record_path=str(paths.record),
        timeout_s=sc.case.timeout_s, kill_grace_s=sc.case.kill_grace_s, cooldown_s=sc.case.cooldown_s,
        accelerator=rt.ray_resource, pid_file=str(run_dir / "processes" / phase / f"{sc.stem}.json"),
        record_env=tuple(str(k) for k in rt.env))


def run_phases(cfg: Config, state: RunState, todo: Sequence[ScheduledCase], *, phases: Sequence[str],
               identity: GateObservation, resumed: bool, timings: Timings) -> bool:
    """Run ``todo`` phase by phase (identity re-check, health gate, cases); True when interrupted.

    ``phases`` are all phases of the run in schedule order: identity is re-checked before every
    phase but the first of a new run.

    Raises:
        RunnerError: an identity re-check, the health gate or the executor stopped the run.
    """
    from runners.identity.gates import gather_identity

    base_env = dict(os.environ)
    executor = None
    try:
        executor = make_executor(cfg.executor, REPO_ROOT, run_dir=state.run_dir)
        executor.prepare(cfg, identity)  # ray: identity gate on every node that will run cases
        for phase in phases:
            phase_items = [sc for sc in todo if sc.case.phase == phase]
            if not phase_items:
                continue
            if phase != phases[0] or resumed:
                t = time.monotonic()
                gather_identity(cfg, identity.runtimes, when=f"before phase {phase}", previous=identity)
                timings.identity += time.monotonic() - t
            executor.health_gate(phase_items[0].case.runtime,
                                 state.run_dir / "health" / f"{phase}-{new_run_id()}.txt")
            specs = [(sc, launch_spec(state, sc, base_env)) for sc in phase_items]
            executor.execute(specs, lambda sc, spec, out: on_done(state, sc, spec, out),
                             on_start=state.progress.start)
            if state.stopped:
                break
    except KeyboardInterrupt:
        return True
    finally:
        state.progress.close()
        if executor is not None:
            executor.close()
            timings.launch = executor.launch_overhead_s
            timings.cooldown = executor.cooldown_total_s
    return False

