"""Identity values in the published runner's formats, so its pins can be used here.

What is modelled:

* ``sha256sum_tree`` (implemented in ``runners.identity.probe``, which runs stand-alone inside a runtime):
  the published tree hash: in the tree's root, ``sha256sum`` of every regular file as
  ``./relative/path`` (caches excluded: ``__pycache__`` directories, ``*.pyc`` / ``*.pyo``;
  symlinks not followed, like ``find -type f``), the output lines sorted (byte order,
  ``LC_ALL=C sort``), and the SHA-256 of that text, i.e. ``find . -type f ! -path
  '*/__pycache__/*' ! -name '*.py[co]' -print0 | xargs -0 sha256sum | LC_ALL=C sort |
  sha256sum``. A pin written ``sha256sum:<hex>`` is compared in this format; a bare hex pin in
  the project's (``runners.identity.probe.tree_sha256``). Both ``offload_tree_sha256`` and the values of
  ``runtime.pins.source_trees`` take either form (``runners.identity.pin_checks.observed_field``).
* ``model_revision``: the model revision recorded next to the weights: a ``REVISION`` file
  (``runners.identity.model_manifest``), else ModelScope's ``.msc`` cache index (a pickled list of
  ``{"Path": ..., "Revision": ...}`` entries, read with an unpickler that refuses every
  class, so no code runs), whose entries must agree on one revision.

What is deliberately not modelled: the wheel-vs-installed package tree comparison (``runners.identity.probe.wheel_vs_installed``,
a runtime pin ``package_wheels``).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

from runners.identity.probe import PUBLISHED_PREFIX, sha256sum_tree

__all__ = ["tree_value_for_pin", "msc_revision", "model_revision"]


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
