"""Identity gate: compute what the run is made of and refuse to run on any pin mismatch.

What is modelled: file and tree SHA-256s (a tree hash is the SHA-256 of the
sorted ``<relative path>\\0<file sha256>\\n`` lines, ``__pycache__``/``*.pyc``/``.git``
excluded), installed package versions and trees (the files listed in the
distribution's RECORD), git revision + dirty flag, the pins a runtime declares
(checked in this order: tools, packages, package trees, wheels, source trees,
source commits, files, then model and offload tree), and the environment manifest.

Fail closed: a pin whose value is ``???`` (declared, not provided) is a mismatch,
as is an absent file/package/tool. The first mismatch is named in the error.

What is deliberately not modelled: health gates (``runners.health``), device
mapping (``runners.devices``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from results_schema.manifest import (
    DeviceIdentity,
    EnvironmentManifest,
    GitIdentity,
    ModelIdentity,
    PinCheck,
    REDACTED,
    is_secret_name,
    looks_like_credential,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
MISSING_VALUE = "???"


class IdentityError(RuntimeError):
    """A declared pin does not match (or could not be observed). Stops the run."""

    def __init__(self, message: str, checks: Sequence[PinCheck] = ()) -> None:
        super().__init__(message)
        self.checks = tuple(checks)


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _skip(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in ("__pycache__", ".git") for p in parts) or rel.endswith((".pyc", ".pyo"))


def tree_sha256(root: str | os.PathLike[str], files: Iterable[str] | None = None) -> str:
    """SHA-256 of a file tree (content and relative paths; symlinks followed).

    Args:
        root: directory.
        files: relative paths to include; None = every file under ``root``.

    Raises:
        FileNotFoundError: ``root`` is not a directory.
    """
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{base} is not a directory")
    if files is None:
        rels = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git"))
            for f in filenames:
                rels.append(os.path.relpath(os.path.join(dirpath, f), base).replace(os.sep, "/"))
    else:
        rels = list(files)
    h = hashlib.sha256()
    for rel in sorted(r for r in rels if not _skip(r)):
        p = base / rel
        if p.is_file():
            h.update(f"{rel}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()


def package_version(dist: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def package_tree_sha256(dist: str) -> str | None:
    """Tree hash over the files a distribution's RECORD lists (None if not installed)."""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(d.locate_file("")))
    rels = [str(f).replace(os.sep, "/") for f in (d.files or ()) if not str(f).startswith("..")]
    return tree_sha256(root, rels)


def git_identity(repo: Path = REPO_ROOT) -> GitIdentity:
    """Revision and dirty flag of ``repo`` (``unborn`` before the first commit)."""
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    revision = rev.stdout.strip() if rev.returncode == 0 else "unborn"
    st = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                        check=False)
    if st.returncode != 0:
        raise IdentityError(f"git status failed in {repo}: {st.stderr.strip()}")
    return GitIdentity(revision=revision, dirty=bool(st.stdout.strip()))


def git_commit(path: str) -> str | None:
    r = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


RECORDED_ENV_PREFIXES = ("VLLM_", "OMP_", "CUDA_", "ASCEND_", "HCCL_", "PYTORCH_", "TORCH_", "NCCL_", "OFFLOAD_",
                         "MKL_", "KMP_")
"""Environment variables with these prefixes affect a run (vLLM, OpenMP, CUDA/CANN/HCCL/NCCL, PyTorch,
this project's ``OFFLOAD_*``, MKL/KMP threading) and are recorded."""
RECORDED_ENV_NAMES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
                      "PYTHONPATH", "PYTHONHASHSEED",
                      "PYTHONUNBUFFERED", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "DO_NOT_TRACK")
"""Single variables recorded besides the prefixes."""


def recordable_env(env: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    """The part of ``env`` written to a run directory (manifest, case log header).

    Only what affects a run is kept: names with a ``RECORDED_ENV_PREFIXES`` prefix, the
    ``RECORDED_ENV_NAMES``, and ``declared`` (the runtime's ``env`` keys). A kept name
    that looks secret (``is_secret_name``: TOKEN, KEY, SECRET, ...) is dropped; a kept
    value that looks like a credential (``looks_like_credential``: ``ghp_``, ``hf_``,
    ``sk-``, ``AKIA``, JWT, URL with ``user:password@``) is replaced by ``REDACTED``.

    Returns:
        ``{name: value}`` sorted by name.
    """
    allowed = set(RECORDED_ENV_NAMES) | {str(d) for d in declared}
    out = {}
    for k, v in sorted(env.items()):
        if not (k.startswith(RECORDED_ENV_PREFIXES) or k in allowed) or is_secret_name(k):
            continue
        out[k] = REDACTED if looks_like_credential(str(v)) else str(v)
    return out


def filter_environment(env: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    """The environment as recorded in the manifest (``recordable_env``)."""
    return recordable_env(env, declared)


def _version_ok(expected: str, actual: str | None) -> bool:
    if actual is None:
        return False
    spec = expected.strip()
    if spec and spec[0] in "=<>!~":
        try:
            return Version(actual) in SpecifierSet(spec)
        except (InvalidSpecifier, InvalidVersion):
            return False
    return actual == spec


def _declared(value: Any) -> str:
    return MISSING_VALUE if value is None else str(value)


def check_pins(pins: Mapping[str, Any], *, model_dir: Path | None, model_pin: str | None, model_revision: str | None,
               observed_revision: str | None, offload_pin: str | None, offload_actual: str) -> list[PinCheck]:
    """Evaluate every declared pin, in the documented order.

    Args:
        pins: a ``PinsConfig`` as a plain dict (``???`` values = declared, not provided).
        model_dir: model directory (None when it does not exist).
        model_pin: declared SHA-256 of the model's SHA256SUMS; None = not pinned.
        model_revision: declared model revision; None = not pinned.
        observed_revision: revision recorded next to the model (``REVISION`` file), if any.
        offload_pin: declared ``offload/`` tree hash; None = not pinned.
        offload_actual: observed ``offload/`` tree hash.

    Returns:
        One ``PinCheck`` per declared pin.
    """
    out: list[PinCheck] = []
    for tool in pins.get("tools", ()) or ():
        found = shutil.which(tool)
        out.append(PinCheck(kind="tool", name=tool, expected="on PATH", actual=found, ok=found is not None))
    for dist, spec in (pins.get("packages") or {}).items():
        actual = package_version(dist)
        ok = spec != MISSING_VALUE and _version_ok(str(spec), actual)
        out.append(PinCheck(kind="package", name=dist, expected=_declared(spec), actual=actual, ok=ok))
    for dist, digest in (pins.get("package_trees") or {}).items():
        actual = package_tree_sha256(dist)
        out.append(PinCheck(kind="package_tree", name=dist, expected=_declared(digest), actual=actual,
                            ok=digest != MISSING_VALUE and actual == digest))
    for path, digest in (pins.get("wheels") or {}).items():
        actual = sha256_file(path) if Path(path).is_file() else None
        out.append(PinCheck(kind="wheel", name=path, expected=_declared(digest), actual=actual,
                            ok=digest != MISSING_VALUE and actual == digest))
    for path, digest in (pins.get("source_trees") or {}).items():
        actual = tree_sha256(path) if Path(path).is_dir() else None
        out.append(PinCheck(kind="source_tree", name=path, expected=_declared(digest), actual=actual,
                            ok=digest != MISSING_VALUE and actual == digest))
    for path, commit in (pins.get("source_commits") or {}).items():
        actual = git_commit(path) if Path(path).is_dir() else None
        out.append(PinCheck(kind="source_commit", name=path, expected=_declared(commit), actual=actual,
                            ok=commit != MISSING_VALUE and actual == commit))
    for path, digest in (pins.get("files") or {}).items():
        actual = sha256_file(path) if Path(path).is_file() else None
        out.append(PinCheck(kind="file", name=path, expected=_declared(digest), actual=actual,
                            ok=digest != MISSING_VALUE and actual == digest))
    if model_pin is not None:
        sums = model_dir / "SHA256SUMS" if model_dir is not None else None
        actual = sha256_file(sums) if sums is not None and sums.is_file() else None
        out.append(PinCheck(kind="model_sha256sums", name="model", expected=model_pin, actual=actual,
                            ok=model_pin != MISSING_VALUE and actual == model_pin))
    if model_revision is not None:
        out.append(PinCheck(kind="model_revision", name="model", expected=model_revision, actual=observed_revision,
                            ok=model_revision != MISSING_VALUE and observed_revision == model_revision))
    if offload_pin is not None:
        out.append(PinCheck(kind="offload_tree", name="offload", expected=offload_pin, actual=offload_actual,
                            ok=offload_pin != MISSING_VALUE and offload_actual == offload_pin))
    return out


def describe_failure(check: PinCheck) -> str:
    """One actionable sentence naming what differs."""
    if check.kind == "tool":
        return f"required tool {check.name!r} is not on PATH"
    if check.expected == MISSING_VALUE:
        return (f"pin {check.kind} {check.name!r} is declared but has no value (???); observed "
                f"{check.actual!r}. Provide it as an override to run (fail closed)")
    if check.actual is None:
        return f"pin {check.kind} {check.name!r}: expected {check.expected!r}, but it is missing on this machine"
    return f"pin {check.kind} {check.name!r}: expected {check.expected!r}, observed {check.actual!r}"


def enforce(checks: Sequence[PinCheck], *, when: str) -> None:
    """Raise ``IdentityError`` naming the first failed pin (and the other failed pins, each once).

    Runtimes that share pins (e.g. two phases on the same stack) yield the same check
    twice; the message lists each ``kind:name`` once.
    """
    bad = [c for c in checks if not c.ok]
    if bad:
        first = f"{bad[0].kind}:{bad[0].name}"
        others = [n for n in dict.fromkeys(f"{c.kind}:{c.name}" for c in bad[1:]) if n != first]
        more = f" (+{len(others)} more: {', '.join(others)})" if others else ""
        raise IdentityError(f"identity gate ({when}): {describe_failure(bad[0])}{more}", checks)


CASE_CODE_DIRS = ("offload", "runners", "results_schema")


def case_code_sha256(repo: Path = REPO_ROOT) -> str:
    """Tree hash over the sources that run inside case processes (see ``CASE_CODE_DIRS``)."""
    h = hashlib.sha256()
    for d in CASE_CODE_DIRS:
        h.update(f"{d}\0{tree_sha256(repo / d)}\n".encode())
    return h.hexdigest()


def config_sha256(config: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a resolved config."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def build_manifest(*, run_id: str, experiment: str, packages: Sequence[str], checks: Sequence[PinCheck],
                   model: ModelIdentity, offload_tree: str, devices: Sequence[DeviceIdentity],
                   config: Mapping[str, Any], overrides: Sequence[str], case_code: str,
                   git: GitIdentity | None = None,
                   env: Mapping[str, str] | None = None, declared_env: Iterable[str] = ()) -> EnvironmentManifest:
    """Assemble the environment manifest (environment restricted by ``recordable_env``)."""
    return EnvironmentManifest(
        run_id=run_id, experiment=experiment,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        hostname=socket.gethostname(), python_version=sys.version, platform=platform.platform(),
        git=git or git_identity(), packages={p: package_version(p) for p in packages}, pins=tuple(checks),
        model=model, offload_tree_sha256=offload_tree, case_code_sha256=case_code, devices=tuple(devices), config_sha256=config_sha256(config),
        config=dict(config), overrides=tuple(overrides),
        environment=filter_environment(os.environ if env is None else env, declared_env),
    )
