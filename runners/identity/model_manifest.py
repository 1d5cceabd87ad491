"""``python -m runners.identity.model_manifest DIR [--revision REV] [--force]``: write a model directory's manifest.

Writes, into a local model directory (e.g. a Hugging Face snapshot copied to the host):

* ``SHA256SUMS``: one ``<sha256>  <relative path>`` line per regular file, sorted by path,
  ``SHA256SUMS``, ``REVISION`` and dot-files/dot-directories (``.cache``, ``.git``) excluded.
  The format of ``sha256sum``; ``sha256sum -c SHA256SUMS`` in DIR checks it. Symlinks are
  followed (Hugging Face snapshot files are symlinks into ``blobs/``).
* ``REVISION``: the upstream revision (commit) of the weights: ``--revision``, else the
  ``<rev>`` of a Hugging Face cache path ``.../snapshots/<rev>/``; without either, none is
  written and the run's ``model.revision`` pin stays unprovided (fail closed).

Then prints the SHA-256 of ``SHA256SUMS`` (``model.sha256sums_sha256``) and the revision
(``model.revision``). ``python -m runners.pins`` reads both from the directory too.

Exit codes: 0 written; 2 bad directory, existing manifest without ``--force``, or no file.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Sequence

from results_schema.codec.files import file_sha256, write_text_atomic

EXCLUDED = ("SHA256SUMS", "REVISION")


def model_files(model_dir: Path) -> list[str]:
    """Relative paths (``/``-separated, sorted) of the files the manifest lists."""
    out = []
    for dirpath, dirnames, filenames in os.walk(model_dir, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            rel = os.path.relpath(os.path.join(dirpath, f), model_dir).replace(os.sep, "/")
            if not f.startswith(".") and rel not in EXCLUDED:
                out.append(rel)
    return sorted(out)


def snapshot_revision(model_dir: Path) -> str | None:
    """``<rev>`` when ``model_dir`` is ``.../snapshots/<rev>`` of a Hugging Face cache."""
    p = model_dir.resolve()
    if p.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", p.name):
        return p.name
    return None


def write_manifest(model_dir: Path, *, revision: str | None = None, force: bool = False) -> tuple[str, str | None]:
    """Write ``SHA256SUMS`` (and ``REVISION``); return ``(sha256 of SHA256SUMS, revision)``.

    Raises:
        ValueError: not a directory, no files, or a manifest exists and ``force`` is false.
    """
    if not model_dir.is_dir():
        raise ValueError(f"{model_dir} is not a directory")
    sums = model_dir / "SHA256SUMS"
    if sums.exists() and not force:
        raise ValueError(f"{sums} exists; pass --force to rewrite it (check it first: sha256sum -c SHA256SUMS)")
    files = model_files(model_dir)
    if not files:
        raise ValueError(f"{model_dir} has no files")
    text = "".join(f"{file_sha256(model_dir / f)}  {f}\n" for f in files)
    write_text_atomic(sums, text)
    rev = revision or snapshot_revision(model_dir)
    if rev is not None:
        (model_dir / "REVISION").write_text(rev.strip() + "\n")
    return file_sha256(sums), rev


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.identity.model_manifest", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="local model directory")
    ap.add_argument("--revision", default=None, help="upstream revision (commit) of the weights")
    ap.add_argument("--force", action="store_true", help="rewrite an existing SHA256SUMS")
    a = ap.parse_args(argv)
    try:
        digest, rev = write_manifest(Path(a.model_dir), revision=a.revision, force=a.force)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"model.sha256sums_sha256={digest}")
    print(f"model.revision={rev}" if rev else "model.revision: not written (give --revision REV)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
