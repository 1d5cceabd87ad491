"""An interpreter that already has a ``sitecustomize``: the hook's module chains to it, and it
still runs, after the hook; inside a case the hook arms the parent-death signal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runners.incase.case_processes import CASE_RUNNER_ENV, CASE_TOKEN_ENV, runner_id

HOOK_DIR = Path(__file__).resolve().parents[2] / "runners" / "incase" / "evidence_hook"

PROBE = ("import sys; m = sys.modules.get('_chained_sitecustomize'); "
         "print('chained', getattr(m, 'RAN', None), getattr(m, 'HOOK_LOADED_FIRST', None))")


def _other_site(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "other_site"
    d.mkdir()
    (d / "sitecustomize.py").write_text(body)
    return d


def _run(pythonpath: list[Path], code: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("OFFLOAD_EVIDENCE_PATH", "OFFLOAD_CASE_TOKEN")}
    e.update(env, PYTHONPATH=os.pathsep.join(map(str, pythonpath)))
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)


def test_other_sitecustomize_still_runs_after_the_hook(tmp_path: Path) -> None:
    other = _other_site(tmp_path, (
        "import sys\n"
        "RAN = True\n"
        "HOOK_LOADED_FIRST = getattr(sys.modules.get('sitecustomize'), '__file__', '').startswith("
        f"{str(HOOK_DIR)!r})\n"
        "print('other sitecustomize ran')\n"))
    r = _run([HOOK_DIR, other], PROBE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["other sitecustomize ran", "chained True True"]


def test_other_sitecustomize_runs_with_the_evidence_hook_active(tmp_path: Path) -> None:
    other = _other_site(tmp_path, "import sys\nRAN = 'offload_evidence_hook' in sys.modules\n")
    r = _run([HOOK_DIR, other], PROBE, OFFLOAD_EVIDENCE_PATH=str(tmp_path / "ev.json"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "chained True None"


def test_the_hook_never_chains_to_itself(tmp_path: Path) -> None:
    code = ("import sys; m = sys.modules.get('_chained_sitecustomize'); "
            "print(getattr(m, '__file__', None) or 'none')")
    r = _run([HOOK_DIR, HOOK_DIR], code)
    assert r.returncode == 0, r.stderr
    assert not r.stdout.strip().startswith(str(HOOK_DIR))


def test_error_in_the_other_sitecustomize_is_reported_not_fatal(tmp_path: Path) -> None:
    other = _other_site(tmp_path, "raise RuntimeError('broken site hook')\n")
    r = _run([HOOK_DIR, other], "print('alive')")
    assert r.returncode == 0 and r.stdout.strip() == "alive"
    assert "broken site hook" in r.stderr


def test_case_process_arms_the_parent_death_signal() -> None:
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None); v = ctypes.c_int(-1)\n"
            "libc.prctl(2, ctypes.byref(v), 0, 0, 0)\n"  # PR_GET_PDEATHSIG
            "r, w = os.pipe(); pid = os.fork()\n"
            "if pid == 0:\n"
            "    c = ctypes.c_int(-1); libc.prctl(2, ctypes.byref(c), 0, 0, 0); os.write(w, str(c.value).encode()); os._exit(0)\n"
            "os.waitpid(pid, 0); print(v.value, os.read(r, 10).decode())\n")
    # a live runner (this test process): another run's start must not end it as a dead runner's case
    case_env = {CASE_TOKEN_ENV: "t", CASE_RUNNER_ENV: runner_id()}
    assert _run([HOOK_DIR], code, **case_env).stdout.split() == ["9", "9"]
    assert _run([HOOK_DIR], code).stdout.split() == ["0", "0"]  # outside a case: untouched
