"""The stages of a matrix run: plan -> identity gate -> open or resume the run directory -> execute -> close.

Each stage is a small function taking and returning typed objects:

- ``make_plan(cfg, overrides) -> Plan``: the saved config when resuming, the expanded and
  validated schedule (``runners.planning.plan``), CPU kernel paths, executor and accuracy inputs. Invalid
  input stops here (``RunnerError``, exit 2), before any process starts.
- ``identity_gate(plan) -> RunIdentity``: every declared pin, the model, the offload tree; the
  devices, packages and git identity for the manifest (exit 3).
- ``open_run(plan, run_identity, console, lock) -> OpenRun``: a new run directory (refuses an existing one;
  its lock taken before anything is written), or the resumed one with its completed cases and
  quarantined leftovers. One runner per run directory (``runners.orchestration.run_lock``): the lock is held
  from creation (a resume: before the identity gate) to the end; a second runner exits 2.
- ``execute(plan, run, console) -> Execution``: every phase's cases (``runners.orchestration.execute``).
- ``close(plan, run, execution, console) -> int``: last gates, analysis, ``SHA256SUMS`` (only when every
  step completed), the summary and the verdict line; returns the exit code. A step that fails ends in one
  line naming it, the file and the cause (``EXIT_IO``); a resume redoes the close only.

An ``OSError`` in any stage (a full disk, a permission) ends the run in one line naming the stage, the file
and the cause (``io_error``, exit ``EXIT_IO``); the recorded cases are kept and a resume continues.

What is deliberately not modelled: Hydra and signals (``runners.matrix``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from conf.schema import Config
from conf.schema_stack import ExecutorConfig, ModelConfig
from runners.orchestration.accuracy_phase import AccuracyPhase
from runners.config import runtimes_used
from runners.errors import EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OK, RunnerError
from runners.orchestration.execute import RunState, Timings
from runners.identity.gates import RunIdentity
from runners.orchestration.run_lock import RunLock
from runners.cases import ScheduledCase
from offload.cpu_kernels import CPU_KERNEL_PATHS
from runners.errors import PlanError, io_error
from runners.identity.gates import required_scalar_pins, resolve_model_dir
from runners.incase.case_processes import end_orphaned_cases
from runners.launching.executors import check_executor_config
from runners.models.built import BUILT_SOURCES, built_dir
from runners.orchestration.accuracy_phase import check_accuracy_inputs
from runners.orchestration.choose import choose_stage, decided_items
from runners.orchestration.choose_verify import active, has_verify
from runners.orchestration.choose_lines import verify_stage_line
from runners.orchestration.close import (analyse_and_checksum, exit_code, final_checks, print_done, recorded_verdict,
    verdict_line)
from runners.orchestration.execute import run_phases, seed_baselines
from runners.orchestration.path_checks import check_run_paths
from runners.orchestration.progress import Progress, expected_duration_line, print_schedule
from runners.orchestration.resume import complete_run
from runners.orchestration.sequential import (decided_items as sequential_items, plan_lines, sequential_phases,
    sequential_stage)
from runners.orchestration.rundir import create_run_dir, load_resumed_config, reopen_run_dir
from runners.orchestration.run_objects import OpenRun, Plan
from runners.planning.choose_plan import ChooseNeed, choose_need
from runners.planning.plan import plan

if TYPE_CHECKING:
    from runners.identity.numerics import ProbeTorch
    from runners.orchestration.host_measures import CopyBenchRun, HostMeasures


@dataclass(frozen=True)
class Execution:
    """What the execute stage did: the cases it had to run, the accumulated state, an interrupt."""

    todo: tuple[ScheduledCase, ...]
    state: RunState
    interrupted: bool
    base_env: Mapping[str, str]
    items: tuple[ScheduledCase, ...] = ()


def check_cpu_kernel_paths(items: Sequence[ScheduledCase]) -> None:
    """Refuse a bad ``runtime.cpu_kernel_path`` before any process starts (``RunnerError``, exit 2).

    Allowed: ``plain`` / ``packed`` on a CPU runtime, null elsewhere. ``packed`` keeps vLLM's
    packed kernels, which our offloader replaces by plain ones in the layers it wraps, so a
    matrix with an offload case under ``packed`` would compare kernels, not residency.
    """

    for sc in items:
        rt = sc.case.runtime
        path = rt.cpu_kernel_path
        where = f"runtime {rt.name!r} (case {sc.case.phase}/{sc.case.label})"
        if path is None:
            continue
        if rt.device != "cpu":
            raise RunnerError(f"config: {where}: cpu_kernel_path={path!r} applies to CPU runtimes only; "
                              "set runtime.cpu_kernel_path=null", EXIT_CONFIG)
        if path not in CPU_KERNEL_PATHS:
            raise RunnerError(f"config: {where}: cpu_kernel_path={path!r}; allowed values are "
                              f"{', '.join(CPU_KERNEL_PATHS)}", EXIT_CONFIG)
        if path == "packed" and sc.case.offload_requested:
            raise RunnerError(f"config: {where}: cpu_kernel_path='packed' with an offload case: the offloader "
                              "runs its wrapped layers on plain weights, so the case would differ from the "
                              "baseline in GEMM kernel, not only in weight residency; use "
                              "runtime.cpu_kernel_path=plain (packed is for runs without offload)", EXIT_CONFIG)


def _check_executor(executor: ExecutorConfig) -> None:
    if (bad := check_executor_config(executor)) is not None:
        raise RunnerError(f"config: {bad}", EXIT_CONFIG)


def _accuracy_phases(items: Sequence[ScheduledCase]) -> list[AccuracyPhase]:
    if not any(sc.case.accuracy_tasks for sc in items):  # cases evaluating dataset tasks (the accuracy kind's)
        return []
    import importlib.util

    if importlib.util.find_spec("runners.incase.accuracy") is None:
        raise RunnerError("config: an accuracy phase needs runners.incase.accuracy, which is not installed", EXIT_CONFIG)
    return check_accuracy_inputs(items)


def make_plan(cfg: Config, overrides: Sequence[str]) -> Plan:
    """Stage 1: the schedule, checked before any process starts (accuracy inputs: not for a dry run).

    Raises:
        RunnerError: (config) the config describes cases that cannot run.
    """

    resume_dir = None
    if cfg.resume:
        cfg, overrides = load_resumed_config(cfg.resume, cfg, overrides)
        resume_dir = Path(str(cfg.resume))
    try:
        known = choose_need(cfg)
        items = plan(cfg, known)
    except PlanError as exc:
        raise RunnerError(f"config: {exc}", EXIT_CONFIG) from None
    items = _with_decided(cfg, items, resume_dir, known)
    items = sequential_items(cfg, items, resume_dir)  # a resumed sequential phase: every block its looks decided
    check_cpu_kernel_paths(items)
    _check_executor(cfg.executor)
    required_scalar_pins(cfg)  # a misspelt required_pins entry: refused by a dry run too, not only by the gate
    return Plan(cfg=cfg, runtimes=runtimes_used(cfg), overrides=tuple(overrides), items=tuple(items),
                phases=tuple(dict.fromkeys(sc.case.phase for sc in items)), accuracy_phases=(),
                resume_dir=resume_dir, choose=known)


def _with_decided(cfg: Config, items: list[ScheduledCase], resume_dir: Path | None,
                  known: ChooseNeed | None) -> list[ScheduledCase]:
    """A resumed choose run's plan with its verify phase as decided (``runners.orchestration.choose``)."""

    if not active(cfg) or resume_dir is None:
        return items
    decided = decided_items(cfg, resume_dir, len(items), known)
    if not decided:
        return items
    return [sc for sc in items if sc.case.phase != cfg.choose.verify_phase] + decided


def with_accuracy_inputs(p: Plan) -> Plan:
    """The plan with its accuracy phases' dataset manifests and files checked (``check_accuracy_inputs``)."""

    return replace(p, accuracy_phases=tuple(_accuracy_phases(p.items)))


def identity_gate(p: Plan, timings: Timings, probe_torch: ProbeTorch) -> RunIdentity:
    """Stage 2: the identity gate (exit 3), then devices, packages and git for the manifest.

    A tiny model that is not built yet is built first and its time kept apart (``timings.model_build``:
    a one-time cost, the model is cached). A new run's numerics identity (``runners.identity.gates.NumericsProbe``:
    a torch probe process, ``probe_torch``) is measured meanwhile, on the other core; waiting
    for it counts as identity.
    """

    from runners.identity.gates import NumericsProbe, gather_identity, observe_run_identity

    probe = NumericsProbe(p.cfg, probe_torch) if p.resume_dir is None else None
    try:
        timings.model_build = build_model_once(p.cfg.model)
        identity = gather_identity(p.cfg, p.runtimes, when="before the first case")
        facts = observe_run_identity(identity)
    except BaseException:
        if probe is not None:
            probe.wait()  # a failed gate leaves no probe process behind
        raise
    if p.cfg.analyze:
        import_analysis()  # while the probe process runs on the other core
    if probe is not None:
        facts = replace(facts, numerics=probe.result())
    timings.identity += time.monotonic() - timings.t_start - timings.model_build
    return facts


def import_analysis() -> None:
    """Load the close stage's analysis modules (``analysis.report.preload``) now, in the main thread, before any case.

    The close stage needs pandas, matplotlib, plotly and the report modules (about 1,300 modules).
    Imported at the close, after minutes of cases, they are read back from disk: on a host that
    reclaims cold file pages (this project's 2-core VM: 1 s warm, 13 s cold, measured with
    ``python -X importtime``) that read is most of the runner's overhead. Loaded here, while the
    numerics probe process runs, they are read while the install has left them cached. The time counts
    as identity (runner overhead). Loading starts no thread (cases are forked with a ``preexec_fn``; no
    thread may be alive at a fork). Without the analysis stack nothing is loaded, and the close stage
    reports the analysis as unavailable.
    """
    try:
        from analysis.report import preload
        preload()
    except ImportError:
        return


def build_model_once(model: ModelConfig) -> float:
    """Build a built-source model (``tiny``, ``smollm2``) that is not in its cache yet; return the seconds it took
    (0: cached or a path)."""

    if model.source not in BUILT_SOURCES or (built_dir(model) / "SHA256SUMS").is_file():
        return 0.0

    start = time.monotonic()
    resolve_model_dir(model)
    return time.monotonic() - start


def open_run(p: Plan, run_identity: RunIdentity, timings: Timings, console: Any, lock: RunLock | None = None) -> OpenRun:
    """Stage 3: a new run directory (``lock`` taken on it first), or the resumed one with its completed cases."""

    if p.resume_dir is not None:
        done = reopen_run_dir(p.resume_dir, p.cfg, p.overrides, p.items, p.accuracy_phases, run_identity, console,
                              p.choose)
        return OpenRun(run_dir=p.resume_dir, cfg=p.cfg, run_identity=run_identity, done=frozenset(done), timings=timings)
    run_dir, cfg = create_run_dir(p.cfg, p.overrides, run_identity, lock, p.choose)
    console.print(f"run directory: {run_dir}")
    return OpenRun(run_dir=run_dir, cfg=cfg, run_identity=run_identity, done=frozenset(), timings=timings)


def execute(p: Plan, run: OpenRun, console: Any, run_copy_bench: CopyBenchRun | None = None) -> Execution:
    """Stage 4: end leftover case processes of dead runners, then run every case not done; a choose run's verify
    phase runs as decided after its probe (``runners.orchestration.choose``; ``run_copy_bench`` for its probe); a
    sequential phase's later blocks run as its looks decide (``runners.orchestration.sequential``)."""

    orphans = end_orphaned_cases()  # case processes of any run whose runner died (kill -9)
    if orphans:
        console.print(f"[yellow]ended {len(orphans)} leftover case process(es) of dead runners: {orphans}[/]")
    verify = run.cfg.choose.verify_phase if active(run.cfg) else None  # its cases run as decided (choose_stage)
    todo = tuple(sc for sc in p.items if sc.key not in run.done and sc.case.phase != verify)
    # No background work (e.g. pre-importing the analysis stack in a thread) while cases
    # are forked: a thread holding an import lock at fork time used to deadlock the child
    # before exec (see runners.incase.process_group._die_with_parent). The analysis imports when it runs.
    console.print(expected_duration_line(todo, run.cfg.phases), markup=False)
    for line in plan_lines(run.cfg):
        console.print(line, markup=False)
    if verify is not None:
        console.print(verify_stage_line(run.cfg, has_verify(run.cfg, p.choose)), markup=False)
    progress = Progress(len(p.items), live=p.cfg.progress)
    progress.skip(sum(1 for sc in p.items if sc.key in run.done))
    c = p.cfg
    state = RunState(run_dir=run.run_dir, model_dir=run.run_identity.gate.model_dir, python=sys.executable,
                     bench_command=c.bench_command, formal=c.formal, progress=progress,
                     accuracy_command=c.accuracy_command, serving_command=c.serving_command,
                     bench_module=c.bench_module)
    if p.resume_dir is not None:  # the live token check compares with baselines recorded before the interruption
        seed_baselines(state, p.items)
    base_env = dict(os.environ)
    interrupted = run_phases(run.cfg, state, todo, phases=p.phases, identity=run.run_identity.gate,
                             resumed=p.resume_dir is not None, timings=run.timings)
    items = p.items
    if verify is not None and not interrupted and not state.stopped:
        assert run_copy_bench is not None  # run_stages passes it
        interrupted, decided = choose_stage(p, run, state, base_env, console, run_copy_bench)
        keys = {sc.key for sc in decided}  # a resume's plan holds the probe's re-measures already
        items = tuple(sc for sc in p.items if sc.case.phase != verify and sc.key not in keys) + tuple(decided)
        ran = {sc.key for sc in todo}
        todo = todo + tuple(sc for sc in decided if sc.key in state.finished and sc.key not in ran)
    if sequential_phases(run.cfg) and not interrupted and not state.stopped:  # looks, then the blocks they decide
        interrupted, looked = sequential_stage(replace(p, items=items), run, state, console)
        known = {sc.key for sc in todo}
        items = tuple(looked)
        todo = todo + tuple(sc for sc in looked if sc.key in state.finished and sc.key not in known)
    return Execution(todo=todo, state=state, interrupted=interrupted, base_env=base_env, items=items)


def close(p: Plan, run: OpenRun, ex: Execution, console: Any, run_copy_bench: CopyBenchRun) -> int:
    """Stage 5: last gates, analysis (the copy bench: ``run_copy_bench``), ``SHA256SUMS``, the
    summary and the verdict line; the exit code."""

    if ex.interrupted:
        from runners.orchestration.close import interrupted_line

        console.print(interrupted_line(ex.items or p.items, run.run_dir), markup=False)
        return EXIT_INTERRUPTED
    found = final_checks(run.cfg, ex.todo, ex.state, run.run_identity.gate, run.timings)
    analyse_and_checksum(run.cfg, ex.items or p.items, ex.state, p.accuracy_phases, found, run.timings, ex.base_env, console,
                         run_copy_bench)
    print_done(ex.state, run.timings, console)
    code = exit_code(ex.state, found, console)
    if found.close_error is not None:  # not finished: no verdict; one line naming the step, the file, the cause
        from runners.orchestration.close import close_failed_line

        console.print(close_failed_line(found, ex.items or p.items, run.run_dir), markup=False)
        return code
    console.print(f"{verdict_line(found, run.run_dir)}; exit {code}", markup=False)
    return code


def resume_complete(p: Plan, console: Any) -> bool:
    """A resume of a finished run: say so (its recorded verdict last) and return True; nothing is written.

    Raises:
        RunnerError: (config) another runner holds the run (``runners.orchestration.run_lock``).
    """

    assert p.resume_dir is not None
    RunLock().check_free(p.resume_dir)
    complete, recorded = complete_run(p.resume_dir, p.items)
    if not complete:
        return False
    console.print(f"resume: {p.resume_dir} is complete ({recorded} of {len(p.items)} cases recorded, SHA256SUMS "
                  "written): nothing to do, nothing written; re-analyse into a new folder with `python -m analysis "
                  f"report {p.resume_dir} --out <folder>`", markup=False)
    console.print(f"{recorded_verdict(p.resume_dir)} (recorded by the run; this resume changed nothing); exit {EXIT_OK}",
                  markup=False)
    return True


def run_stages(cfg: Config, overrides: Sequence[str], console: Any, host: HostMeasures | None = None) -> int:
    """plan -> [dry run: print the schedule, exit 0] -> paths -> [resume: lock] -> identity gate -> open -> execute -> close.

    The run directory's lock (``runners.orchestration.run_lock``) is held from its creation (or the resume's
    start) to the end; a resume of a finished run changes nothing and exits 0. ``host``: the host
    measurements (``runners.orchestration.host_measures``; None = the real ones), resolved here once: the
    stages below get its functions, never a fallback of their own.

    Raises:
        RunnerError: a stage stopped the run (its exit code is the run's).
    """
    from runners.orchestration.host_measures import HostMeasures

    measures = host or HostMeasures()
    try:
        p = make_plan(cfg, overrides)
    except OSError as exc:
        raise io_error("plan", exc, None) from None
    if p.cfg.dry_run:
        print_schedule(p.items, p.cfg)
        for line in plan_lines(p.cfg):
            console.print(line, markup=False)
        if p.cfg.choose.probe_phase is not None:
            from runners.orchestration.choose_lines import dry_run_lines
            probe_items = sum(1 for sc in p.items if sc.case.phase == p.cfg.choose.probe_phase)
            assert p.choose is not None  # a choose phase: make_plan computed it
            for line in dry_run_lines(p.cfg, probe_items, p.choose):
                console.print(line, markup=False)
        return EXIT_OK
    if p.resume_dir is not None and resume_complete(p, console):  # a finished run needs no other path
        return EXIT_OK
    check_run_paths(p.cfg, resuming=p.resume_dir is not None)
    lock = RunLock()
    stage, run_dir = "identity gate", p.resume_dir
    try:
        if p.resume_dir is not None:
            lock.acquire(p.resume_dir, "resumed", console)
        p = with_accuracy_inputs(p)
        timings = Timings(t_start=time.monotonic())
        run_identity = identity_gate(p, timings, measures.probe_torch)
        stage = "open the run directory"
        run = open_run(p, run_identity, timings, console, lock)
        stage, run_dir = "execute", run.run_dir
        ex = execute(p, run, console, measures.run_copy_bench)
        stage = "close"
        return close(p, run, ex, console, measures.run_copy_bench)
    except OSError as exc:
        raise io_error(stage, exc, run_dir) from None
    finally:
        lock.release()

