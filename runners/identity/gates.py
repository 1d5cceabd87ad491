"""Identity and health gates of a run: declared pins, model files, offload tree, device health.

What is modelled: the identity gate (``gather_identity``: every declared pin of every runtime
used, observed inside that runtime; the model directory against its ``SHA256SUMS``; the
``offload/`` tree; re-checks without re-hashing the weights), the package versions and
numerics identity reported in the environment manifest, and the health gate (a runtime's
health command, ``runners.identity.health``).

What is deliberately not modelled: when the gates run (``runners.orchestration.stages``) and what the
pins mean (``runners.identity.pin_checks``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from conf.schema import Config, experiment_override, nearest
from conf.schema_stack import ModelConfig, PinsConfig, RuntimeConfig

from results_schema.records.manifest import PinCheck
from runners.config import distinct_runtimes
from runners.errors import EXIT_CONFIG, EXIT_HEALTH, EXIT_IDENTITY, RunnerError
from runners.paths import REPO_ROOT, abs_path
from results_schema.codec.files import file_sha256
from runners.identity.case_code import case_code_sha256
from runners.identity.devices import DeviceError, device_identity
from runners.identity.git_identity import git_identity
from runners.identity.health import health_argv, health_verdict, needs_device
from runners.identity.numerics import numerics_identity
from runners.identity.pin_checks import IdentityError, check_pins, enforce, probe_spec
from runners.identity.probe import package_version, tree_sha256
from runners.identity.published_identity import model_revision, tree_value_for_pin
from runners.identity.runtimes import ProbeError, map_path, own_process, prefixed, probe_runtime
from runners.incase.device_index import device_placeholders
from runners.models.built import BUILT_SOURCES, ensure_built

if TYPE_CHECKING:
    from runners.identity.numerics import ProbeTorch

SCALAR_PINS = ("model.sha256sums_sha256", "model.revision", "offload_tree_sha256")


def resolve_model_dir(model: ModelConfig) -> Path:
    """Model directory: a built model (``tiny``, ``smollm2``) is built (once) and verified; a path must exist.

    Raises:
        RunnerError: (identity) missing or unverifiable model.
    """

    if model.source in BUILT_SOURCES:
        try:
            return ensure_built(model)[0]
        except (OSError, ValueError) as exc:
            raise RunnerError(f"identity gate: {model.source} model cannot be built/verified: {exc}",
                              EXIT_IDENTITY) from None
    path = model.path
    if path in (None, "???"):
        raise RunnerError(f"identity gate: model.path is required for model {model.name!r} "
                          "(declared ???); give model.path=<local dir>", EXIT_IDENTITY)
    d = abs_path(str(path), Path.cwd())
    if not d.is_dir():
        raise RunnerError(f"identity gate: model directory {d} does not exist", EXIT_IDENTITY)
    if not (d / "SHA256SUMS").is_file():
        raise RunnerError(f"identity gate: model directory {d} has no SHA256SUMS manifest", EXIT_IDENTITY)
    return d


@dataclass
class GateObservation:
    """What the identity gate observed, reused for the manifest and later re-checks."""

    checks: list[PinCheck]
    model_dir: Path
    model_sums: str
    offload_tree: str
    model_stat: tuple[tuple[str, int, int], ...]
    runtimes: tuple[RuntimeConfig, ...] = ()
    """The runtimes checked (``runners.config.runtimes_used``, computed once per run); re-checks reuse them."""


def _model_stat(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """``(name, size, mtime_ns)`` of every file listed in ``SHA256SUMS`` (cheap re-check signature)."""
    out = []
    for line in (model_dir / "SHA256SUMS").read_text().splitlines():
        name = line.split(maxsplit=1)[1]
        st = (model_dir / name).stat()
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def required_scalar_pins(cfg: Config) -> dict[str, str | None]:
    """The model / offload-tree pins, with ``???`` for a null one the experiment lists in ``required_pins``.

    Raises:
        RunnerError: (config) ``required_pins`` names something else.
    """
    required = list(cfg.required_pins)
    bad = [r for r in required if r not in SCALAR_PINS]
    if bad:
        raise RunnerError(f"config: required_pins {bad} not allowed{nearest(bad[0], SCALAR_PINS)}; "
                          f"allowed: {list(SCALAR_PINS)}", EXIT_CONFIG)
    values = {"model.sha256sums_sha256": cfg.model.sha256sums_sha256,
              "model.revision": cfg.model.revision, "offload_tree_sha256": cfg.offload_tree_sha256}
    return {k: ("???" if v is None and k in required else v) for k, v in values.items()}


def runtime_checks(runtimes: Sequence[RuntimeConfig], offload_tree: str) -> list[PinCheck]:
    """Pins of every runtime used (``runtimes``: ``runners.config.runtimes_used``), observed inside each runtime
    (``runners.identity.probe``).

    A runtime with its own interpreter or command prefix is probed in a subprocess started
    through it; one without runs the probe in this interpreter (it is the runner's).

    Raises:
        RunnerError: (identity) a runtime's probe cannot run.
    """

    checks: list[PinCheck] = []
    for rt in runtimes:
        pins = rt.pins
        path_of = (lambda p, _rt=rt: map_path(_rt, p))
        observed = None
        if own_process(rt):
            try:
                observed = probe_runtime(rt, probe_spec(pins, path_of))
            except ProbeError as exc:
                raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
        checks += check_pins(pins, model_dir=None, model_pin=None, model_revision=None, observed_revision=None,
                             offload_pin=None, offload_actual=offload_tree, observed=observed, path_of=path_of,
                             runtime=rt.name)
    return checks


def report_packages(runtimes: Sequence[RuntimeConfig]) -> dict[str, str | None]:
    """Versions of every runtime's ``report_packages`` (``runtimes``: ``runners.config.runtimes_used``), observed
    where that runtime runs.

    Keys: the distribution name for a runtime on the runner's interpreter; ``<runtime>/<dist>``
    for a runtime with its own interpreter or command prefix (its probe observed them).

    Raises:
        RunnerError: (identity) a runtime's probe cannot run.
    """

    out: dict[str, str | None] = {}
    for rt in runtimes:
        names = [str(p) for p in rt.report_packages]
        if own_process(rt):
            try:
                seen = probe_runtime(rt, {"packages": names})["packages"]
            except ProbeError as exc:
                raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
            out.update({f"{rt.name}/{n}": seen.get(n) for n in names})
        else:
            out.update({n: package_version(n) for n in names})
    return dict(sorted(out.items()))


def _pin_checks(cfg: Config, runtimes: Sequence[RuntimeConfig], *, when: str, previous: GateObservation | None,
                offload_tree: str) -> tuple[list[PinCheck], Path]:
    """Runtime, model and offload-tree pin checks (enforced) and the model directory.

    Raises:
        IdentityError: a pin failed (every failed pin listed once).
        RunnerError: (identity) the model is missing or its revision unreadable.
    """

    pins_cmd = " ".join(filter(None, ("python -m runners.pins", experiment_override(cfg.experiment_name))))
    hint = (f"Write every observed value with `{pins_cmd} [the same overrides] --out pins.yaml`, check it, "
            "then add `+pins=pins.yaml` to the run's command (docs/real-host.md).")
    checks = runtime_checks(runtimes, offload_tree)
    scalar = required_scalar_pins(cfg)
    try:
        model_dir = resolve_model_dir(cfg.model) if previous is None else previous.model_dir
    except RunnerError as exc:  # list the model problem together with every failed runtime pin
        if any(not c.ok for c in checks):
            enforce(checks, when=when, hint=f"  - {exc}\n{hint}")
        raise
    try:  # REVISION file, else ModelScope's .msc
        observed_rev = model_revision(model_dir)
    except ValueError as exc:
        raise RunnerError(f"identity gate ({when}): model revision: {exc}", EXIT_IDENTITY) from None
    checks += check_pins(PinsConfig(), model_dir=model_dir, model_pin=scalar["model.sha256sums_sha256"],
                         model_revision=scalar["model.revision"], observed_revision=observed_rev,
                         offload_pin=scalar["offload_tree_sha256"],
                         offload_actual=tree_value_for_pin(scalar["offload_tree_sha256"], REPO_ROOT / "offload",
                                                           offload_tree))
    enforce(checks, when=when, hint=hint)
    return checks, model_dir


def _changes(previous: GateObservation, ident: GateObservation) -> list[str]:
    """What differs between the first identity observation and a re-check."""
    pairs = zip(previous.checks, ident.checks, strict=False)
    diffs = [f"pin {c.kind} {c.name!r}: {p.actual!r} -> {c.actual!r}"
             for p, c in pairs if (p.kind, p.name, p.actual) != (c.kind, c.name, c.actual)]
    if ident.offload_tree != previous.offload_tree:
        diffs.append("offload/ tree changed")
    if ident.model_sums != previous.model_sums or ident.model_stat != previous.model_stat:
        diffs.append(f"model files in {ident.model_dir} changed (SHA256SUMS / size / mtime)")
    return diffs


def gather_identity(cfg: Config, runtimes: Sequence[RuntimeConfig], *, when: str,
                    previous: GateObservation | None = None) -> GateObservation:
    """Check every declared pin of every runtime used (``runtimes``: ``runners.config.runtimes_used``, computed
    once per run; a re-check passes ``previous.runtimes``), the model and the offload tree.

    The first call (``previous=None``) verifies every model file against ``SHA256SUMS``
    (full hash). Re-checks (before each phase, at the end) re-evaluate the pins and
    require the observed values, the ``SHA256SUMS`` hash and the model files' size and
    mtime to equal the first observation, without re-hashing the weights.

    Raises:
        RunnerError: (identity) naming the first mismatch.
    """

    offload_tree = tree_sha256(REPO_ROOT / "offload")
    try:
        checks, model_dir = _pin_checks(cfg, runtimes, when=when, previous=previous, offload_tree=offload_tree)
    except IdentityError as exc:
        raise RunnerError(str(exc), EXIT_IDENTITY) from None

    if previous is None and cfg.model.source not in BUILT_SOURCES:  # ensure_built verified a built one
        from runners.models.tiny_model import verify_model_dir

        try:
            verify_model_dir(model_dir)
        except (OSError, ValueError) as exc:
            raise RunnerError(f"identity gate ({when}): model files do not match SHA256SUMS: {exc}",
                              EXIT_IDENTITY) from None
    try:
        ident = GateObservation(checks=checks, model_dir=model_dir, model_sums=file_sha256(model_dir / "SHA256SUMS"),
                                offload_tree=offload_tree, model_stat=_model_stat(model_dir), runtimes=tuple(runtimes))
    except OSError as exc:
        raise RunnerError(f"identity gate ({when}): model files unreadable: {exc}", EXIT_IDENTITY) from None
    if previous is not None and (diffs := _changes(previous, ident)):
        raise RunnerError(f"identity gate ({when}): changed since the run started: {'; '.join(diffs)}",
                          EXIT_IDENTITY)
    return ident


def numerics_of(cfg: Config, probe_torch: ProbeTorch) -> tuple[Any, ...]:
    """``NumericsIdentity`` per runtime the phases' cases run under (CPU ISA, torch / oneDNN, threads, kernel
    path, accelerator): a phase's own runtime, else the run's; distinct by content (a phase runtime may keep
    the run runtime's name with another thread environment). ``probe_torch``: the torch probe
    (``runners.orchestration.host_measures.HostMeasures.probe_torch``)."""

    used = [ph.runtime or cfg.runtime for ph in cfg.phases.values()] or [cfg.runtime]
    out = []
    for rt in reversed(distinct_runtimes(reversed(used))):  # each at its last use, in order
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in rt.env.items()})
        out.append(numerics_identity(device=str(rt.device), python=sys.executable, case_env=env,
                                     cpu_kernel_path=None if rt.cpu_kernel_path is None else str(rt.cpu_kernel_path),
                                     probe_torch=probe_torch))
    return tuple(out)


class NumericsProbe:
    """``numerics_of(cfg)`` computed in a background thread, so its torch probe process (~2 s: it imports
    torch) runs while the runner checks identity and builds the model instead of after them.

    Started by the identity stage before the model build and joined (``result``) before the run
    directory is written; no case process is started meanwhile (cases are forked with a
    ``preexec_fn``, which must not meet another thread), and the thread imports nothing (the
    modules it needs are imported here, in the caller's thread).
    """

    def __init__(self, cfg: Config, probe_torch: ProbeTorch) -> None:
        import threading

        self._result: tuple[Any, ...] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cfg, probe_torch), name="numerics-probe", daemon=True)
        self._thread.start()

    def _run(self, cfg: Config, probe_torch: ProbeTorch) -> None:
        try:
            self._result = numerics_of(cfg, probe_torch)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by result()
            self._error = exc

    def wait(self) -> None:
        """Wait for the probe to end, its value and any error discarded."""
        self._thread.join()

    def result(self) -> tuple[Any, ...]:
        """Wait for the probe; ``numerics_of``'s value, or its exception raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def _run_health_command(runtime: RuntimeConfig, cmd: list[str]) -> tuple[str, int]:
    """Output and exit status of the health command (127: not found, 124: timed out)."""
    import subprocess

    try:
        r = subprocess.run(prefixed(runtime, cmd), capture_output=True, text=True,
                           timeout=runtime.health_timeout_s, check=False)
        return r.stdout + r.stderr, r.returncode
    except FileNotFoundError:
        return f"{cmd[0]}: not found\n", 127
    except subprocess.TimeoutExpired:
        return "health command timed out\n", 124


def health_gate(runtime: RuntimeConfig, out_path: Path) -> None:
    """Run the runtime's health command; save its output; raise ``RunnerError`` (42) when not OK.

    OK = exit 0 and, when ``health_expect`` is set, the output matches it; ``{physical_index}`` /
    ``{chip}`` in the command name the case device (``runners.identity.health``).
    """

    cmd = runtime.health_command
    if not cmd:
        return
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if needs_device(cmd):
        try:
            cmd = health_argv(cmd, device_placeholders(str(runtime.device)))
        except ValueError as exc:
            raise RunnerError(f"health gate for runtime {runtime.name!r}: {exc}", EXIT_HEALTH) from None
    text, rc = _run_health_command(runtime, list(cmd))
    out_path.write_text(f"$ {' '.join(cmd)}\n# exit {rc}\n{text}")
    why = health_verdict(rc, text, runtime.health_expect)
    if why is not None:
        raise RunnerError(f"health gate for runtime {runtime.name!r} failed: `{' '.join(cmd)}` {why} "
                          f"(output in {out_path})", EXIT_HEALTH)


@dataclass(frozen=True)
class RunIdentity:
    """Everything the environment manifest records about the host, beyond the config.

    Attributes:
        gate: the identity gate's first observation.
        devices: ``DeviceIdentity`` per runtime used.
        packages: ``report_packages`` versions.
        git: the repository's ``GitIdentity``.
        case_code: SHA-256 over the case code (``runners.identity.case_code.case_code_sha256``).
        declared_env: names of the environment variables the runtimes declare.
        numerics: ``numerics_of`` of the config as the identity stage measured it (``NumericsProbe``) for a
            new run; None for a resume, which measures none (``create_run_dir`` refuses None).
    """

    gate: GateObservation
    devices: tuple[Any, ...]
    packages: dict[str, str | None]
    git: Any
    case_code: str
    declared_env: tuple[str, ...]
    numerics: tuple[Any, ...] | None = None


def observe_run_identity(identity: GateObservation) -> RunIdentity:
    """Devices, package versions, git and case-code identity of the run (after the identity gate), for the
    runtimes it checked (``identity.runtimes``).

    Raises:
        RunnerError: (identity) a device cannot be identified or a runtime's probe cannot run.
    """

    runtimes = identity.runtimes
    try:
        devices = tuple(device_identity(str(rt.device)) for rt in runtimes)
    except DeviceError as exc:
        raise RunnerError(f"identity gate: {exc}", EXIT_IDENTITY) from None
    packages = report_packages(runtimes)
    return RunIdentity(gate=identity, devices=devices, packages=packages, git=git_identity(),
                       case_code=case_code_sha256(),
                       declared_env=tuple(sorted({str(k) for rt in runtimes for k in rt.env})))
