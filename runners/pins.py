"""``python -m runners.pins [+experiment=NAME] [overrides...] [--out FILE]``: observe every pin on this host.

Composes and plans the experiment exactly as ``runners.matrix`` does (``runners.orchestration.stages.make_plan``),
runs ``runners.identity.probe`` inside each runtime it uses (the runtime's interpreter behind its command prefix,
see ``runners.identity.runtimes``), hashes the model's ``SHA256SUMS`` / reads its ``REVISION`` and the ``offload/``
tree, and writes a YAML file::

    overrides:          # Hydra overrides, one per observed pin, in the runner's grammar
      - runtime.pins.packages.torch-npu='2.5.1'
      - runtime.pins.files={/usr/local/Ascend/driver/version.info:'9f2c...'}
      - phases.native.runtime.pins.source_commits={/opt/vllm-ascend-v0.18.0:'1a2b...'}
      - model.sha256sums_sha256='...'
    not_found:          # declared pins with nothing observed: they stay fail closed
      - {key: ..., pin: ..., reason: ...}
    mismatched:         # declared values the host does not satisfy: not overridden
      - {key: ..., expected: ..., observed: ...}

The runner reads it with the same overrides and ``+pins=FILE`` (the command ``runners.pins`` prints last): the
file's overrides are inserted where ``+pins=FILE`` stands, so overrides given after it win. Rules: a declared
value (``==0.23.*``) is replaced by the observed exact value only when the observation satisfies it; a mismatch is
listed, never overridden; a tool is only checked (no value), as is ``package_wheels`` (the declared wheel path is
kept; an installed tree that differs from the wheel is listed under ``mismatched`` with the first differing
files); a ``source_trees`` value written ``sha256sum:<hex>`` is observed in that published format; a pin the
experiment does not declare is not written (undeclared stays unchecked, declared-but-missing stays ``???`` and
fails closed).

Exit codes (``runners.errors.EXIT_MEANINGS``): ``EXIT_OK`` every declared pin observed; ``EXIT_IO`` the file
cannot be written (a full disk, a permission); ``EXIT_IDENTITY`` some
pin not found or mismatched (the file is still written); ``EXIT_CONFIG`` bad arguments or config (one line, no
traceback).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from conf.schema import Config
from conf.schema_stack import ModelConfig, RuntimeConfig
from runners.errors import EXIT_CONFIG, EXIT_IDENTITY, EXIT_IO, EXIT_OK, os_error_text
from runners.identity.pins_file import PinsError, expand_pins_args
from runners.identity.probe import Observation
from conf.schema import ConfigError
from conf.typed import load_config
from runners.compose_check import compose_checked
from runners.errors import RunnerError
from runners.identity.gates import required_scalar_pins
from runners.identity.pin_checks import (MISSING_VALUE, declared_pins, observed_field, observed_values,
    package_wheel_check, probe_spec, version_ok)
from runners.identity.probe import observe, sha256_file, tree_sha256
from runners.identity.published_identity import msc_revision
from runners.identity.runtimes import ProbeError, interpreter_argv, map_path, own_process, probe_runtime
from runners.models.built import BUILT_SOURCES
from runners.orchestration.path_checks import output_file_problem
from runners.orchestration.stages import make_plan
from runners.paths import REPO_ROOT, abs_path as _abs

_FIELDS = (("packages", "package"), ("package_trees", "package_tree"), ("wheels", "wheel"),
           ("source_trees", "source_tree"), ("source_commits", "source_commit"), ("files", "file"))
_PATH_FIELDS = ("wheels", "source_trees", "source_commits", "files")


def _q(value: str) -> str:
    """A Hydra override value quoted as a string (versions like ``1.10`` and hashes like ``1e5...``
    would otherwise parse as floats)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def override_for(location: str, field: str, name: str, value: str) -> str:
    """One Hydra override setting a pin: dotted key for names, dict form for paths.

    Path keys cannot be written as dotted keys (``/`` is not allowed there), so a path pin
    is merged into its dict: ``runtime.pins.files={/usr/local/x.cfg:'<sha>'}``. ``source_trees`` is
    merged with ``++``: it may name a tree declared only after composition (an overlay source root,
    ``conf.typed.declare_overlay_pins``), which a plain ``=`` merge refuses as an unknown key.
    """
    if field in _PATH_FIELDS:
        force = "++" if field == "source_trees" else ""
        return f"{force}{location}.pins.{field}={{{name}:{_q(value)}}}"
    return f"{location}.pins.{field}.{name}={_q(value)}"


def runtime_locations(cfg: Config) -> list[tuple[str, RuntimeConfig]]:
    """``(override prefix, runtime)`` of the run's runtime and every phase's own runtime."""
    out = [("runtime", cfg.runtime)]
    for name, ph in cfg.phases.items():
        if ph.runtime is not None:
            out.append((f"phases.{name}.runtime", ph.runtime))
    return out


@dataclass
class _Found:
    """What ``observe_all`` collects: overrides for observed pins, pins not found, pins mismatched."""

    overrides: list[str] = field(default_factory=list)
    not_found: list[dict[str, str]] = field(default_factory=list)
    mismatched: list[dict[str, str]] = field(default_factory=list)

    def pin(self, key: str, pin: str, declared: Any, actual: str, override: str) -> None:
        """``override`` when ``actual`` satisfies ``declared`` (``???`` or equal), else a mismatch."""

        if declared not in (MISSING_VALUE, actual):
            self.mismatched.append({"key": key, "pin": pin, "expected": str(declared), "observed": actual})
        else:
            self.overrides.append(override)


def _observe_runtime(loc: str, rt: RuntimeConfig, found: _Found) -> dict[str, Any]:
    """Observe the pins of one runtime (in its own interpreter when it has one); returns how it was probed."""

    pins = rt.pins
    path_of = (lambda p, _rt=rt: map_path(_rt, p))
    spec = probe_spec(pins, path_of)
    obs = probe_runtime(rt, spec) if own_process(rt) else observe(spec)
    for tool in pins.tools:
        if not obs["tools"].get(tool):
            found.not_found.append({"key": f"{loc}.pins.tools", "pin": str(tool), "reason": "not on PATH"})
    for fld, kind in _FIELDS:
        for name, declared in declared_pins(pins, fld).items():
            key = path_of(str(name)) if fld in _PATH_FIELDS else str(name)
            actual = observed_values(obs, observed_field(fld, declared)).get(key)  # sha256sum:<hex> source trees
            where = f" (read at {key})" if key != str(name) else ""
            if actual is None:
                found.not_found.append({"key": f"{loc}.pins.{fld}", "pin": str(name),
                                        "reason": f"{kind} not found in runtime {rt.name!r}{where}"})
                continue
            declared = str(declared)
            ok = (declared == MISSING_VALUE or (version_ok(declared, str(actual)) if fld == "packages"
                                                else declared == str(actual)))
            if not ok:
                found.mismatched.append({"key": f"{loc}.pins.{fld}", "pin": str(name), "expected": declared,
                                         "observed": str(actual)})
                continue
            found.overrides.append(override_for(loc, fld, str(name), str(actual)))
    _observe_package_wheels(loc, rt, obs, path_of, found)
    return {"name": rt.name, "interpreter": " ".join(interpreter_argv(rt)),
            "python": obs["python"], "python_version": obs["python_version"]}


def _observe_package_wheels(loc: str, rt: RuntimeConfig, obs: Observation, path_of: Any,
                            found: _Found) -> None:
    """``package_wheels``: the installed package files against the declared wheel (``runners.identity.probe``).

    The declared wheel path is kept (written back when the trees agree); a difference is listed under
    ``mismatched`` naming the first differing files, a missing wheel or distribution under ``not_found``.
    """

    key = f"{loc}.pins.package_wheels"
    for dist, wheel in rt.pins.package_wheels.items():
        seen = obs["package_wheels"].get(f"{dist}={path_of(str(wheel))}")
        check = package_wheel_check(str(dist), str(wheel), seen, rt.name)
        if wheel == MISSING_VALUE or check.actual is None:
            found.not_found.append({"key": key, "pin": str(dist), "reason": check.detail or
                                    "declared without a wheel path (give the wheel it was installed from)"})
        elif not check.ok:
            found.mismatched.append({"key": key, "pin": str(dist), "expected": check.expected,
                                     "observed": f"{check.actual} ({check.detail})"})
        else:
            found.overrides.append(override_for(loc, "package_wheels", str(dist), str(wheel)))


def _model_dir(model: ModelConfig, scalar: Mapping[str, Any]) -> Path | None:
    """The model directory whose ``SHA256SUMS`` / ``REVISION`` are observed (None: ``model.path`` not given)."""

    path = model.path
    declared = any(scalar[k] is not None for k in ("model.sha256sums_sha256", "model.revision"))

    if model.source in BUILT_SOURCES and declared:
        from runners.identity.gates import resolve_model_dir

        return resolve_model_dir(model)  # built (once) and verified, as the run will
    return None if path in (None, MISSING_VALUE) else _abs(str(path), Path.cwd())


def _observe_msc_revision(key: str, declared: Any, mdir: Path, found: _Found) -> bool:
    """``model.revision`` from ModelScope's ``.msc`` index when there is no ``REVISION``; False: no index."""

    try:
        msc = msc_revision(mdir)  # ModelScope's .msc index
    except ValueError as exc:
        found.not_found.append({"key": key, "pin": ".msc", "reason": str(exc)})
        return True
    if msc is None:
        return False
    found.pin(key, ".msc", declared, msc, f"{key}={_q(msc)}")
    return True


def _observe_model(cfg: Config, scalar: Mapping[str, Any], found: _Found) -> None:
    """Observe ``model.sha256sums_sha256`` and ``model.revision`` where the experiment declares them."""

    mdir = _model_dir(cfg.model, scalar)
    for key, fname in (("model.sha256sums_sha256", "SHA256SUMS"), ("model.revision", "REVISION")):
        declared = scalar[key]
        if declared is None:
            continue
        f = mdir / fname if mdir is not None else None
        if fname == "REVISION" and mdir is not None and not (mdir / "REVISION").is_file():
            if _observe_msc_revision(key, declared, mdir, found):
                continue
        if f is None or not f.is_file():
            why = f"{fname} missing in {mdir}" if mdir is not None else "model.path not given"
            if fname == "REVISION" and mdir is not None:
                why += " (write it: python -m runners.identity.model_manifest DIR --revision REV --force)"
            found.not_found.append({"key": key, "pin": fname, "reason": why})
            continue
        actual = sha256_file(f) if fname == "SHA256SUMS" else f.read_text().strip()
        found.pin(key, fname, declared, actual, f"{key}={_q(actual)}")


def observe_all(cfg: Config) -> dict[str, Any]:
    """Observe every declared pin of the composed config.

    Returns:
        ``{"overrides": [...], "not_found": [...], "mismatched": [...], "runtimes": {...}}``.

    Raises:
        runners.identity.runtimes.ProbeError: a runtime's interpreter cannot run the probe.
    """

    found = _Found()
    runtimes = {loc: _observe_runtime(loc, rt, found) for loc, rt in runtime_locations(cfg)}

    scalar = required_scalar_pins(cfg)
    _observe_model(cfg, scalar, found)
    if scalar["offload_tree_sha256"] is not None:
        from runners.identity.published_identity import tree_value_for_pin

        declared = str(scalar["offload_tree_sha256"])
        actual = tree_value_for_pin(declared, REPO_ROOT / "offload", tree_sha256(REPO_ROOT / "offload"))
        found.pin("offload_tree_sha256", "offload/", declared, actual, f"offload_tree_sha256={_q(actual)}")
    return {"overrides": found.overrides, "not_found": found.not_found, "mismatched": found.mismatched,
            "runtimes": runtimes}


def matrix_command(overrides: Sequence[str], pins_file: str) -> str:
    """The ``runners.matrix`` command of what was observed: the same overrides (an older ``+pins=`` left out),
    then ``+pins=<pins_file>``."""
    import shlex

    kept = [o for o in overrides if not o.startswith(("+pins=", "pins="))]
    return shlex.join(["python", "-m", "runners.matrix", *kept, f"+pins={pins_file}"])


def render(result: Mapping[str, Any], *, overrides: Sequence[str], argv: Sequence[str]) -> str:
    """The pins file text (YAML with a comment header)."""
    import yaml

    head = [f"# Pins observed {datetime.now(timezone.utc).isoformat(timespec='seconds')} by",
            f"#   python -m runners.pins {' '.join(argv)}",
            f"# Use: {matrix_command(overrides, '<this file>')}",
            "# Check every value before a formal run: these are what this host has, not what it should have."]
    if result["not_found"] or result["mismatched"]:
        head.append("# NOT COMPLETE: pins under not_found / mismatched still fail the identity gate.")
    body = yaml.safe_dump({k: result[k] for k in ("overrides", "not_found", "mismatched", "runtimes")},
                          sort_keys=False, width=200)
    return "\n".join(head) + "\n" + body


def compose(overrides: Sequence[str]) -> Config:
    """Compose ``conf`` with ``overrides`` and type it exactly as ``runners.matrix`` does (``conf.typed.load_config``).

    Raises:
        PinsError: the overrides do not compose, select a schema entry, add an unknown key (``+phases.same_runtime.
            repeatz=2``) or give a value of the wrong type: one line naming the key, the nearest real one and the
            allowed ones (``runners.compose_check``, ``conf.schema``).
    """

    try:
        return load_config(compose_checked(overrides), overrides)
    except ConfigError as exc:
        raise PinsError(f"config: {exc}") from None


def _split_args(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(--out FILE or None, Hydra overrides)``.

    Raises:
        PinsError: ``--out`` without a file name, or an unknown option.
    """
    out: str | None = None
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "--out":
            out = next(it, None)
            if out is None:
                raise PinsError("--out needs a file name")
        elif a.startswith("--out="):
            out = a.split("=", 1)[1]
        elif a.startswith("-"):
            raise PinsError(f"unknown option {a!r} (allowed: --out FILE, -h; everything else is a Hydra override)")
        else:
            rest.append(a)
    return out, rest


def _report(result: Mapping[str, Any], path: Path, overrides: Sequence[str]) -> int:
    """Print what was written and what is missing; the exit code (0 complete, 3 incomplete)."""
    for loc, r in result["runtimes"].items():
        print(f"{loc}: {r['name']} via `{r['interpreter']}` (Python {r['python_version']})")
    print(f"wrote {len(result['overrides'])} pin override(s) to {path}")
    for nf in result["not_found"]:
        print(f"  NOT FOUND {nf['key']} {nf['pin']}: {nf['reason']}")
    for mm in result["mismatched"]:
        print(f"  MISMATCH {mm['key']} {mm['pin']}: declared {mm['expected']!r}, observed {mm['observed']!r}")
    if result["not_found"] or result["mismatched"]:
        print(f"incomplete: {len(result['not_found'])} not found, {len(result['mismatched'])} mismatched; "
              "the identity gate will refuse these until they are fixed or given")
        return EXIT_IDENTITY
    print(f"next: {matrix_command(overrides, str(path))}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.pins``: exit 0 every pin observed, 3 some not found/mismatched, 2 bad arguments."""

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return EXIT_OK
    try:
        out, rest = _split_args(args)
        overrides = expand_pins_args(rest)
        cfg = compose(overrides)
        make_plan(cfg, overrides)  # what runners.matrix refuses before any process (repeats=-2): refused here too
        path = Path(out or f"pins-{cfg.experiment_name}.yaml")
        if (problem := output_file_problem(path)) is not None:
            raise PinsError(f"--out {path}: {problem}")
        result = observe_all(cfg)
    except RunnerError as exc:  # a config the plan refuses, a model the gate cannot read
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (PinsError, ProbeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(exc, PinsError) else EXIT_IDENTITY
    text = render(result, overrides=rest, argv=args)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:  # a full disk, a permission: one line, the I/O exit code
        print(f"error: --out {path}: cannot write it: {os_error_text(exc, path)}", file=sys.stderr)
        return EXIT_IO
    return _report(result, path, rest)


if __name__ == "__main__":
    sys.exit(main())
