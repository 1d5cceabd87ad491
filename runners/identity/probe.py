"""Pin probe: observe, inside one runtime, the values its identity pins talk about.

Run by the identity gate and by ``python -m runners.pins`` with the runtime's own
interpreter (``runtime.python``) behind its command prefix (``runtime.command_prefix``,
e.g. ``docker exec -i ctr``), so that versions, package trees, files and tools are
observed where the cases will run, not in the runner's environment::

    <prefix...> <python> -m runners.identity.probe '<json spec>'

The spec names what to observe: ``{"tools": [...], "packages": [...],
"package_trees": [...], "wheels": [...], "source_trees": [...], "source_trees_sha256sum":
[...], "source_commits": [...], "files": [...], "package_wheels": ["<dist>=<wheel>", ...]}`` (paths as
they exist inside the runtime; ``source_trees_sha256sum`` are the source trees pinned in the
published format; ``package_wheels`` compares an installed distribution with its wheel,
``wheel_vs_installed``). The probe prints
one line ``PIN_PROBE <json>`` with the same keys mapping each name to the observed
value (``null`` = absent) plus ``python`` (``sys.executable``) and
``python_version``, and exits 0; a malformed spec exits 2 with one line on stderr.

Standard library only (the runtime's interpreter needs nothing of this project but
the source tree on ``PYTHONPATH``); runs on Python >= 3.8.

Hash definitions (shared with ``runners.identity.pin_checks``): a file hash is the SHA-256 of
its bytes; a tree hash is the SHA-256 of the sorted ``<relative path>\\0<file
sha256>\\n`` lines, ``__pycache__``/``*.pyc``/``*.pyo``/``.git`` excluded, symlinks
followed; a package tree hashes the files its distribution's ``RECORD`` lists. The published
tree hash (``sha256sum_tree``, observed as ``sha256sum:<hex>``) is the SHA-256 of the byte-sorted
``sha256sum`` lines (``<sha256>  ./<relative path>``) of every regular file, ``__pycache__`` and
``*.pyc``/``*.pyo`` excluded, symlinks not followed: ``find . -type f ! -path '*/__pycache__/*'
! -name '*.py[co]' -print0 | xargs -0 sha256sum | LC_ALL=C sort | sha256sum``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, TypedDict, cast

PROBE_PREFIX = "PIN_PROBE "
SPEC_KEYS = ("tools", "packages", "package_trees", "wheels", "package_wheels", "source_trees",
             "source_trees_sha256sum", "source_commits", "files")


class WheelComparison(TypedDict):
    """``wheel_vs_installed`` of one distribution (see there)."""

    wheel: str
    installed: str
    files: int
    differing: List[str]
    differing_count: int


class Observation(TypedDict):
    """What the probe prints: each ``SPEC_KEYS`` entry (name -> observed value, None = absent; every key
    present, empty when not asked) plus the interpreter that observed it."""

    python: str
    python_version: str
    tools: Dict[str, Optional[str]]
    packages: Dict[str, Optional[str]]
    package_trees: Dict[str, Optional[str]]
    wheels: Dict[str, Optional[str]]
    package_wheels: Dict[str, Optional[WheelComparison]]
    source_trees: Dict[str, Optional[str]]
    source_trees_sha256sum: Dict[str, Optional[str]]
    source_commits: Dict[str, Optional[str]]
    files: Dict[str, Optional[str]]


PUBLISHED_PREFIX = "sha256sum:"
"""Prefix of a tree pin in the published format (``sha256sum:<hex>``; a bare hex is the project's tree hash)."""


def sha256_file(path: "str | os.PathLike[str]", chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        block = fh.read(chunk)
        while block:
            h.update(block)
            block = fh.read(chunk)
    return h.hexdigest()


def _skip(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in ("__pycache__", ".git") for p in parts) or rel.endswith((".pyc", ".pyo"))


def tree_sha256(root: "str | os.PathLike[str]", files: Optional[Iterable[str]] = None) -> str:
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
    return _tree_digest({rel: sha256_file(base / rel) for rel in rels if not _skip(rel) and (base / rel).is_file()})


def _tree_digest(files: Dict[str, str]) -> str:
    """The tree hash of ``{relative path: file sha256}``: SHA-256 of the sorted ``<rel>\\0<sha256>\\n`` lines."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def sha256sum_lines(root: "str | os.PathLike[str]") -> List[str]:
    """The byte-sorted ``<sha256>  ./<relative path>\\n`` lines of the published tree hash (see the module docstring).

    Raises:
        FileNotFoundError: ``root`` is not a directory.
    """
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{base} is not a directory")
    lines = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            p = Path(dirpath) / f
            if f.endswith((".pyc", ".pyo")) or p.is_symlink() or not p.is_file():  # find -type f
                continue
            rel = os.path.relpath(p, base).replace(os.sep, "/")
            lines.append(f"{sha256_file(p)}  ./{rel}\n")
    return sorted(lines, key=lambda s: s.encode())


def sha256sum_tree(root: "str | os.PathLike[str]") -> str:
    """SHA-256 (hex) of ``sha256sum_lines(root)`` joined: the published tree hash (raises as ``sha256sum_lines``)."""
    return hashlib.sha256("".join(sha256sum_lines(root)).encode()).hexdigest()


def package_version(dist: str) -> Optional[str]:
    """Installed version of a distribution, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def package_tree_sha256(dist: str) -> Optional[str]:
    """Tree hash over the files a distribution's RECORD lists (None if not installed)."""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(d.locate_file("")))
    rels = [str(f).replace(os.sep, "/") for f in (d.files or ()) if not str(f).startswith("..")]
    return tree_sha256(root, rels)


def _package_rel(rel: str) -> Optional[str]:
    """A wheel member / RECORD path as installed under site-packages, None when it is not a package file.

    Not package files: the ``*.dist-info/`` directory (the installer rewrites RECORD and adds INSTALLER,
    REQUESTED, direct_url.json), ``*.data/`` other than ``purelib`` / ``platlib`` (scripts, headers, data
    installed outside site-packages), paths outside site-packages (``../``) and caches.
    """
    rel = rel.replace(os.sep, "/")
    top, _, rest = rel.partition("/")
    if top.endswith(".dist-info") or rel.startswith("..") or rel.endswith("/") or _skip(rel):
        return None
    if top.endswith(".data"):
        kind, _, inner = rest.partition("/")
        return inner if kind in ("purelib", "platlib") and inner and not _skip(inner) else None
    return rel


def _wheel_files(wheel: str) -> Dict[str, str]:
    """``{installed relative path: sha256}`` of a wheel's package files (raises ``zipfile.BadZipFile`` / ``OSError``)."""
    out: Dict[str, str] = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            rel = _package_rel(info.filename)
            if rel is None:
                continue
            h = hashlib.sha256()
            with z.open(info) as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            out[rel] = h.hexdigest()
    return out


def _differences(wheel: Dict[str, str], installed: Dict[str, Optional[str]]) -> List[str]:
    out = []
    for rel in sorted(set(wheel) | set(installed)):
        if rel not in installed:
            out.append(f"{rel} (only in the wheel)")
        elif installed[rel] is None:
            out.append(f"{rel} (in RECORD, missing on disk)")
        elif rel not in wheel:
            out.append(f"{rel} (installed, not in the wheel)")
        elif installed[rel] != wheel[rel]:
            out.append(f"{rel} (content differs)")
    return out


def wheel_vs_installed(entry: str) -> Optional[WheelComparison]:
    """Compare an installed distribution's package files with the wheel it should come from.

    Args:
        entry: ``<distribution>=<wheel path>``.

    Returns:
        None when the distribution is not installed or the wheel is not a readable zip file; else
        ``{"wheel": tree hash of the wheel's package files, "installed": tree hash of the RECORD's package
        files, "files": files compared, "differing": the first 10 differing paths with why,
        "differing_count": n}``. Package files: see ``_package_rel``; both hashes as ``tree_sha256``.
    """
    dist, _, wheel = entry.partition("=")
    try:
        d = metadata.distribution(dist)
        wheel_files = _wheel_files(wheel)
    except (metadata.PackageNotFoundError, zipfile.BadZipFile, OSError):
        return None
    root = Path(str(d.locate_file("")))
    installed: Dict[str, Optional[str]] = {}
    for f in d.files or ():
        rel = _package_rel(str(f))
        if rel is not None:
            installed[rel] = sha256_file(root / rel) if (root / rel).is_file() else None
    diff = _differences(wheel_files, installed)
    return WheelComparison(wheel=_tree_digest(wheel_files),
                           installed=_tree_digest({k: v or "" for k, v in installed.items()}),
                           files=len(set(wheel_files) | set(installed)), differing=diff[:10], differing_count=len(diff))


def git_commit(path: str) -> Optional[str]:
    """``git rev-parse HEAD`` of a checkout (None when not a git checkout or git is absent)."""
    try:
        r = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _file(path: str) -> Optional[str]:
    return sha256_file(path) if Path(path).is_file() else None


def _tree(path: str) -> Optional[str]:
    return tree_sha256(path) if Path(path).is_dir() else None


def _published_tree(path: str) -> Optional[str]:
    return PUBLISHED_PREFIX + sha256sum_tree(path) if Path(path).is_dir() else None


def _commit(path: str) -> Optional[str]:
    return git_commit(path) if Path(path).is_dir() else None


_OBSERVERS: Dict[str, Callable[[str], Any]] = {
    "tools": shutil.which,
    "packages": package_version,
    "package_trees": package_tree_sha256,
    "wheels": _file,
    "package_wheels": wheel_vs_installed,
    "source_trees": _tree,
    "source_trees_sha256sum": _published_tree,
    "source_commits": _commit,
    "files": _file,
}


def observe(spec: Dict[str, List[str]]) -> Observation:
    """Observe every name of ``spec`` in this interpreter (see the module docstring).

    Raises:
        ValueError: unknown key or a value that is not a list of strings.
    """
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"unknown probe keys {unknown}; allowed: {list(SPEC_KEYS)}")
    out: Dict[str, Any] = {"python": sys.executable, "python_version": sys.version.split()[0]}
    for key in SPEC_KEYS:
        names = spec.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"probe key {key!r} must be a list of strings, got {names!r}")
        out[key] = {n: _OBSERVERS[key](n) for n in names}
    return cast(Observation, out)


def parse_probe_output(text: str) -> Observation:
    """The observations from a probe's stdout (the last ``PIN_PROBE`` line).

    Raises:
        ValueError: no ``PIN_PROBE`` line, it is not JSON, or it lacks a key of ``Observation``.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith(PROBE_PREFIX)]
    if not lines:
        raise ValueError("the probe printed no PIN_PROBE line")
    data = json.loads(lines[-1][len(PROBE_PREFIX):])
    missing = sorted(set(Observation.__annotations__) - set(data)) if isinstance(data, dict) else ["(not an object)"]
    if missing:
        raise ValueError(f"the probe's PIN_PROBE line lacks {missing}")
    return cast(Observation, data)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 1:
            raise ValueError("usage: python -m runners.identity.probe '<json spec>'")
        spec = json.loads(args[0])
        if not isinstance(spec, dict):
            raise ValueError("the spec must be a JSON object")
        result = observe(spec)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        print(f"error: runners.identity.probe: {exc}", file=sys.stderr)
        return 2
    print(PROBE_PREFIX + json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
