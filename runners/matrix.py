"""``python -m runners.matrix``: run a matrix of offload cases, one fresh process per case.

Pipeline: compose (Hydra, ``conf/``) -> expand + validate cases (``runners.plan``;
invalid offload parameters stop here, before any process) -> schedule (rotated per
repeat) -> [dry run: print and exit] -> identity gate (declared pins, fail closed)
-> new run directory (refuses an existing one) + config, overrides, environment
manifest, reproduction copy -> per phase: identity re-check + health gate -> each
case in a fresh process group via the executor (local or Ray) -> finalize (record /
BENCH_RESULT / evidence sidecar / evidence line agree; KV capacity from the log) ->
one line appended (fsync) to ``<phase>-runs.jsonl`` (accuracy phases:
``<phase>-accuracy-cases.jsonl``) or ``<phase>-failures.jsonl`` -> identity check at
the end -> ``analysis.report.write_summary`` -> accuracy verifier (``analysis.accuracy``,
report in ``summary/``; only when the run has accuracy phases) -> ``SHA256SUMS``.

Accuracy phases: the dataset manifest (``accuracy_manifest`` of the phase, default the
committed fixtures) and every file it declares for the phase's tasks are checked
before any process starts; the verifier runs in formal mode only when every dataset
is ``kind: full`` and the phase has no ``accuracy_limit`` -- otherwise in limited mode,
labelled as such in its report and in the runner's output.

Resume: ``resume=<run dir>`` reuses the saved config, re-verifies identity against
the saved manifest, skips cases already recorded (by phase, label, repeat) and moves
partial leftovers (logs, evidence, records of unrecorded cases; a torn final JSONL
line) to ``quarantine/<time>/``, where they are never counted.

Exit codes: 0 all cases as expected; 1 some case failed unexpectedly (records kept) or the serving
validation (``analysis.serving``) failed;
2 config error; 3 identity gate; 4 all cases ran but the accuracy verifier failed;
5 formal run stopped at its first failure; 42 health gate; 130 interrupted (resume to continue).

What is deliberately not modelled: statistics of any kind (``analysis``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
EVIDENCE_HOOK_DIR = REPO_ROOT / "runners" / "evidence_hook"

EXIT_OK = 0
EXIT_CASE_FAILURES = 1
EXIT_CONFIG = 2
EXIT_IDENTITY = 3
EXIT_ACCURACY = 4
EXIT_FORMAL_STOP = 5
EXIT_INVALID = 6
EXIT_HEALTH = 42
EXIT_INTERRUPTED = 130

_CONTROLLED_ENV = ("PYTHONPATH", "OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH", "OFFLOAD_CPU_KERNEL_PATH", "PYTHONSTARTUP")


class RunnerError(RuntimeError):
    """A run-level error with an exit code and a one-line message (no traceback shown)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


# ----------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class CasePaths:
    log: Path
    evidence: Path
    record: Path

    @classmethod
    def of(cls, run_dir: Path, phase: str, stem: str) -> "CasePaths":
        return cls(log=run_dir / "logs" / phase / f"{stem}.log", evidence=run_dir / "evidence" / phase / f"{stem}.json",
                   record=run_dir / "records" / phase / f"{stem}.json")

    def existing(self) -> list[Path]:
        return [p for p in (self.log, self.evidence, self.record) if p.exists()]


def _abs(path: str, base: Path = REPO_ROOT) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p)


def new_run_id() -> str:
    """``<UTC time>-<6 random hex>``: sortable and collision-free."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


# ----------------------------------------------------------------------------- config helpers


def to_plain(cfg: Any) -> dict[str, Any]:
    """Resolved plain dict of a DictConfig (``???`` kept as the string ``???``)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)  # type: ignore[return-value]


def runtimes_used(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's runtime and every phase-specific runtime (distinct by name, in order)."""
    out: dict[str, dict[str, Any]] = {cfg["runtime"]["name"]: cfg["runtime"]}
    for ph in (cfg.get("phases") or {}).values():
        if ph.get("runtime"):
            out.setdefault(ph["runtime"]["name"], ph["runtime"])
    return list(out.values())


def resolve_model_dir(model: Mapping[str, Any]) -> Path:
    """Model directory: the tiny model is built (once) and verified; a path must exist.

    Raises:
        RunnerError: (identity) missing or unverifiable model.
    """
    if model.get("source") == "tiny":
        from runners.tiny_model import ensure_tiny_model

        t = model.get("tiny") or {}
        try:
            return ensure_tiny_model(_abs(model.get("cache_dir", ".cache/models")),
                                     num_layers=int(t.get("num_layers", 8)), hidden_size=int(t.get("hidden_size", 128)),
                                     seed=int(t.get("seed", 0)))
        except (OSError, ValueError) as exc:
            raise RunnerError(f"identity gate: tiny model cannot be built/verified: {exc}", EXIT_IDENTITY) from None
    path = model.get("path")
    if path in (None, "???"):
        raise RunnerError(f"identity gate: model.path is required for model {model.get('name')!r} "
                          "(declared ???); give model.path=<local dir>", EXIT_IDENTITY)
    d = _abs(str(path), Path.cwd())
    if not d.is_dir():
        raise RunnerError(f"identity gate: model directory {d} does not exist", EXIT_IDENTITY)
    if not (d / "SHA256SUMS").is_file():
        raise RunnerError(f"identity gate: model directory {d} has no SHA256SUMS manifest", EXIT_IDENTITY)
    return d


# ----------------------------------------------------------------------------- identity


@dataclass
class Identity:
    """What the identity gate observed, reused for the manifest and later re-checks."""

    checks: list[Any]
    model_dir: Path
    model_sums: str
    offload_tree: str
    model_stat: tuple[tuple[str, int, int], ...]


def _model_stat(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """``(name, size, mtime_ns)`` of every file listed in ``SHA256SUMS`` (cheap re-check signature)."""
    out = []
    for line in (model_dir / "SHA256SUMS").read_text().splitlines():
        name = line.split(maxsplit=1)[1]
        st = (model_dir / name).stat()
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


SCALAR_PINS = ("model.sha256sums_sha256", "model.revision", "offload_tree_sha256")


def required_scalar_pins(cfg: Mapping[str, Any]) -> dict[str, str | None]:
    """The model / offload-tree pins, with ``???`` for a null one the experiment lists in ``required_pins``.

    Raises:
        RunnerError: (config) ``required_pins`` names something else.
    """
    required = list(cfg.get("required_pins") or [])
    bad = [r for r in required if r not in SCALAR_PINS]
    if bad:
        raise RunnerError(f"config: required_pins {bad} not allowed; allowed: {list(SCALAR_PINS)}", EXIT_CONFIG)
    values = {"model.sha256sums_sha256": cfg["model"].get("sha256sums_sha256"),
              "model.revision": cfg["model"].get("revision"), "offload_tree_sha256": cfg.get("offload_tree_sha256")}
    return {k: ("???" if v is None and k in required else v) for k, v in values.items()}


def runtime_checks(cfg: Mapping[str, Any], offload_tree: str) -> list[Any]:
    """Pins of every runtime used, observed inside each runtime (``runners.probe``).

    A runtime with its own interpreter or command prefix is probed in a subprocess started
    through it; one without runs the probe in this interpreter (it is the runner's).

    Raises:
        RunnerError: (identity) a runtime's probe cannot run.
    """
    from runners.identity import check_pins, probe_spec
    from runners.runtimes import ProbeError, map_path, own_process, probe_runtime

    checks: list[Any] = []
    for rt in runtimes_used(cfg):
        pins = rt.get("pins") or {}
        path_of = (lambda p, _rt=rt: map_path(_rt, p))
        observed = None
        if own_process(rt):
            try:
                observed = probe_runtime(rt, probe_spec(pins, path_of))
            except ProbeError as exc:
                raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
        checks += check_pins(pins, model_dir=None, model_pin=None, model_revision=None, observed_revision=None,
                             offload_pin=None, offload_actual=offload_tree, observed=observed, path_of=path_of,
                             runtime=str(rt.get("name")))
    return checks


def report_packages(cfg: Mapping[str, Any]) -> dict[str, str | None]:
    """Versions of every runtime's ``report_packages``, observed where that runtime runs.

    Keys: the distribution name for a runtime on the runner's interpreter; ``<runtime>/<dist>``
    for a runtime with its own interpreter or command prefix (its probe observed them).

    Raises:
        RunnerError: (identity) a runtime's probe cannot run.
    """
    from runners.probe import package_version
    from runners.runtimes import ProbeError, own_process, probe_runtime

    out: dict[str, str | None] = {}
    for rt in runtimes_used(cfg):
        names = [str(p) for p in (rt.get("report_packages") or [])]
        if own_process(rt):
            try:
                seen = probe_runtime(rt, {"packages": names})["packages"]
            except ProbeError as exc:
                raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
            out.update({f"{rt['name']}/{n}": seen.get(n) for n in names})
        else:
            out.update({n: package_version(n) for n in names})
    return dict(sorted(out.items()))


def gather_identity(cfg: Mapping[str, Any], *, when: str, previous: Identity | None = None) -> Identity:
    """Check every declared pin of every runtime used, the model and the offload tree.

    The first call (``previous=None``) verifies every model file against ``SHA256SUMS``
    (full hash). Re-checks (before each phase, at the end) re-evaluate the pins and
    require the observed values, the ``SHA256SUMS`` hash and the model files' size and
    mtime to equal the first observation, without re-hashing the weights.

    Raises:
        RunnerError: (identity) naming the first mismatch.
    """
    from runners.identity import IdentityError, check_pins, enforce, sha256_file, tree_sha256

    model = cfg["model"]
    offload_tree = tree_sha256(REPO_ROOT / "offload")
    checks = []
    hint = (f"Write every observed value with `python -m runners.pins +experiment={cfg.get('experiment_name')} "
            "[the same overrides] --out pins.yaml`, check it, then add `+pins=pins.yaml` (docs/real-host.md).")
    try:
        checks += runtime_checks(cfg, offload_tree)
        scalar = required_scalar_pins(cfg)
        try:
            model_dir = resolve_model_dir(model) if previous is None else previous.model_dir
        except RunnerError as exc:  # list the model problem together with every failed runtime pin
            if any(not c.ok for c in checks):
                enforce(checks, when=when, hint=f"  - {exc}\n{hint}")
            raise
        from runners.published_identity import model_revision, tree_value_for_pin

        try:  # REVISION file, else ModelScope's .msc (issue 15)
            observed_rev = model_revision(model_dir)
        except ValueError as exc:
            raise RunnerError(f"identity gate ({when}): model revision: {exc}", EXIT_IDENTITY) from None
        checks += check_pins({}, model_dir=model_dir, model_pin=scalar["model.sha256sums_sha256"],
                             model_revision=scalar["model.revision"], observed_revision=observed_rev,
                             offload_pin=scalar["offload_tree_sha256"],
                             offload_actual=tree_value_for_pin(scalar["offload_tree_sha256"], REPO_ROOT / "offload",
                                                               offload_tree))
        enforce(checks, when=when, hint=hint)
    except IdentityError as exc:
        raise RunnerError(str(exc), EXIT_IDENTITY) from None
    if previous is None and model.get("source") != "tiny":  # ensure_tiny_model already verified the tiny one
        from runners.tiny_model import verify_model_dir

        try:
            verify_model_dir(model_dir)
        except (OSError, ValueError) as exc:
            raise RunnerError(f"identity gate ({when}): model files do not match SHA256SUMS: {exc}",
                              EXIT_IDENTITY) from None
    try:
        ident = Identity(checks=checks, model_dir=model_dir, model_sums=sha256_file(model_dir / "SHA256SUMS"),
                         offload_tree=offload_tree, model_stat=_model_stat(model_dir))
    except OSError as exc:
        raise RunnerError(f"identity gate ({when}): model files unreadable: {exc}", EXIT_IDENTITY) from None
    if previous is not None:
        diffs = [f"pin {c.kind} {c.name!r}: {p.actual!r} -> {c.actual!r}"
                 for p, c in zip(previous.checks, ident.checks) if (p.kind, p.name, p.actual) != (c.kind, c.name, c.actual)]
        if ident.offload_tree != previous.offload_tree:
            diffs.append("offload/ tree changed")
        if ident.model_sums != previous.model_sums or ident.model_stat != previous.model_stat:
            diffs.append(f"model files in {model_dir} changed (SHA256SUMS / size / mtime)")
        if diffs:
            raise RunnerError(f"identity gate ({when}): changed since the run started: {'; '.join(diffs)}",
                              EXIT_IDENTITY)
    return ident


# ----------------------------------------------------------------------------- accuracy inputs

DEFAULT_ACCURACY_MANIFEST = "eval_datasets/fixtures/manifest.json"


def accuracy_manifest_path(configured: str | None) -> Path:
    """Absolute dataset manifest of an accuracy phase (relative = repository root)."""
    return _abs(str(configured or DEFAULT_ACCURACY_MANIFEST))


@dataclass(frozen=True)
class AccuracyPhase:
    """What the pre-launch check learnt about one accuracy phase (used again by the end-of-run verifier).

    Attributes:
        phase: phase name.
        manifest: absolute dataset manifest path.
        entries: manifest entry name per task.
        formal: every dataset is ``kind: full`` and no ``accuracy_limit``: the verifier runs in formal mode.
        verify_limit: ``--limit`` for the verifier (None = formal mode).
    """

    phase: str
    manifest: Path
    entries: tuple[tuple[str, str], ...]
    formal: bool
    verify_limit: int | None


def check_accuracy_inputs(items: Sequence[Any]) -> list[AccuracyPhase]:
    """Check every accuracy phase's dataset manifest and files before any process starts.

    The manifest must exist and validate, name exactly one entry for each task of the
    phase, and every file must be present with the declared SHA-256 and row count.

    Raises:
        RunnerError: (config) naming the phase, the manifest path and what is wrong.
    """
    from runners.accuracy.datasets import DatasetError, load_manifest, select_entry, verify_file

    out: list[AccuracyPhase] = []
    seen: dict[str, Any] = {}
    for sc in items:
        c = sc.case
        if c.kind == "accuracy" and c.phase not in seen:
            seen[c.phase] = c
    from results_schema.protocols import UnknownProtocolError, check_protocol

    for phase, c in seen.items():
        try:
            check_protocol(str(c.accuracy_protocol or "qwen-chat-v1"))
        except UnknownProtocolError as exc:
            raise RunnerError(f"config: accuracy phase {phase!r}: accuracy_protocol: {exc}", EXIT_CONFIG) from None
        manifest = accuracy_manifest_path(c.accuracy_manifest)
        where = f"config: accuracy phase {phase!r}: accuracy_manifest={c.accuracy_manifest!r}"
        if not manifest.is_file():
            raise RunnerError(f"{where}: dataset manifest {manifest} does not exist (relative paths are resolved "
                              f"against the repository root {REPO_ROOT}; materialize full datasets with "
                              "`python -m runners.accuracy materialize`)", EXIT_CONFIG)
        try:
            m = load_manifest(manifest)
            entries = []
            for task in c.accuracy_tasks:
                entry = select_entry(m, task)
                verify_file(manifest, entry)
                entries.append(entry)
        except DatasetError as exc:
            raise RunnerError(f"{where}: {exc}", EXIT_CONFIG) from None
        formal = c.accuracy_limit is None and all(e.kind == "full" for e in entries)
        if formal:
            limit = None
        else:
            limit = int(c.accuracy_limit) if c.accuracy_limit is not None else max(e.rows for e in entries)
        out.append(AccuracyPhase(phase=phase, manifest=manifest, entries=tuple((e.task, e.name) for e in entries),
                                 formal=formal, verify_limit=limit))
    return out


# ----------------------------------------------------------------------------- health


def health_gate(runtime: Mapping[str, Any], out_path: Path) -> None:
    """Run the runtime's health command; save its output; raise ``RunnerError`` (42) when not OK.

    OK = exit 0 and, when ``health_expect`` is set, the output matches it; ``{physical_index}`` /
    ``{chip}`` in the command name the case device (``runners.health``).
    """
    import subprocess

    from runners.health import device_placeholders, health_argv, health_verdict, needs_device

    cmd = runtime.get("health_command")
    if not cmd:
        return
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if needs_device(cmd):
        try:
            cmd = health_argv(cmd, device_placeholders(str(runtime.get("device"))))
        except ValueError as exc:
            raise RunnerError(f"health gate for runtime {runtime['name']!r}: {exc}", EXIT_HEALTH) from None
    try:
        from runners.runtimes import prefixed

        r = subprocess.run(prefixed(runtime, cmd), capture_output=True, text=True, timeout=float(runtime.get("health_timeout_s", 60)),
                           check=False)
        text, rc = r.stdout + r.stderr, r.returncode
    except FileNotFoundError:
        text, rc = f"{cmd[0]}: not found\n", 127
    except subprocess.TimeoutExpired:
        text, rc = "health command timed out\n", 124
    out_path.write_text(f"$ {' '.join(cmd)}\n# exit {rc}\n{text}")
    why = health_verdict(rc, text, runtime.get("health_expect"))
    if why is not None:
        raise RunnerError(f"health gate for runtime {runtime['name']!r} failed: `{' '.join(cmd)}` {why} "
                          f"(output in {out_path})", EXIT_HEALTH)


# ----------------------------------------------------------------------------- case commands


def case_argv(sc: Any, *, model_dir: Path, paths: CasePaths, bench_command: Sequence[str] | None,
              python: str, accuracy_command: Sequence[str] | None = None,
              bench_module: str = "runners.bench_one") -> tuple[str, ...]:
    """argv of one case process (``python`` = the case runtime's interpreter)."""
    c = sc.case
    w = c.workload
    if c.kind == "accuracy":
        offload = "0" if c.implementation == "baseline" else f"{c.group_size},{c.num_in_group},{c.prefetch_step}"
        prefix = list(accuracy_command) if accuracy_command else [python, "-m", "runners.accuracy"]
        argv = prefix + ["run", "--model", str(model_dir),
                "--dataset", ",".join(c.accuracy_tasks), "--implementation", c.implementation, "--offload", offload,
                "--label", c.label, "--out", str(paths.record.parent / paths.record.stem),
                "--manifest", str(accuracy_manifest_path(c.accuracy_manifest)),
                "--protocol", str(c.accuracy_protocol or "qwen-chat-v1")]
        if c.accuracy_limit is not None:
            argv += ["--limit", str(c.accuracy_limit)]
        return tuple(argv)
    prefix = list(bench_command) if bench_command else [python, "-m", bench_module]
    argv = prefix + [
        "--phase", c.phase, "--label", c.label, "--implementation", c.implementation, "--repeat", str(sc.repeat),
        "--runtime", c.runtime_name, "--device", str(c.runtime.get("device", "cpu")), "--model", str(model_dir),
        "--offload-group-size", str(c.group_size), "--offload-num-in-group", str(c.num_in_group),
        "--offload-prefetch-step", str(c.prefetch_step), "--offload-params", ",".join(c.params),
        "--offload-backend", c.backend,
        "--num-prompts", str(w["num_prompts"]), "--input-len", str(w["input_len"]),
        "--max-tokens", str(w["max_tokens"]), "--max-model-len", str(w["max_model_len"]), "--seed", str(w["seed"]),
        "--dtype", str(w["dtype"]), "--enforce-eager" if w["enforce_eager"] else "--no-enforce-eager",
        "--gpu-memory-utilization", str(w["gpu_memory_utilization"]),
        "--warmup-rounds", str(w["warmup_rounds"]), "--measured-rounds", str(w["measured_rounds"]),
        "--min-measured-s", str(w.get("min_measured_s", 0.0)),
        "--temperature", str(w.get("temperature", 0.0)), "--record", str(paths.record),
    ]
    if not w.get("prompts_vary_per_round", True):
        argv.append("--same-prompts-every-round")
    argv += published_workload_argv(w)
    return tuple(argv)


def numerics_of(cfg: Mapping[str, Any]) -> tuple[Any, ...]:
    """``NumericsIdentity`` per runtime used (CPU ISA, torch / oneDNN, threads, kernel path, accelerator)."""
    from runners.numerics import numerics_identity

    out = []
    for rt in runtimes_used(cfg):
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (rt.get("env") or {}).items()})
        out.append(numerics_identity(device=str(rt.get("device", "cpu")), python=sys.executable, case_env=env,
                                     cpu_kernel_path=rt.get("cpu_kernel_path")))
    return tuple(out)


def check_cpu_kernel_paths(items: Sequence[Any]) -> None:
    """Refuse a bad ``runtime.cpu_kernel_path`` before any process starts (``RunnerError``, exit 2).

    Allowed: ``plain`` / ``packed`` on a CPU runtime, null elsewhere. ``packed`` keeps vLLM's
    packed kernels, which our offloader replaces by plain ones in the layers it wraps, so a
    matrix with an offload case under ``packed`` would compare kernels, not residency.
    """
    from offload.cpu_kernels import CPU_KERNEL_PATHS

    for sc in items:
        rt = sc.case.runtime or {}
        path = rt.get("cpu_kernel_path")
        where = f"runtime {rt.get('name')!r} (case {sc.case.phase}/{sc.case.label})"
        if path is None:
            continue
        if str(rt.get("device", "cpu")) != "cpu":
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


def published_workload_argv(w: Mapping[str, Any]) -> list[str]:
    """bench_one flags of the optional / published workload fields (issue 15); null = not passed."""
    argv: list[str] = []
    if w.get("enable_prefix_caching") is not None:
        argv.append("--enable-prefix-caching" if w["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if w.get("prompt_mode", "random_ids") != "random_ids":
        argv += ["--prompt-mode", str(w["prompt_mode"])]
    if w.get("prompt_seed_text") is not None:
        argv += ["--prompt-seed-text", str(w["prompt_seed_text"])]
    if not w.get("ignore_eos", True):
        argv.append("--no-ignore-eos")
    if w.get("trust_remote_code", False):
        argv.append("--trust-remote-code")
    for key in ("max_num_seqs", "max_num_batched_tokens_factor"):
        if w.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), str(w[key])]
    return argv


def case_env(sc: Any, *, run_dir: Path, paths: CasePaths, base_env: Mapping[str, str]) -> dict[str, str]:
    """Explicit environment of one case process (see docs/CONTRACTS.md)."""
    env = {k: v for k, v in base_env.items() if k not in _CONTROLLED_ENV}
    cache = run_dir / "cache"
    env.update({str(k): str(v) for k, v in (sc.case.runtime.get("env") or {}).items()})
    pythonpath = f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}"
    if sc.case.runtime.get("inherit_pythonpath") and base_env.get("PYTHONPATH"):
        pythonpath += ":" + base_env["PYTHONPATH"]  # e.g. CANN's set_env.sh entries, after ours (issue 15)
    env.update({
        "PYTHONPATH": pythonpath,
        "OFFLOAD_IMPL": sc.case.implementation,
        "OFFLOAD_EVIDENCE_PATH": str(paths.evidence),
        "OFFLOAD_CPU_KERNEL_PATH": str(sc.case.runtime.get("cpu_kernel_path") or ""),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "XDG_CACHE_HOME": str(cache / "xdg"),
        # one compile cache per implementation: vLLM's cache key covers the offload config,
        # not OFFLOAD_IMPL, so cases sharing a root could load another offloader's graph
        "VLLM_CACHE_ROOT": str(cache / "vllm" / sc.case.implementation),
        "HF_HOME": str(cache / "hf"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "PYTHONUNBUFFERED": "1",
    })
    return env


# ----------------------------------------------------------------------------- run directory files


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_sha256sums(run_dir: Path) -> Path:
    """``SHA256SUMS`` over every file of the run directory (sorted relative paths)."""
    from runners.identity import sha256_file

    out = run_dir / "SHA256SUMS"
    lines = []
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file() and not p.is_symlink() and rel != "SHA256SUMS" and not rel.startswith("cache/"):
            lines.append(f"{sha256_file(p)}  {rel}")
    write_text_atomic(out, "\n".join(lines) + "\n")
    return out


def _yaml(data: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))


# ----------------------------------------------------------------------------- progress


class Progress:
    """Case k/n with ETA: a rich bar on a terminal, one plain line per case always."""

    def __init__(self, total: int, *, live: bool) -> None:
        self.console = _console()
        self.total = total
        self.done = 0
        self.walls: list[float] = []
        self.t0 = time.monotonic()
        self._bar = None
        if live and self.console.is_terminal and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn
            from rich.progress import TimeElapsedColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     console=self.console, transient=True)
            self._task = self._bar.add_task("cases", total=total)
            self._bar.start()

    def skip(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n)

    def start(self, sc: Any) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"{sc.case.phase}/{sc.stem}")

    def eta_s(self) -> float | None:
        if not self.walls:
            return None
        elapsed = time.monotonic() - self.t0
        return elapsed / len(self.walls) * (self.total - self.done)

    def finish(self, sc: Any, status: str, wall_s: float) -> None:
        self.done += 1
        self.walls.append(wall_s)
        eta = self.eta_s()
        eta_txt = "-" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
        self.console.print(f"[{self.done}/{self.total}] {sc.case.phase}/{sc.stem}: {status} "
                           f"({wall_s:.1f} s) ETA {eta_txt}")
        if self._bar is not None:
            self._bar.update(self._task, advance=1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ----------------------------------------------------------------------------- resume


def _read_lines_quarantining(path: Path, model: type, quarantine: Path) -> list[Any]:
    """Read a JSONL file strictly; a torn final line is moved to ``quarantine`` first."""
    from results_schema.io import read_jsonl

    if not path.is_file():
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        quarantine.mkdir(parents=True, exist_ok=True)
        (quarantine / f"{path.name}.torn-line").write_bytes(data[cut:])
        write_text_atomic(path, data[:cut].decode("utf-8"))
    return read_jsonl(path, model)


def accuracy_cases_name(phase: str) -> str:
    """File of an accuracy phase's completion lines (``AccuracyCaseRun``)."""
    return f"{phase}-accuracy-cases.jsonl"


def _check_resumed_accuracy_manifests(run_dir: Path, phases: Sequence["AccuracyPhase"]) -> None:
    """Resume: completed accuracy cases must have used the dataset manifest the run uses now.

    Raises:
        RunnerError: (identity) naming the phase, the case and the manifest hashes.
    """
    from results_schema.accuracy import AccuracyCaseRun
    from results_schema.io import read_jsonl
    from runners.identity import sha256_file

    for p in phases:
        path = run_dir / accuracy_cases_name(p.phase)
        if not path.is_file():
            continue
        now = sha256_file(p.manifest)
        for line in read_jsonl(path, AccuracyCaseRun):
            if line.dataset_manifest_sha256 != now or Path(line.dataset_manifest_path) != p.manifest:
                raise RunnerError(
                    f"resume: accuracy phase {p.phase!r} case {line.label!r} r{line.repeat} used dataset manifest "
                    f"{line.dataset_manifest_path} (sha256 {line.dataset_manifest_sha256}); the run now has "
                    f"{p.manifest} (sha256 {now})", EXIT_IDENTITY)


def completed_keys(run_dir: Path, phases: Sequence[str], quarantine: Path) -> set[tuple[str, str, int]]:
    """``(phase, label, repeat)`` of every case with a run, accuracy-case or failure line."""
    from results_schema.accuracy import AccuracyCaseRun
    from results_schema.models import CaseFailure, CaseRun

    done: set[tuple[str, str, int]] = set()
    for ph in phases:
        for r in _read_lines_quarantining(run_dir / f"{ph}-runs.jsonl", CaseRun, quarantine):
            done.add((ph, r.record.label, r.record.repeat))
        for a in _read_lines_quarantining(run_dir / accuracy_cases_name(ph), AccuracyCaseRun, quarantine):
            done.add((ph, a.label, a.repeat))
        for f in _read_lines_quarantining(run_dir / f"{ph}-failures.jsonl", CaseFailure, quarantine):
            done.add((ph, f.label, f.repeat))
        from results_schema.serving import ServingRun

        for sr in _read_lines_quarantining(run_dir / f"{ph}-serving.jsonl", ServingRun, quarantine):
            done.add((ph, sr.label, sr.repeat))
    return done


# ----------------------------------------------------------------------------- the run


@dataclass
class RunState:
    run_dir: Path
    model_dir: Path
    python: str
    bench_command: Sequence[str] | None
    formal: bool
    progress: Progress
    accuracy_command: Sequence[str] | None = None
    unexpected: list[str] = field(default_factory=list)
    expected_failures: int = 0
    successes: int = 0
    stopped: bool = False
    case_wall_s: float = 0.0
    finalize_s: float = 0.0


def _finalize_accuracy(sc: Any, spec: Any, outcome: Any, run_dir: Path) -> tuple[Any, Any]:
    """Accuracy case: success = exit 0 and a validating ``<label>.<task>.result.json`` per task.

    Returns:
        ``(Finalized, AccuracyCaseRun | None)``: the completion line on success, else a failure.
    """
    from results_schema.models import CaseFailure
    from runners.finalize import Finalized, root_cause, tail

    c = sc.case
    log_path = Path(spec.log_path)
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    out_dir = Path(spec.record_path).parent / Path(spec.record_path).stem
    results = [out_dir / f"{c.label}.{task}.result.json" for task in c.accuracy_tasks]
    missing = [p.name for p in results if not p.is_file()]
    ok = outcome.exit_code == 0 and not outcome.timed_out and not missing
    if ok:
        try:
            from results_schema.accuracy import AccuracyCaseRun, AccuracyTaskOutcome, AccuracyResult
            from results_schema.io import read_json
            from results_schema.models import OffloadSetting
            from runners.identity import sha256_file

            outcomes = []
            for task, result in zip(c.accuracy_tasks, results):
                r = read_json(result, AccuracyResult)
                if r.label != c.label or r.implementation != c.implementation:
                    raise ValueError(f"{result.name} is for case {r.label!r} ({r.implementation}), expected "
                                     f"{c.label!r} ({c.implementation})")
                outcomes.append(AccuracyTaskOutcome(
                    task=r.task, mode=r.mode, protocol_name=r.protocol_name, protocol_sha256=r.protocol_sha256,
                    result_path=result.relative_to(run_dir).as_posix(),
                    result_sha256=sha256_file(result), examples_sha256=r.examples_sha256,
                    num_examples=r.num_examples, correct=r.correct, unparsable=r.unparsable, accuracy=r.accuracy))
            manifest = accuracy_manifest_path(c.accuracy_manifest)
            offload = (OffloadSetting(offload_group_size=0, offload_num_in_group=0) if c.implementation == "baseline"
                       else OffloadSetting(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                                           offload_prefetch_step=c.prefetch_step))
            ev = Path(spec.evidence_path)
            line = AccuracyCaseRun(
                phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, offload=offload,
                tasks=tuple(o.task for o in outcomes), results=tuple(outcomes), limit=c.accuracy_limit,
                dataset_manifest_path=str(manifest), dataset_manifest_sha256=sha256_file(manifest),
                process_wall_s=outcome.wall_s, log_path=str(log_path.relative_to(run_dir)),
                evidence_path=str(ev.relative_to(run_dir)) if ev.is_file() else None, command=tuple(spec.argv))
            return Finalized(run=None, failure=None, expected=c.expect_error is None), line
        except (ValueError, OSError) as exc:
            msg = f"accuracy result does not validate: {exc}"
    else:
        msg = ("timeout" if outcome.timed_out else f"exit {outcome.exit_code} signal {outcome.signal}, "
               f"missing results {missing}")
    et, em = root_cause(log_text)
    ftype = "timeout" if outcome.timed_out else ("signal" if outcome.signal else
                                                 ("nonzero_exit" if outcome.exit_code else "no_result"))
    f = CaseFailure(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
                    failure_type=ftype, exit_code=outcome.exit_code, signal=outcome.signal, error_type=et,
                    error_message=f"case {c.phase}/{c.label} r{sc.repeat}: {msg}" + (f"; {et}: {em}" if et else ""),
                    log_tail=tail(log_text), log_path=str(log_path.relative_to(run_dir)), duration_s=outcome.wall_s)
    return Finalized(run=None, failure=f, expected=False), None


def _on_done(state: RunState, sc: Any, spec: Any, outcome: Any) -> bool:
    t0 = time.monotonic()
    try:
        return _on_done_impl(state, sc, spec, outcome)
    finally:
        state.finalize_s += time.monotonic() - t0


def _on_done_impl(state: RunState, sc: Any, spec: Any, outcome: Any) -> bool:
    from results_schema.io import append_jsonl
    from runners.finalize import finalize

    run_dir = state.run_dir
    state.case_wall_s += outcome.wall_s
    acc_line = None
    serving_lines: list[Any] = []
    if sc.case.kind == "accuracy":
        fin, acc_line = _finalize_accuracy(sc, spec, outcome, run_dir)
    elif sc.case.kind == "serving":
        from runners.serving.spec import finalize_serving

        fin, serving_lines = finalize_serving(sc, spec, outcome, run_dir)
    else:
        fin = finalize(sc, outcome, run_dir=run_dir, log_path=Path(spec.log_path),
                       evidence_path=Path(spec.evidence_path), record_path=Path(spec.record_path),
                       command=tuple(spec.argv))
    if fin.run is not None:
        append_jsonl(run_dir / f"{sc.case.phase}-runs.jsonl", fin.run)
    if acc_line is not None:
        append_jsonl(run_dir / accuracy_cases_name(sc.case.phase), acc_line)
    for line in serving_lines:
        append_jsonl(run_dir / f"{sc.case.phase}-serving.jsonl", line)
    if fin.failure is not None:
        append_jsonl(run_dir / f"{sc.case.phase}-failures.jsonl", fin.failure)
    if fin.expected:
        if fin.failure is not None:
            state.expected_failures += 1
            status = f"expected failure: {fin.failure.error_type or fin.failure.failure_type}"
        else:
            state.successes += 1
            status = "ok"
            if acc_line is not None:
                status += " " + ", ".join(f"{o.task} {o.correct}/{o.num_examples} ({o.mode})" for o in acc_line.results)
            if serving_lines:
                ev = serving_lines[0].evidence
                status += (" " + ", ".join(f"{ln.rate.request_rate_rps or 'inf'} req/s: TPOT p99 {ln.rate.tpot.p99_ms:.1f} ms"
                                           for ln in serving_lines)
                           + f"; wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
            if fin.run is not None:
                ev = fin.run.evidence
                rec = fin.run.record
                status += (f" {rec.throughput_tok_s:.1f} tok/s over {rec.elapsed_s:.2f} s measured in "
                           f"{len(rec.rounds)} rounds (min {rec.workload.min_measured_s or 0:g} s), "
                           f"wrapped {ev.wrapped_count}, {ev.offloaded_bytes} B offloaded")
                if fin.note:  # e.g. the KV cache memory changed during the case
                    status += f"; {fin.note}"
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


def _quarantine(paths: Sequence[Path], run_dir: Path, qdir: Path) -> None:
    for p in paths:
        dest = qdir / p.relative_to(run_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(p), str(dest))


def print_schedule(items: Sequence[Any], cfg: Mapping[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    table = Table(title=f"schedule: {cfg.get('experiment_name')} ({len(items)} processes)")
    for col in ("#", "phase", "repeat", "label", "impl", "G", "N", "P", "runtime", "rounds"):
        table.add_column(col)
    for sc in items:
        c = sc.case
        table.add_row(str(sc.index + 1), c.phase, str(sc.repeat), c.label, c.implementation, str(c.group_size),
                      str(c.num_in_group), str(c.prefetch_step), c.runtime_name,
                      str(c.workload["measured_rounds"]) if c.kind != "serving" else
                      "serving: " + ", ".join(f"{r:g}" for r in c.serving["request_rates"]) + " req/s")
    console.print(table)
    per_phase: dict[str, int] = {}
    for sc in items:
        per_phase[sc.case.phase] = per_phase.get(sc.case.phase, 0) + 1
    console.print("processes per phase: " + ", ".join(f"{k}={v}" for k, v in per_phase.items())
                  + f"; total={len(items)}")
    from rich.markup import escape

    for line in schedule_settings(items, cfg):
        console.print(escape(line))


def schedule_settings(items: Sequence[Any], cfg: Mapping[str, Any]) -> list[str]:
    """Dry-run lines naming what every case gets: per phase the offload backend(s), schedule and
    process limits, the effective workload, and the runtime's case environment (issue 15)."""
    lines: list[str] = []
    firsts: dict[str, Any] = {}
    for sc in items:
        firsts.setdefault(sc.case.phase, sc.case)
    for phase, c in firsts.items():
        m = (cfg.get("phases") or {}).get(phase) or {}
        backends = sorted({sc.case.backend for sc in items if sc.case.phase == phase and sc.case.offload_requested})
        rt = c.runtime
        lines.append(f"phase {phase}: runtime={rt['name']} offload_backend={','.join(backends) or '-'} "
                     f"focus_first={bool(m.get('focus_first', False))} cooldown_s={c.cooldown_s:g} "
                     f"case_timeout_s={c.timeout_s:g} kill_grace_s={c.kill_grace_s:g}")
        lines.append(f"  workload: " + " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                                                 for k, v in sorted(c.workload.items())))
        env = " ".join(f"{k}={v}" for k, v in sorted((rt.get("env") or {}).items()))
        lines.append(f"  case env: {env or '-'}; PYTHONPATH=<evidence hook>:<repo>"
                     + (":<inherited PYTHONPATH>" if rt.get("inherit_pythonpath") else "")
                     + f"; health: {' '.join(rt.get('health_command') or ['-'])}"
                     + (f" (expect {rt['health_expect']!r})" if rt.get("health_expect") else ""))
    return lines


def run_matrix(cfg: Mapping[str, Any], overrides: Sequence[str] = ()) -> int:
    """Run a resolved config (plain dict). Returns the exit code; prints one-line errors.

    Args:
        cfg: resolved config (``Config`` schema as a plain dict).
        overrides: the command-line overrides (saved with the run).
    """
    console = _console()
    try:
        return _run(cfg, list(overrides), console)
    except RunnerError as exc:
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(str(exc))}")  # messages hold [brackets]: not markup
        return exc.exit_code


def _run(cfg: Mapping[str, Any], overrides: list[str], console: Any) -> int:
    from runners.plan import PlanError, plan

    resume = cfg.get("resume")
    if resume:
        run_dir = _abs(str(resume), Path.cwd())
        if not (run_dir / "config.yaml").is_file() or not (run_dir / "environment-manifest.json").is_file():
            raise RunnerError(f"resume: {run_dir} is not a run directory (config.yaml / environment-manifest.json "
                              "missing)", EXIT_CONFIG)
        from omegaconf import OmegaConf

        from conf.schema import ConfigError, checked_saved_config

        saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True, throw_on_missing=False)
        try:
            saved = checked_saved_config(saved)
        except ConfigError as exc:
            raise RunnerError(f"resume: {run_dir / 'config.yaml'}: {exc}", EXIT_CONFIG) from None
        saved["resume"] = str(run_dir)
        for key in ("progress", "analyze"):
            if key in cfg:
                saved[key] = cfg[key]
        cfg = saved
        overrides = list(json.loads((run_dir / "overrides.json").read_text())) if (run_dir / "overrides.json").is_file() else overrides

    try:
        items = plan(cfg)
    except PlanError as exc:
        raise RunnerError(f"config: {exc}", EXIT_CONFIG) from None
    check_cpu_kernel_paths(items)
    executor_name = (cfg.get("executor") or {}).get("name", "local")
    if executor_name not in ("local", "ray"):
        raise RunnerError(f"config: executor.name {executor_name!r} must be 'local' or 'ray'", EXIT_CONFIG)
    from runners.executors import check_executor_config

    if (bad := check_executor_config(cfg.get("executor") or {})) is not None:
        raise RunnerError(f"config: {bad}", EXIT_CONFIG)
    if cfg.get("dry_run"):
        print_schedule(items, cfg)
        return EXIT_OK
    accuracy_phases: list[AccuracyPhase] = []
    if any(sc.case.kind == "accuracy" for sc in items):
        import importlib.util

        if importlib.util.find_spec("runners.accuracy") is None:
            raise RunnerError("config: an accuracy phase needs runners.accuracy, which is not installed", EXIT_CONFIG)
        accuracy_phases = check_accuracy_inputs(items)

    t_start = time.monotonic()
    stages = {"identity": 0.0, "analysis": 0.0, "checksums": 0.0}
    identity = gather_identity(cfg, when="before the first case")
    stages["identity"] += time.monotonic() - t_start
    from runners.devices import DeviceError, device_identity
    from runners.identity import build_manifest, case_code_sha256, git_identity

    try:
        devices = [device_identity(str(rt["device"])) for rt in runtimes_used(cfg)]
    except DeviceError as exc:
        raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
    packages = report_packages(cfg)
    git = git_identity()
    case_code = case_code_sha256()
    declared_env = sorted({str(k) for rt in runtimes_used(cfg) for k in (rt.get("env") or {})})

    from results_schema.io import read_json, write_json
    from results_schema.manifest import EnvironmentManifest, ModelIdentity

    phases = list(dict.fromkeys(sc.case.phase for sc in items))
    if resume:
        saved_manifest = read_json(run_dir / "environment-manifest.json", EnvironmentManifest)
        now = build_manifest(run_id=saved_manifest.run_id, experiment=saved_manifest.experiment, packages=packages,
                             checks=identity.checks, model=saved_manifest.model,
                             offload_tree=identity.offload_tree, devices=devices, config=cfg, overrides=overrides,
                             case_code=case_code, git=git, declared_env=declared_env)
        diffs = []
        if saved_manifest.packages != now.packages:
            diffs.append(f"packages {saved_manifest.packages} -> {now.packages}")
        if saved_manifest.offload_tree_sha256 != identity.offload_tree:
            diffs.append("offload/ tree hash changed")
        if saved_manifest.model.sha256sums_sha256 != identity.model_sums:
            diffs.append("model SHA256SUMS changed")
        if [(c.kind, c.name, c.actual) for c in saved_manifest.pins] != [(c.kind, c.name, c.actual) for c in now.pins]:
            diffs.append("pinned values changed")
        if saved_manifest.case_code_sha256 != case_code:
            diffs.append("case code (offload/, runners/, results_schema/) changed")
        if saved_manifest.git.revision != git.revision:
            console.print(f"[yellow]resume: git revision {saved_manifest.git.revision} -> {git.revision} "
                          "(case code unchanged)[/]")
        if diffs:
            raise RunnerError(f"resume: identity differs from the interrupted run: {'; '.join(diffs)}", EXIT_IDENTITY)
        from runners.launch import end_recorded_cases

        ended = end_recorded_cases(run_dir / "processes")  # what a killed runner left running
        if ended:
            console.print(f"resume: ended {len(ended)} process(es) left by the interrupted run: {ended}")
        qdir = run_dir / "quarantine" / new_run_id()
        done = completed_keys(run_dir, phases, qdir)
        _check_resumed_accuracy_manifests(run_dir, accuracy_phases)
        if (run_dir / "SHA256SUMS").exists():
            (run_dir / "SHA256SUMS").unlink()
        leftovers = []
        for sc in items:
            if sc.key not in done:
                leftovers += CasePaths.of(run_dir, sc.case.phase, sc.stem).existing()
                acc_dir = run_dir / "records" / sc.case.phase / sc.stem
                if acc_dir.is_dir():
                    leftovers.append(acc_dir)
                if sc.case.kind == "serving":
                    from runners.serving.spec import paths_of

                    leftovers += [q for k, q in paths_of(run_dir, sc.case.phase, sc.stem).items()
                                  if k != "requests_dir" and q.exists()]
        if leftovers:
            _quarantine(leftovers, run_dir, qdir)
            console.print(f"resume: quarantined {len(leftovers)} partial file(s) into {qdir.relative_to(run_dir)}")
        console.print(f"resume: {len(done)} of {len(items)} cases already recorded in {run_dir}")
    else:
        from conf.schema import ConfigError, check_name

        try:
            for key in ("run_id", "experiment_name"):
                check_name(key, cfg.get(key))
        except ConfigError as exc:
            raise RunnerError(f"config: {exc}", EXIT_CONFIG) from None
        run_id = cfg.get("run_id") or new_run_id()
        run_dir = _abs(str(cfg.get("results_root", "results"))) / str(cfg.get("experiment_name", "default")) / run_id
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            run_dir.mkdir()
        except FileExistsError:
            raise RunnerError(f"run directory {run_dir} already exists; refusing to reuse it "
                              "(choose another run_id, or resume=<dir>)", EXIT_CONFIG) from None
        cfg = dict(cfg)
        cfg["run_id"] = run_id
        manifest = build_manifest(
            run_id=run_id, experiment=str(cfg.get("experiment_name")), packages=packages, checks=identity.checks,
            model=ModelIdentity(name=str(cfg["model"]["name"]), path=str(identity.model_dir),
                                sha256sums_sha256=str(identity.model_sums), revision=cfg["model"].get("revision"),
                                num_layers=int(cfg["model"]["num_layers"])),
            offload_tree=identity.offload_tree, devices=devices, config=cfg, overrides=overrides,
            case_code=case_code, git=git, declared_env=declared_env)
        manifest = manifest.model_copy(update={"numerics": numerics_of(cfg)})
        write_text_atomic(run_dir / "config.yaml", _yaml(cfg))
        write_text_atomic(run_dir / "overrides.yaml", _yaml(list(overrides)))
        write_text_atomic(run_dir / "overrides.json", json.dumps(list(overrides)) + "\n")
        write_json(run_dir / "environment-manifest.json", manifest)
        repro = run_dir / "reproduction"
        write_text_atomic(repro / "config.yaml", _yaml(cfg))
        write_text_atomic(repro / "overrides.yaml", _yaml(list(overrides)))
        keep = [_shell_quote(o) for o in overrides if not o.startswith(("run_id=", "resume="))]
        write_text_atomic(repro / "run.sh", (
            "#!/bin/sh\n# Re-run this experiment into a new run directory, from the repository at git revision\n"
            f"# {git.revision}{' (dirty)' if git.dirty else ''}; config.yaml here is the resolved config it must give.\n"
            f"cd {_shell_quote(str(REPO_ROOT))} && exec {_shell_quote(sys.executable)} -m runners.matrix "
            f"{' '.join(keep)}\n"))
        os.chmod(repro / "run.sh", 0o755)
        done = set()
        console.print(f"run directory: {run_dir}")

    from runners.launch import end_orphaned_cases

    orphans = end_orphaned_cases()  # case processes of any run whose runner died (kill -9)
    if orphans:
        console.print(f"[yellow]ended {len(orphans)} leftover case process(es) of dead runners: {orphans}[/]")
    todo = [sc for sc in items if sc.key not in done]
    # No background work (e.g. pre-importing the analysis stack in a thread) while cases
    # are forked: a thread holding an import lock at fork time used to deadlock the child
    # before exec (see runners.launch._die_with_parent). The analysis imports when it runs.
    progress = Progress(len(items), live=bool(cfg.get("progress", True)))
    progress.skip(len(items) - len(todo))
    state = RunState(run_dir=run_dir, model_dir=identity.model_dir, python=sys.executable,
                     bench_command=cfg.get("bench_command"), formal=bool(cfg.get("formal")), progress=progress,
                     accuracy_command=cfg.get("accuracy_command"))
    from runners.executors import LaunchSpec, make_executor

    base_env = dict(os.environ)
    interrupted = False
    executor = None
    try:
        executor = make_executor(cfg.get("executor") or {}, REPO_ROOT, run_dir=run_dir)
        executor.prepare(cfg, identity)  # ray: identity gate on every node that will run cases
        for phase in phases:
            phase_items = [sc for sc in todo if sc.case.phase == phase]
            if not phase_items:
                continue
            if phase != phases[0] or resume:
                t = time.monotonic()
                gather_identity(cfg, when=f"before phase {phase}", previous=identity)
                stages["identity"] += time.monotonic() - t
            executor.health_gate(phase_items[0].case.runtime, run_dir / "health" / f"{phase}-{new_run_id()}.txt")
            specs = []
            for sc in phase_items:
                paths = CasePaths.of(run_dir, phase, sc.stem)
                for p in (paths.log, paths.evidence, paths.record):
                    p.parent.mkdir(parents=True, exist_ok=True)
                rt = sc.case.runtime
                python = str(rt.get("python") or state.python)
                if sc.case.kind == "serving":
                    from runners.serving.spec import write_case_spec

                    argv = write_case_spec(sc, model_dir=identity.model_dir, run_dir=run_dir, python=python)
                else:
                    argv = case_argv(sc, model_dir=identity.model_dir, paths=paths, bench_command=state.bench_command,
                                     python=python, accuracy_command=state.accuracy_command,
                                     bench_module=str(cfg.get("bench_module") or "runners.bench_one"))
                env = case_env(sc, run_dir=run_dir, paths=paths, base_env=base_env)
                explicit = state.accuracy_command if sc.case.kind == "accuracy" else state.bench_command
                if not explicit:  # an explicit command runs as given; otherwise inside the runtime
                    from runners.runtimes import wrap_prefix

                    argv, env = wrap_prefix(rt, argv, env, base_env)
                specs.append((sc, LaunchSpec(
                    argv=tuple(argv), env=env, cwd=str(REPO_ROOT),
                    log_path=str(paths.log), evidence_path=str(paths.evidence), record_path=str(paths.record),
                    timeout_s=sc.case.timeout_s, kill_grace_s=sc.case.kill_grace_s, cooldown_s=sc.case.cooldown_s,
                    accelerator=sc.case.runtime.get("ray_resource"),
                    pid_file=str(run_dir / "processes" / phase / f"{sc.stem}.json"),
                    record_env=tuple(str(k) for k in (sc.case.runtime.get("env") or {})))))
            executor.execute(specs, lambda sc, spec, out: _on_done(state, sc, spec, out), on_start=progress.start)
            if state.stopped:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        if executor is not None:
            executor.close()
            stages["launch"] = executor.launch_overhead_s
            stages["cooldown"] = executor.cooldown_total_s
    if interrupted:
        console.print(f"[bold red]interrupted[/]: resume with `python -m runners.matrix resume={run_dir}`")
        return EXIT_INTERRUPTED
    health_after: RunnerError | None = None
    if todo and not state.stopped:  # published: the device is healthy after the last phase too
        try:
            health_gate(todo[-1].case.runtime, run_dir / "health" / f"after-last-phase-{new_run_id()}.txt")
        except RunnerError as exc:  # evidence is kept and checksummed; the run still fails (42)
            health_after = exc
    t = time.monotonic()
    gather_identity(cfg, when="at the end", previous=identity)
    stages["identity"] += time.monotonic() - t
    t = time.monotonic()
    accuracy_failed: list[str] = []
    validation = None
    serving_valid = True
    try:
        if cfg.get("analyze", True) and not state.stopped:
            _copy_bench(cfg, items, run_dir, identity.model_dir, base_env, console)
            validation, serving_valid = _analyze(run_dir, console)
            if accuracy_phases:
                accuracy_failed = _verify_accuracy(run_dir, accuracy_phases, console)
                _refresh_html(run_dir, console)
    finally:  # the run's evidence is complete: checksum it even if the analysis raises
        stages["analysis"] += time.monotonic() - t
        t = time.monotonic()
        write_sha256sums(run_dir)
        stages["checksums"] += time.monotonic() - t
    wall = time.monotonic() - t_start
    console.print(f"done: {state.successes} ok, {state.expected_failures} expected failure(s), "
                  f"{len(state.unexpected)} unexpected, runner wall {wall:.1f} s, case processes "
                  f"{state.case_wall_s:.1f} s (identity {stages['identity']:.1f} s, spawn+reap "
                  f"{stages.get('launch', 0.0):.1f} s, finalize {state.finalize_s:.1f} s, cooldown "
                  f"{stages.get('cooldown', 0.0):.1f} s, analysis {stages['analysis']:.1f} s, checksums "
                  f"{stages['checksums']:.1f} s); {run_dir}")
    for line in state.unexpected:
        console.print(f"  [red]{line}[/]")
    code = EXIT_OK
    if health_after is not None:  # the health gate after the last phase failed: evidence kept and checksummed
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(str(health_after))} (after the last phase)")
        code = health_after.exit_code
    elif state.stopped:
        console.print("[bold red]formal run stopped at its first failure[/] (completed evidence kept)")
        code = EXIT_FORMAL_STOP
    elif state.unexpected:
        code = EXIT_CASE_FAILURES
    elif not serving_valid:
        console.print("[bold red]serving validation FAILED[/] (summary/serving-summary.md)")
        code = EXIT_INVALID
    elif accuracy_failed:
        console.print(f"[bold red]accuracy verification FAILED[/] for phase(s) {', '.join(accuracy_failed)}")
        code = EXIT_ACCURACY
    elif validation is not None and not validation.valid:
        code = EXIT_INVALID
    # the last line is the verdict: a failed proof never ends "ok"
    if not serving_valid:
        verdict = "validation: INVALID: serving validation failed (summary/serving-summary.md)"
    elif validation is None:
        verdict = "validation: not run (analyze=false or stopped); run `python -m analysis validate " f"{run_dir}`"
    else:
        verdict = validation.verdict()
    console.print(f"{verdict}; exit {code}", markup=False)
    return code


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _verify_accuracy(run_dir: Path, phases: Sequence[AccuracyPhase], console: Any) -> list[str]:
    """Run the accuracy verifier over each accuracy phase; report in ``summary/``; return failed phases.

    One accuracy phase writes ``summary/accuracy-verification.{json,md}``; several write
    ``summary/accuracy-<phase>/``. The verdict and the mode (formal / LIMITED) are printed.
    """
    try:
        from analysis.accuracy import render_markdown, verify, write_report
    except ImportError as exc:
        console.print(f"[yellow]accuracy verifier unavailable ({exc}); run `python -m analysis accuracy-verify "
                      f"{run_dir}/records/<phase>` later[/]")
        return [p.phase for p in phases]
    failed = []
    for p in phases:
        report_dir = run_dir / "summary" if len(phases) == 1 else run_dir / "summary" / f"accuracy-{p.phase}"
        try:
            report = verify(run_dir / "records" / p.phase, limit=p.verify_limit, manifest=p.manifest)
        except (ValueError, OSError) as exc:  # RecordError is a ValueError: an unreadable result file
            console.print(f"accuracy {p.phase}: FAILED (unreadable input: {exc})", markup=False)
            failed.append(p.phase)
            continue
        json_path, _ = write_report(report_dir, report)
        console.print(render_markdown(report), markup=False)
        verdict = "PASSED" if report.passed else "FAILED"
        console.print(f"accuracy {p.phase}: {verdict} ({report.mode_note}); report "
                      f"{json_path.relative_to(run_dir)}", markup=False)
        if not report.passed:
            failed.append(p.phase)
    return failed


def _copy_bench(cfg: Mapping[str, Any], items: Sequence[Any], run_dir: Path, model_dir: Path,
                base_env: Mapping[str, str], console: Any) -> None:
    """CPU runs with offload cases: plain copy bandwidth (``runners.copy_bench``) for the report."""
    rt = cfg.get("runtime") or {}
    if str(rt.get("device")) != "cpu" or not any(sc.case.offload_requested for sc in items) \
            or cfg.get("bench_command"):
        return
    from runners.copy_bench import run_copy_bench

    env = {k: v for k, v in base_env.items() if k not in _CONTROLLED_ENV}
    env.update({str(k): str(v) for k, v in (rt.get("env") or {}).items()})
    env["PYTHONPATH"] = str(REPO_ROOT)
    if run_copy_bench(run_dir, model_dir, env, REPO_ROOT) is None:
        console.print("[yellow]offload.bench copy measurement failed; the report has no copy bandwidth[/]")


def _analyze(run_dir: Path, console: Any) -> tuple[Any, bool]:
    """Write ``summary/`` (Markdown, JSON, plots, report.html) and print the decision table, verdict last.

    Analysis errors are shown, not hidden; the full Markdown stays in ``summary/``.

    Returns:
        ``(validation, serving_valid)``: ``summary/validation.json`` as a ``ValidationReport``
        (None when the analysis stack is not installed: the run's verdict is then "not run"),
        and False when the run has serving phases and their validation failed (``analysis.serving``).
    """
    try:
        from analysis.console import print_summary
        from analysis.report import write_summary
    except ImportError as exc:
        console.print(f"[yellow]analysis unavailable ({exc}); run `python -m analysis report {run_dir}` later[/]")
        return None, True
    write_summary(run_dir)
    print_summary(run_dir / "summary", console)
    serving_valid = True
    if any(run_dir.glob("cases/*/*.serving-case.json")):
        from analysis.serving import write_serving_summary

        md = write_serving_summary(run_dir)
        console.print(md, markup=False)
        serving_valid = md.startswith("serving: VALID")
    from results_schema.io import read_json
    from results_schema.models import ValidationReport

    return read_json(run_dir / "summary" / "validation.json", ValidationReport), serving_valid


def _refresh_html(run_dir: Path, console: Any) -> None:
    """Re-render ``summary/report.html`` once the accuracy verifier wrote its report (it runs after)."""
    try:
        from analysis.html_report import write_report_html
    except ImportError:
        return
    path = write_report_html(run_dir)
    console.print(f"report: {path}", markup=False)


# ----------------------------------------------------------------------------- Hydra entry point

_EXIT_CODE = EXIT_OK


def _install_signal_handlers() -> None:
    from runners.launch import install_interrupt_handlers

    install_interrupt_handlers((signal.SIGINT, signal.SIGTERM))  # recorded: never lost inside a fork callback


try:
    import hydra
    from omegaconf import DictConfig

    import conf  # noqa: F401  (registers the structured-config schemas)

    @hydra.main(version_base="1.3", config_path="../conf", config_name="config")
    def hydra_main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        from conf.schema import ConfigError, checked_plain_config

        global _EXIT_CODE
        overrides = list(HydraConfig.get().overrides.task)
        try:
            plain = checked_plain_config(cfg, overrides)
        except ConfigError as exc:
            _console().print(f"[bold red]error:[/] config: {exc}")
            _EXIT_CODE = EXIT_CONFIG
            return
        try:
            _EXIT_CODE = run_matrix(plain, overrides)
        except Exception:  # a bug, not a config error: show it, and keep exit 2 for Hydra's own errors
            import traceback

            traceback.print_exc()
            _EXIT_CODE = EXIT_CASE_FAILURES
except ImportError:  # pragma: no cover - hydra is a core dependency
    hydra_main = None  # type: ignore[assignment]


def main() -> int:
    """Console entry point: ``+pins=FILE`` expansion, then Hydra; compose errors exit 2 (not Hydra's 1)."""
    _install_signal_handlers()
    from runners.pins import PinsError, expand_pins_args

    try:
        sys.argv[1:] = expand_pins_args(sys.argv[1:])
    except PinsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        hydra_main()
    except SystemExit as exc:  # Hydra reports a config / override error (already printed) with exit 1
        if exc.code not in (0, None):
            return EXIT_CONFIG
        raise
    return _EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
