"""Identity values in the published runner's formats (issue 15), so its pins can be used here.

What is modelled:

* ``sha256sum_tree``: the published tree hash: in the tree's root, ``sha256sum`` of every
  file as ``./relative/path`` (caches excluded: ``__pycache__`` directories, ``*.pyc`` /
  ``*.pyo``), the output lines sorted (byte order, ``LC_ALL=C sort``), and the SHA-256 of
  that text, i.e. ``find . -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 |
  xargs -0 sha256sum | LC_ALL=C sort | sha256sum``. A pin written ``sha256sum:<hex>`` is
  compared in this format; a bare hex pin in the project's (``runners.probe.tree_sha256``).
* ``model_revision``: the model revision recorded next to the weights: a ``REVISION`` file
  (``runners.model_manifest``), else ModelScope's ``.msc`` cache index (a pickled list of
  ``{"Path": ..., "Revision": ...}`` entries, read with an unpickler that refuses every
  class, so no code runs), whose entries must agree on one revision.

What is deliberately not modelled: the wheel-vs-installed package tree comparison.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from pathlib import Path

from results_schema.io import file_sha256

PUBLISHED_PREFIX = "sha256sum:"
_CACHE_DIRS = ("__pycache__",)
_CACHE_SUFFIXES = (".pyc", ".pyo")


def sha256sum_lines(root: "str | os.PathLike[str]") -> list[str]:
    """The sorted ``<sha256>  ./<relative path>`` lines of the published tree hash.

    Raises:
        FileNotFoundError: ``root`` is not a directory.
    """
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"{base} is not a directory")
    lines = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in _CACHE_DIRS]
        for f in filenames:
            p = Path(dirpath) / f
            if f.endswith(_CACHE_SUFFIXES) or not p.is_file():
                continue
            rel = os.path.relpath(p, base).replace(os.sep, "/")
            lines.append(f"{file_sha256(p)}  ./{rel}\n")
    return sorted(lines, key=lambda s: s.encode())


def sha256sum_tree(root: "str | os.PathLike[str]") -> str:
    """SHA-256 (hex) of ``sha256sum_lines(root)`` joined: the published tree hash."""
    return hashlib.sha256("".join(sha256sum_lines(root)).encode()).hexdigest()


def tree_value_for_pin(pin: str | None, root: "str | os.PathLike[str]", project_value: str) -> str:
    """The observed tree hash in the pin's format: ``sha256sum:<hex>`` for a published pin, else the project's."""
    if pin is not None and str(pin).startswith(PUBLISHED_PREFIX):
        return PUBLISHED_PREFIX + sha256sum_tree(root)
    return project_value


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f".msc refers to {module}.{name}: only plain lists/dicts/strings are read")


def msc_revision(model_dir: "str | os.PathLike[str]") -> str | None:
    """The revision of ModelScope's ``.msc`` index in ``model_dir`` (None when there is no ``.msc``).

    Raises:
        ValueError: an unreadable ``.msc``, no ``Revision`` entry, or entries naming several revisions.
    """
    path = Path(model_dir) / ".msc"
    if not path.is_file():
        return None
    try:
        data = _NoClasses(io.BytesIO(path.read_bytes())).load()
    except Exception as exc:  # noqa: BLE001 - any unpickling problem is a bad index
        raise ValueError(f"{path}: not a ModelScope cache index ({exc})") from None
    entries = data if isinstance(data, list) else []
    revs = {str(e["Revision"]) for e in entries if isinstance(e, dict) and e.get("Revision")}
    if not revs:
        raise ValueError(f"{path}: no Revision entry")
    if len(revs) > 1:
        raise ValueError(f"{path}: entries name several revisions {sorted(revs)}")
    return revs.pop()


def model_revision(model_dir: "str | os.PathLike[str]") -> str | None:
    """``REVISION`` file content, else ``msc_revision``; None when neither exists (raises as ``msc_revision``)."""
    rev = Path(model_dir) / "REVISION"
    if rev.is_file():
        return rev.read_text().strip()
    return msc_revision(model_dir)
