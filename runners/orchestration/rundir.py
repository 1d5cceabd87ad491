"""The run directory: create a new one or reopen one to resume, its config files and checksums.

What is modelled: a new run directory (refuses an existing one) with ``config.yaml``,
``overrides.yaml`` / ``overrides.json``, ``environment-manifest.json`` and ``reproduction/``;
resuming one (the saved config is used, identity must equal the saved manifest, completed
cases are skipped by ``(phase, label, repeat)``, partial leftovers and a torn final JSONL line
move to ``quarantine/<time>/``); ``SHA256SUMS`` over every file at the end.

What is deliberately not modelled: what a case writes (``runners.outcome.bench``) or how analysis
reads the directory (``analysis.load``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
import dataclasses
from typing import Any, Sequence

from conf.schema import Config
from conf.typed import plain
from results_schema.codec.files import file_sha256, write_text_atomic
from runners.errors import EXIT_CONFIG, EXIT_IDENTITY, RunnerError
from runners.identity.gates import RunIdentity
from runners.paths import REPO_ROOT, CasePaths, abs_path, new_run_id
from runners.orchestration.accuracy_phase import AccuracyPhase
from runners.orchestration.run_lock import RunLock
from runners.cases import PhaseCase, ScheduledCase
from conf.schema import ConfigError, check_name
from conf.typed import load_saved_config
from results_schema.records.base import PhaseKind
from results_schema.records.case_outcome import CaseFailure
from results_schema.codec.io import read_json, read_jsonl, write_json
from results_schema.records.manifest import EnvironmentManifest, ModelIdentity
from results_schema.records.plan import PLAN_FILE, PlannedCase, PlannedPhase, RunPlan
from results_schema.records.run_owner import HOLDER_FILE, LOCK_FILE
from runners.identity.manifest import build_manifest
from runners.incase.case_processes import end_recorded_cases
from runners.models.smollm2 import manifest_provenance
from runners.orchestration.accuracy_phase import check_resumed_manifests
from runners.orchestration.resume import override_differences
from runners.planning.choose_plan import ChooseNeed
from runners.planning.plan import expand
from runners.kinds.registry import kind_of
from runners.launching.serving_case import spec_rates

Key = tuple[str, str, int]
"""``(phase, label, repeat)``: the identity of one case process, used by resume."""


def yaml_text(data: Any) -> str:
    """YAML text of plain data (OmegaConf's dump, as ``config.yaml`` has always been written)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))


def write_sha256sums(run_dir: Path) -> Path:
    """``SHA256SUMS`` over every file of the run directory (sorted relative paths).

    Not covered: ``cache/``, and the lock of the runner writing the run (``runner.lock``, and
    ``runner.json``, which names the live holder and is removed when it exits; the history of
    holders, ``runner-history.jsonl``, is covered).
    """

    out = run_dir / "SHA256SUMS"
    lines = []
    skip = {"SHA256SUMS", HOLDER_FILE, LOCK_FILE}
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file() and not p.is_symlink() and rel not in skip and not rel.startswith("cache/"):
            lines.append(f"{file_sha256(p)}  {rel}")
    write_text_atomic(out, "\n".join(lines) + "\n")
    return out


def planned_case(c: PhaseCase) -> Any:
    """``PlannedCase`` of one ``runners.cases.PhaseCase``."""
    rates = None
    if c.serving is not None:  # set for kind=serving only
        rates = spec_rates(c.serving.request_rates)
    failing = c.expect_error is not None
    return PlannedCase(
        label=c.label, implementation=c.implementation, offload_group_size=c.group_size,
        offload_num_in_group=c.num_in_group, offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params),
        offload_backend=c.backend, repeats=c.repeats, expect_error=c.expect_error, runtime=c.runtime_name,
        engine_validates=c.engine_validates,
        device=str(c.runtime.device), request_rates_rps=rates, accuracy_tasks=tuple(c.accuracy_tasks),
        overlay_class=str(c.runtime.overlay_class) if c.implementation == "overlay" else None,
        expected_runs=0 if failing else c.repeats, expected_failures=c.repeats if failing else 0)


def write_plan(run_dir: Path, cfg: Config, choose: ChooseNeed | None = None) -> Path:
    """``plan.json`` (``results_schema.records.plan.RunPlan``): the expanded plan and the counts analysis expects
    (``choose``: the plan's ``choose_need``, not computed again).

    Raises:
        runners.errors.PlanError: the config does not expand (checked before, so not expected here).
    """

    phases = []
    for name, cases in expand(cfg, choose=choose).items():
        planned = tuple(planned_case(c) for c in cases)
        phases.append(PlannedPhase(name=name, kind=PhaseKind(cases[0].kind), cases=planned,
                                   processes=sum(c.repeats for c in planned)))
    doc = RunPlan(experiment=cfg.experiment_name, run_id=str(cfg.run_id), phases=tuple(phases),
                  processes=sum(p.processes for p in phases))
    write_json(run_dir / PLAN_FILE, doc)
    return run_dir / PLAN_FILE


# ----------------------------------------------------------------------------- resume


def load_resumed_config(resume: str, cfg: Config, overrides: Sequence[str]) -> tuple[Config, list[str]]:
    """The saved config (and overrides) of the run directory ``resume``; ``progress`` / ``analyze`` from ``cfg``.

    A resume continues the run as it was started: ``overrides`` (the resume's own) must be
    none, or the saved ones (``runners.orchestration.resume.override_differences``).

    Raises:
        RunnerError: (config) not a writable run directory, its ``config.yaml`` does not check,
            or ``overrides`` differ from the saved ones (each difference listed).
    """
    from omegaconf import OmegaConf

    run_dir = abs_path(resume, Path.cwd())
    if not run_dir.is_dir():
        raise RunnerError(f"config: resume={resume}: {run_dir} is {'a file' if run_dir.exists() else 'missing'}, "
                          "not a run directory", EXIT_CONFIG)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "environment-manifest.json").is_file():
        raise RunnerError(f"resume: {run_dir} is not a run directory (config.yaml / environment-manifest.json "
                          "missing)", EXIT_CONFIG)
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise RunnerError(f"config: resume={resume}: run directory {run_dir} is not writable", EXIT_CONFIG)
    loaded = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True, throw_on_missing=False)
    try:
        saved = load_saved_config(loaded)  # type: ignore[arg-type]  # a mapping: config.yaml is a dict
    except ConfigError as exc:
        raise RunnerError(f"resume: {run_dir / 'config.yaml'}: {exc}", EXIT_CONFIG) from None
    saved = dataclasses.replace(saved, resume=str(run_dir), progress=cfg.progress, analyze=cfg.analyze)
    saved_file = run_dir / "overrides.json"
    saved_overrides = list(json.loads(saved_file.read_text())) if saved_file.is_file() else []
    diffs = override_differences(saved_overrides, overrides)
    if diffs:
        raise RunnerError(f"config: resume={resume}: a resume continues the run with its saved overrides "
                          f"({run_dir / 'overrides.json'}); these differ: {'; '.join(diffs)}. Resume with no "
                          "other override, or start a new run", EXIT_CONFIG)
    return saved, (saved_overrides if saved_file.is_file() else list(overrides))


def _read_lines_quarantining(path: Path, model: type, quarantine: Path) -> list[Any]:
    """Read a JSONL file strictly; a torn final line is moved to ``quarantine`` first."""

    if not path.is_file():
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        quarantine.mkdir(parents=True, exist_ok=True)
        (quarantine / f"{path.name}.torn-line").write_bytes(data[cut:])
        write_text_atomic(path, data[:cut].decode("utf-8"))
    return read_jsonl(path, model)


def completed_keys(run_dir: Path, items: Sequence[ScheduledCase], quarantine: Path) -> set[Key]:
    """``(phase, label, repeat)`` of every case with a success line (in the files its kind names:
    ``CaseKind.line_files``, e.g. ``<phase>-runs.jsonl``) or a failure line."""

    kinds = {sc.case.phase: kind_of(sc.case) for sc in items}
    done: set[Key] = set()
    for ph, kind in kinds.items():
        for name, model in kind.line_files(ph):
            for line in _read_lines_quarantining(run_dir / name, model, quarantine):
                done.add((ph, *kind.line_key(line)))
        for f in _read_lines_quarantining(run_dir / f"{ph}-failures.jsonl", CaseFailure, quarantine):
            done.add((ph, f.label, f.repeat))
    return done


def quarantine(paths: Sequence[Path], run_dir: Path, qdir: Path) -> None:
    """Move ``paths`` (inside ``run_dir``) to the same relative place under ``qdir``."""
    for p in paths:
        dest = qdir / p.relative_to(run_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(p), str(dest))


def _manifest_differences(run_dir: Path, cfg: Config, overrides: Sequence[str], run_identity: RunIdentity,
                          console: Any) -> list[str]:
    """What differs between the saved environment manifest and the identity observed now."""

    saved = read_json(run_dir / "environment-manifest.json", EnvironmentManifest)
    ident = run_identity.gate
    now = build_manifest(run_id=saved.run_id, experiment=saved.experiment, packages=run_identity.packages,
                         checks=ident.checks, model=saved.model, offload_tree=ident.offload_tree,
                         devices=run_identity.devices, config=cfg, overrides=overrides, case_code=run_identity.case_code,
                         git=run_identity.git, declared_env=run_identity.declared_env)
    diffs = []
    if saved.packages != now.packages:
        diffs.append(f"packages {saved.packages} -> {now.packages}")
    if saved.offload_tree_sha256 != ident.offload_tree:
        diffs.append("offload/ tree hash changed")
    if saved.model.sha256sums_sha256 != ident.model_sums:
        diffs.append("model SHA256SUMS changed")
    if [(c.kind, c.name, c.actual) for c in saved.pins] != [(c.kind, c.name, c.actual) for c in now.pins]:
        diffs.append("pinned values changed")
    if saved.case_code_sha256 != run_identity.case_code:
        diffs.append("case code (the project files a case process imports) changed")
    if saved.git.revision != run_identity.git.revision:
        console.print(f"[yellow]resume: git revision {saved.git.revision} -> {run_identity.git.revision} "
                      "(case code unchanged)[/]")
    return diffs


def _leftovers(items: Sequence[ScheduledCase], done: set[Key], run_dir: Path) -> list[Path]:
    """Files of cases not recorded as done (partial logs, evidence, records, serving files)."""

    out: list[Path] = []
    for sc in items:
        if sc.key in done:
            continue
        out += [q for q in kind_of(sc.case).files(CasePaths.of(run_dir, sc.case.phase, sc.stem)) if q.exists()]
    return out


def reopen_run_dir(run_dir: Path, cfg: Config, overrides: Sequence[str], items: Sequence[ScheduledCase],
                   accuracy_phases: Sequence[AccuracyPhase], run_identity: RunIdentity, console: Any,
                   choose: ChooseNeed | None = None) -> set[Key]:
    """Resume ``run_dir``: identity must equal the saved manifest; quarantine leftovers; return done keys.

    Raises:
        RunnerError: (identity) the identity or an accuracy dataset manifest differs from the run's.
    """

    diffs = _manifest_differences(run_dir, cfg, overrides, run_identity, console)
    if diffs:
        raise RunnerError(f"resume: identity differs from the interrupted run: {'; '.join(diffs)}", EXIT_IDENTITY)
    ended = end_recorded_cases(run_dir / "processes")  # what a killed runner left running
    if ended:
        console.print(f"resume: ended {len(ended)} process(es) left by the interrupted run: {ended}")
    qdir = run_dir / "quarantine" / new_run_id()
    done = completed_keys(run_dir, items, qdir)
    check_resumed_manifests(run_dir, accuracy_phases)
    if (run_dir / "SHA256SUMS").exists():
        (run_dir / "SHA256SUMS").unlink()
    if not (run_dir / "plan.json").is_file():  # a run directory from before plan.json existed
        write_plan(run_dir, cfg, choose)
    leftovers = _leftovers(items, done, run_dir)
    if leftovers:
        quarantine(leftovers, run_dir, qdir)
        console.print(f"resume: quarantined {len(leftovers)} partial file(s) into {qdir.relative_to(run_dir)}")
    console.print(f"resume: {len(done)} of {len(items)} cases already recorded in {run_dir}")
    return done


# ----------------------------------------------------------------------------- new run directory


def _make_dir(cfg: Config) -> tuple[Path, str]:
    """Create ``<results_root>/<experiment_name>/<run_id>``; return it and the run id.

    Raises:
        RunnerError: (config) a name is not a single path component, or the directory exists.
    """

    try:
        check_name("run_id", cfg.run_id)
        check_name("experiment_name", cfg.experiment_name)
    except ConfigError as exc:
        raise RunnerError(f"config: {exc}", EXIT_CONFIG) from None
    run_id = cfg.run_id or new_run_id()
    run_dir = abs_path(cfg.results_root) / cfg.experiment_name / run_id
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
    except FileExistsError:
        raise RunnerError(f"run directory {run_dir} already exists; refusing to reuse it "
                          "(choose another run_id, or resume=<dir>)", EXIT_CONFIG) from None
    except OSError as exc:
        raise RunnerError(f"config: results_root={cfg.results_root}: cannot create {run_dir} "
                          f"({exc.strerror or exc})", EXIT_CONFIG) from None
    return run_dir, str(run_id)


def _write_reproduction(run_dir: Path, cfg: Config, overrides: Sequence[str], git: Any) -> None:
    """``reproduction/``: the resolved config, the overrides and ``run.sh`` re-running them."""
    repro = run_dir / "reproduction"
    write_text_atomic(repro / "config.yaml", yaml_text(plain(cfg)))
    write_text_atomic(repro / "overrides.yaml", yaml_text(list(overrides)))
    keep = [shlex.quote(o) for o in overrides if not o.startswith(("run_id=", "resume="))]
    write_text_atomic(repro / "run.sh", (
        "#!/bin/sh\n# Re-run this experiment into a new run directory, from the repository at git revision\n"
        f"# {git.revision}{' (dirty)' if git.dirty else ''}; config.yaml here is the resolved config it must give.\n"
        f"cd {shlex.quote(str(REPO_ROOT))} && exec {shlex.quote(sys.executable)} -m runners.matrix "
        f"{' '.join(keep)}\n"))
    os.chmod(repro / "run.sh", 0o755)


def create_run_dir(cfg: Config, overrides: Sequence[str], run_identity: RunIdentity,
                   lock: RunLock | None = None, choose: ChooseNeed | None = None) -> tuple[Path, Config]:
    """A new run directory with its config, overrides, environment manifest and reproduction copy.

    ``lock`` (a ``runners.orchestration.run_lock.RunLock``) is acquired on the new directory before anything
    is written in it. The manifest's numerics identity is ``run_identity.numerics`` (measured by the identity
    stage with the run's injected probe); nothing is measured here.

    Returns:
        ``(run_dir, cfg)`` with ``run_id`` set in the returned config.

    Raises:
        RunnerError: (config) bad name or existing directory (see ``_make_dir``).
        ValueError: ``run_identity.numerics`` is None (not measured), before anything is created.
    """

    if run_identity.numerics is None:
        raise ValueError("create_run_dir: run_identity.numerics is None: a new run's numerics identity is measured "
                         "by the identity stage (runners.orchestration.stages.identity_gate) before its directory")
    run_dir, run_id = _make_dir(cfg)
    if lock is not None:
        lock.acquire(run_dir, "created")
    cfg = dataclasses.replace(cfg, run_id=run_id)
    ident = run_identity.gate
    manifest = build_manifest(
        run_id=run_id, experiment=cfg.experiment_name, packages=run_identity.packages, checks=ident.checks,
        model=ModelIdentity(name=cfg.model.name, path=str(ident.model_dir),
                            sha256sums_sha256=str(ident.model_sums), revision=cfg.model.revision,
                            num_layers=cfg.model.num_layers, provenance=manifest_provenance(ident.model_dir)),
        offload_tree=ident.offload_tree, devices=run_identity.devices, config=cfg, overrides=overrides,
        case_code=run_identity.case_code, git=run_identity.git, declared_env=run_identity.declared_env)
    manifest = manifest.model_copy(update={"numerics": run_identity.numerics})
    write_text_atomic(run_dir / "config.yaml", yaml_text(plain(cfg)))
    write_text_atomic(run_dir / "overrides.yaml", yaml_text(list(overrides)))
    write_text_atomic(run_dir / "overrides.json", json.dumps(list(overrides)) + "\n")
    write_json(run_dir / "environment-manifest.json", manifest)
    write_plan(run_dir, cfg, choose)
    _write_reproduction(run_dir, cfg, overrides, run_identity.git)
    return run_dir, cfg
