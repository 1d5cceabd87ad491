"""How a runtime's processes start: its interpreter, its command prefix, its paths.

A runtime (``conf/runtime/*.yaml``) may live outside the runner's environment:

* ``python``: the interpreter of its own virtual environment (e.g.
  ``/opt/venv-v018/bin/python``); null = the runner's interpreter (``sys.executable``).
* ``command_prefix``: an argv placed before the interpreter (``[docker, exec, -i, ctr]``,
  ``[ssh, host]``, ``[env, -i]``); empty = start the interpreter directly. The prefix
  does not forward the runner's environment, so for a prefixed runtime the case's own
  variables (``PYTHONPATH``, ``OFFLOAD_*``, caches, the runtime's ``env``) are passed
  as ``env K=V ...`` after the prefix, and the runner's environment is not inherited.
  The repository and the run directory must be visible at the same paths there.
* ``path_map``: declared pin path prefix -> where it lives on this host, e.g.
  ``{/opt/vllm-ascend-v0.18.0: /home/me/vllm-ascend}`` or ``{/usr/local/Ascend:
  /home/me/Ascend}`` (non-root CANN). Pins keep their declared names; only the place
  they are read changes (longest matching prefix, whole path components).

Every case, probe and health command of the runtime starts through
:func:`interpreter_argv` / :func:`prefixed`. Our code reaches that interpreter
without being installed there: ``PYTHONPATH = runners/incase/evidence_hook : <repo>``; the
hook directory also holds a ``.dist-info`` that declares the project's
``vllm.general_plugins`` entry point, so vLLM finds and loads ``offload.plugin`` from
``PYTHONPATH`` alone (``importlib.metadata`` scans every ``sys.path`` entry).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from conf.schema_stack import RuntimeConfig
from runners.identity.probe import Observation
from runners.paths import EVIDENCE_HOOK_DIR, REPO_ROOT
from runners.identity.probe import parse_probe_output


class ProbeError(RuntimeError):
    """A runtime's probe could not run or did not answer."""


def own_process(runtime: RuntimeConfig) -> bool:
    """True when the runtime declares its own interpreter or a command prefix."""
    return bool(runtime.python) or bool(runtime.command_prefix)


def interpreter_argv(runtime: RuntimeConfig) -> list[str]:
    """``command_prefix + [python]`` of a runtime (``sys.executable`` when ``python`` is null)."""
    return [str(a) for a in runtime.command_prefix] + [str(runtime.python or sys.executable)]


def prefixed(runtime: RuntimeConfig, argv: Sequence[str]) -> list[str]:
    """``command_prefix + argv`` (health commands and other tools of the runtime)."""
    return [str(a) for a in runtime.command_prefix] + [str(a) for a in argv]


def map_path(runtime: RuntimeConfig, path: str) -> str:
    """Where the declared pin path ``path`` is read on this host (``path_map``, longest prefix)."""
    best, dest = "", None
    for src, to in runtime.path_map.items():
        s = str(src).rstrip("/") or "/"
        if (s == "/" or path == s or path.startswith(s + "/")) and (dest is None or len(s) > len(best)):
            best, dest = s, str(to)
    if dest is None:
        return path
    rest = path.lstrip("/") if best == "/" else path[len(best):].lstrip("/")
    return str(Path(dest) / rest) if rest else dest


def wrap_prefix(runtime: RuntimeConfig, argv: Sequence[str], env: Mapping[str, str],
                base_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """Put a full command (``[python, ...]``) behind the runtime's command prefix.

    Args:
        runtime: the runtime config.
        argv: the command as a direct launch would run it.
        env: the environment a direct launch gets.
        base_env: the runner's environment ``env`` was derived from; the variables that
            ``env`` adds or changes are the case's own and are forwarded as ``env K=V``.

    Returns:
        ``(argv, env)`` unchanged without a prefix; with one, ``prefix + [env, K=V..., *argv]``
        and ``base_env`` minus the forwarded names (the prefix command runs on this host).
    """
    prefix = [str(a) for a in runtime.command_prefix]
    if not prefix:
        return list(argv), dict(env)
    own = {k: v for k, v in env.items() if base_env.get(k) != v}
    host_env = {k: v for k, v in base_env.items() if k not in own and k in env}
    return [*prefix, "env", *(f"{k}={v}" for k, v in sorted(own.items())), *argv], host_env


def probe_env(runtime: RuntimeConfig) -> dict[str, str]:
    """Variables a probe runs with: the runtime's ``env`` + ``PYTHONPATH`` to this repository."""
    out = {str(k): str(v) for k, v in runtime.env.items()}
    out["PYTHONPATH"] = f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}"
    return out


def probe_runtime(runtime: RuntimeConfig, spec: Mapping[str, Sequence[str]], *,
                  timeout_s: float = 600.0) -> Observation:
    """Run ``runners.identity.probe`` inside the runtime and return its observations.

    Raises:
        ProbeError: the interpreter or prefix cannot start, the probe fails or times out,
            or it prints no ``PIN_PROBE`` line (message names the runtime and the command).
    """

    name = runtime.name
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OFFLOAD_EVIDENCE_PATH", "OFFLOAD_IMPL")}
    python = str(runtime.python or sys.executable)
    argv, env = wrap_prefix(runtime, [python, "-m", "runners.identity.probe", json.dumps(dict(spec), sort_keys=True)],
                            {**base, **probe_env(runtime)}, base)
    shown = " ".join(interpreter_argv(runtime))
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=str(REPO_ROOT),
                           stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise ProbeError(f"runtime {name!r}: cannot start `{shown}` (not found); set runtime.python to the "
                         "runtime's interpreter (e.g. /opt/venv/bin/python) or fix command_prefix") from None
    except PermissionError:
        raise ProbeError(f"runtime {name!r}: `{shown}` is not executable") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"runtime {name!r}: the pin probe via `{shown}` did not finish in {timeout_s:.0f} s") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise ProbeError(f"runtime {name!r}: the pin probe via `{shown}` exited {r.returncode}: {last}")
    try:
        return parse_probe_output(r.stdout)
    except ValueError as exc:
        raise ProbeError(f"runtime {name!r}: the pin probe via `{shown}` gave no result: {exc}") from None
