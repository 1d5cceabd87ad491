"""Whole-file writes and file hashes: the project's one atomic writer and one file hash.

Re-exported by :mod:`results_schema.codec.io` (their public import path).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """fsync ``directory`` (makes a created or renamed entry in it durable)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path | str, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably (tmp in the same directory, fsync, rename).

    The one atomic writer of the project: every file a run writes whole (JSON
    documents, Markdown, plots, ``SHA256SUMS``) goes through it, so a crash
    leaves either the old file or the new one, never a torn one.

    Args:
        path: target file; parent directories are created; an existing file is replaced.
        data: the complete new content.
        mode: permission bits of the new file (``mkstemp`` alone would give 0600).

    Raises:
        OSError: the write, fsync or rename failed (its ``filename`` is ``path`` where the system call named
            none, e.g. a full disk on ``write``); the temporary file is removed.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, mode)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        fsync_dir(path.parent)
    except OSError as exc:
        raise naming(exc, path) from None


def naming(exc: OSError, path: Path | str) -> OSError:
    """``exc`` itself when it names a file, else the same error (errno, cause) naming ``path``."""
    if exc.filename is not None:
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def write_text_atomic(path: Path | str, text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` encoded as UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def file_sha256(path: Path | str) -> str:
    """Hex SHA-256 of a file's bytes (``hashlib.file_digest``, streamed; same value as ``sha256sum``).

    The one file-hash helper of the project (the runtime probe, which runs in a runtime's interpreter without
    this package, keeps a stdlib copy: ``runners.identity.probe.sha256_file``).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def line_problem(raw: bytes, terminated: bool) -> str | None:
    """Why one line of a JSONL file cannot hold a record, before it is parsed; None when it may.

    The line rules of every JSONL reader (``results_schema.codec.io.scan_jsonl`` / ``iter_jsonl``,
    ``results_schema.reading.table_scan.scan_table``): a last line without its newline is a torn write, and a
    blank line is an error (a writer never produces one).

    Args:
        raw: the line's bytes (with or without its newline).
        terminated: whether the line ended with a newline.
    """
    if not terminated:
        return "last line is not newline-terminated (torn write)"
    if not raw.strip():
        return "blank line"
    return None
