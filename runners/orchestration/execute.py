"""Execute stage of a matrix run: every phase's cases through the executor, one line per case.

What is modelled: per phase an identity re-check (not before the first phase of a new run) and
the health gate, then one ``LaunchSpec`` per case (argv, explicit environment, files, limits),
run by the executor (local or Ray); each finished case is finalised by its kind (``runners.kinds``: its
``finalize`` returns one ``runners.outcome.finalized.Outcome``) and its lines are appended (fsync) to the files
the kind names (``<phase>-runs.jsonl`` / ``-accuracy-cases.jsonl`` / ``-serving.jsonl``) or to
``<phase>-failures.jsonl``; its progress line is the kind's. A formal run stops at its first unexpected outcome.

What is deliberately not modelled: process handling (``runners.incase.process_group``, ``runners.launching.executors``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from conf.schema import Config
from runners.cases import LaunchSpec, ScheduledCase
from runners.paths import REPO_ROOT, CasePaths, new_run_id
from runners.orchestration.progress import Progress
from results_schema.codec.io import append_jsonl
from runners.kinds.registry import kind_of
from runners.launching.case_command import (HOST_MODEL_INFO_CACHE, CaseCommands, case_env, publish_model_infos,
    share_model_info_cache)
from runners.launching.executors import make_executor
from runners.outcome.finalized import Outcome

if TYPE_CHECKING:
    from runners.identity.gates import GateObservation
    from runners.incase.process_group import ProcessOutcome


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
    serving_command: Sequence[str] | None = None
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


def seed_baselines(state: RunState, items: Sequence[ScheduledCase]) -> None:
    """On resume: each phase's baselines from the lines already written, as its kind reads them
    (``CaseKind.seed``: a bench phase's ``<phase>-runs.jsonl``, an accuracy phase's ``examples_sha256``).

    Without it a resumed case whose tokens differ from a baseline recorded before the interruption
    would be printed and counted as ``ok`` (the live check would have no reference).
    """

    firsts: dict[str, ScheduledCase] = {}
    for sc in items:
        firsts.setdefault(sc.case.phase, sc)
    for phase, sc in firsts.items():
        kind_of(sc.case).seed(state, state.run_dir, phase)


def _append_lines(run_dir: Path, phase: str, fin: Outcome) -> None:
    for line in fin.lines:
        append_jsonl(run_dir / line.file, line.record)
    if fin.failure is not None:
        append_jsonl(run_dir / f"{phase}-failures.jsonl", fin.failure)


def _on_done_impl(state: RunState, sc: ScheduledCase, spec: LaunchSpec, outcome: ProcessOutcome) -> bool:
    state.case_wall_s += outcome.wall_s
    kind = kind_of(sc.case)
    fin = kind.finalize(sc, spec, outcome, state.run_dir)
    _append_lines(state.run_dir, sc.case.phase, fin)
    state.finished.add(sc.key)
    if fin.expected and fin.failure is not None:
        state.expected_failures += 1
        status = f"expected failure: {fin.failure.error_type or fin.failure.failure_type}"
    elif fin.expected:
        status = kind.progress(fin)
        mismatches = len(state.token_mismatches)
        tokens = kind.output_check(state, fin)
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
    """The ``LaunchSpec`` of one scheduled case: argv (its kind's), explicit environment, files and limits."""
    run_dir, phase = state.run_dir, sc.case.phase
    paths = CasePaths.of(run_dir, phase, sc.stem)
    for p in (paths.log, paths.evidence, paths.record):
        p.parent.mkdir(parents=True, exist_ok=True)
    share_model_info_cache(run_dir, sc.case.implementation, HOST_MODEL_INFO_CACHE)
    rt = sc.case.runtime
    python = str(rt.python or state.python)
    kind = kind_of(sc.case)
    commands = CaseCommands(bench_command=state.bench_command, accuracy_command=state.accuracy_command,
                            serving_command=state.serving_command, bench_module=state.bench_module)
    argv: Sequence[str] = kind.launch(sc, model_dir=state.model_dir, paths=paths, python=python, commands=commands)
    env = case_env(sc, run_dir=run_dir, paths=paths, base_env=base_env)
    if not kind.explicit_command(commands):  # an explicit command runs as given; otherwise inside the runtime
        from runners.identity.runtimes import wrap_prefix

        argv, env = wrap_prefix(rt, argv, env, base_env)
    return LaunchSpec(
        argv=tuple(argv), env=env, cwd=str(REPO_ROOT),
        log_path=str(paths.log), evidence_path=str(paths.evidence), record_path=str(paths.record),
        timeout_s=sc.case.timeout_s, kill_grace_s=sc.case.kill_grace_s, cooldown_s=sc.case.cooldown_s,
        accelerator=rt.ray_resource, pid_file=str(paths.pid_file),
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

