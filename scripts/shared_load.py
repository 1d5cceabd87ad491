"""Run a command under a declared foreign load: load processes start before it and stop when it ends.

Usage (from the repository root; issue 53 item 4, ``docs/measurements/contention-pairing-2026-12-05.md``)::

    .venv/bin/python scripts/shared_load.py --procs 1 --kind cpu -- .venv/bin/python -m runners.matrix +experiment=aa_paired

What runs:

* ``--procs`` load processes, each in its own session (a Ctrl-C at the terminal does not reach them; this script
  stops them): ``--kind cpu`` a pure-Python busy loop; ``--kind mem`` a copy of one ``--mem-mib`` MiB buffer into
  another, over and over (memory streaming that also keeps its core busy, as the memory stressor of
  ``docs/measurements/noise-source-2026-12-05/stress.py``, without numpy);
* then the command, in this script's process group: it sees the terminal as it would alone (a Ctrl-C reaches it
  directly); a SIGTERM or SIGHUP sent to this script is forwarded to it.

When the command ends (its exit, an error, a Ctrl-C) the load is stopped (SIGTERM, SIGKILL after ``STOP_GRACE_S``)
and reaped. Each load process also ends by itself within about 0.1 s once this script is gone (it polls its parent
pid), so a SIGKILL of this script leaves no load behind. The exit status is the command's (``128 + N`` when signal
``N`` ended it; 127 when it could not be started).

The record (JSON, ``"schema": "shared-load/1"``): the load (kind, processes, MiB), the command and its exit status,
when the load started and stopped (UTC, wall seconds), each load process's CPU seconds (``wait4`` rusage: user +
system) and their mean cores (CPU seconds / wall seconds). Written when the load starts (``stopped_utc`` null) and
rewritten when it stops (atomically: a temporary file renamed): at ``--record`` when given; else, while the command
runs, ``<results-root>/.shared-load-<UTC>.json`` (``results/`` is ignored by git: a file there leaves the run's
``git.dirty`` as it was), moved at the end to ``<results-root>/<experiment>/<run_id>.shared-load.json`` beside the
run directory when exactly one new run directory appeared during the command (``scripts/contention_pairing.py`` reads
it there). The results root is where the runner creates its run directories: ``--results-root``, else the command's
own ``results_root=`` override, else the runner's default (``conf.schema.Config.results_root``); a relative one is
resolved against the repository root, as the runner resolves it (``runners.paths.abs_path``), whatever the current
folder. When no single new run directory appeared (a resume, another results root), or a record of that name is
already there (it is kept as it was), the record stays where it was written and a ``WARNING`` line says so. The last
line (stderr) names the record.

Why such a load is foreign work to every case (``runners.incase.host_load``): a case's foreign CPU is the host's busy
CPU time minus its process tree's and its runner's; the load processes are children of this script, neither
descendants of the case nor the runner, so every CPU second they take during a case's measured window is foreign.
One busy process is about one core, above ``results_schema.records.host_load.CONTENDED_CORES`` (0.25), so a case
measured while it runs is recorded ``contended`` (also the ``mem`` kind: its copies keep a core busy).

Bad input (``--procs`` outside 1..``MAX_PROCS``, an unknown ``--kind``, ``--mem-mib`` outside 1..``MAX_MEM_MIB``,
``--kind mem`` buffers (2 x ``--procs`` x ``--mem-mib`` MiB) above the host's ``MemAvailable``, a ``--record`` path
that exists, a results root that is not a folder or that differs from the command's ``results_root=``, no command, a
command not found): one line naming it, exit 2, before any process starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conf.schema import Config  # noqa: E402
from results_schema.records.host_load import CONTENDED_CORES  # noqa: E402
from runners.paths import abs_path  # noqa: E402

KINDS = ("cpu", "mem")
MAX_PROCS = 64
MAX_MEM_MIB = 16384
STOP_GRACE_S = 5.0
"""Seconds a load process gets to end after SIGTERM before SIGKILL."""
SCHEMA = "shared-load/1"
RECORD_SUFFIX = ".shared-load.json"
"""``<run_dir>`` + this: where the record of a run's load lies, beside the run directory."""
RESULTS_ROOT_OVERRIDE = re.compile(r"\+{0,2}results_root=(.*)")
"""A Hydra override of the runner's ``results_root`` in the command (``results_root=X``, ``++results_root=X``)."""

WORKER = r"""
import os, signal, sys
kind, parent, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGINT, signal.SIG_IGN)
if kind == "cpu":
    x = 0
    while os.getppid() == parent:
        for i in range(200000):
            x += i
else:
    src = bytearray(b"\x5a") * (mib << 20)
    dst = bytearray(mib << 20)
    while os.getppid() == parent:
        dst[:] = src
"""
"""The load process (``python -c WORKER kind parent_pid mib``): stdlib only; it ends when its parent changes."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _fail(message)


def _fail(message: str) -> NoReturn:
    print(f"shared_load.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def _bounded(hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if not 1 <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer from 1 to {hi}")
        return v
    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options and the command after ``--`` (``SystemExit(2)`` with one line on bad input)."""
    ap = _Parser(prog="shared_load.py", description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=_bounded(MAX_PROCS), default=1, help="load processes (default 1)")
    ap.add_argument("--kind", default="cpu", help="cpu (busy loop) or mem (buffer copy); default cpu")
    ap.add_argument("--mem-mib", type=_bounded(MAX_MEM_MIB), default=256,
                    help="--kind mem: MiB of each of the two buffers per process (default 256)")
    ap.add_argument("--record", type=Path, default=None, help="where to write the record (default: module docstring)")
    ap.add_argument("--results-root", default=None,
                    help="the runner's results_root, to find the new run directory (default: the command's "
                         f"results_root=, else {Config.results_root}; relative = the repository root, as the runner)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args(argv)
    if args.kind not in KINDS:
        _fail(f"--kind {args.kind!r}: allowed values are {', '.join(KINDS)}")
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        _fail("no command: give it after '--' (e.g. -- .venv/bin/python -m runners.matrix +experiment=aa_paired)")
    if shutil.which(cmd[0]) is None:
        _fail(f"command {cmd[0]!r}: not found (neither an executable path nor on PATH)")
    if args.record is not None and (args.record.exists() or args.record.is_symlink()):
        _fail(f"--record {args.record}: exists (a record is never overwritten: name a new path)")
    if args.record is not None and (blocked := file_in_the_way(args.record.parent)) is not None:
        _fail(f"--record {args.record}: {blocked} is not a folder")
    args.results_root = results_root(args.results_root, cmd)
    if args.kind == "mem":
        need, have = 2 * args.procs * args.mem_mib, available_mib()
        if have is not None and need > have:
            _fail(f"--kind mem --procs {args.procs} --mem-mib {args.mem_mib}: {need} MiB of buffers (2 per process), "
                  f"above the host's available memory ({have} MiB, /proc/meminfo MemAvailable)")
    args.command = cmd
    return args


def command_results_root(cmd: list[str]) -> str | None:
    """The ``results_root`` the command gives the runner (the last ``RESULTS_ROOT_OVERRIDE`` in it), or None."""
    given = [m.group(1) for a in cmd if (m := RESULTS_ROOT_OVERRIDE.fullmatch(a))]
    return given[-1] if given else None


def results_root(option: str | None, cmd: list[str]) -> Path:
    """Where the runner of ``cmd`` creates its run directories (module docstring), absolute; ``SystemExit(2)`` with
    one line when ``option`` (``--results-root``) and the command's ``results_root=`` differ, or it is no folder."""
    given = command_results_root(cmd)
    if option is not None and given is not None and abs_path(option) != abs_path(given):
        _fail(f"--results-root {option} and the command's results_root={given} differ: give one (the record goes "
              "beside the run directory the runner creates)")
    root = abs_path(option or given or Config.results_root)
    if (blocked := file_in_the_way(root)) is not None:
        _fail(f"--results-root {root}: {blocked} is not a folder (the runner's results_root holds its run "
              "directories)")
    return root


def file_in_the_way(folder: Path) -> Path | None:
    """The nearest existing one of ``folder`` and its parents when it is not a folder (the folder cannot be made
    there), else None."""
    for p in (folder, *folder.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def available_mib(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The host's ``MemAvailable`` in MiB (``/proc/meminfo``), or None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def run_dirs(root: Path) -> set[Path]:
    """The run directories ``<root>/<experiment>/<run_id>`` that exist now."""
    return {p for p in root.glob("*/*") if p.is_dir()} if root.is_dir() else set()


def start_load(kind: str, mib: int) -> subprocess.Popen:
    """One load process (``WORKER``) in its own session."""
    return subprocess.Popen([sys.executable, "-c", WORKER, kind, str(os.getpid()), str(mib)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)


def _reap(pid: int, block: bool) -> tuple[int, float] | None:
    """``(exit status, CPU seconds)`` of an ended child (``wait4``), or None when it still runs (``block`` False)."""
    try:
        got, status, ru = os.wait4(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return (0, 0.0)
    if got == 0:
        return None
    return os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime


def stop_loads(loads: list[subprocess.Popen]) -> list[dict[str, Any]]:
    """Stop and reap every load process: ``{pid, cpu_s, exit, ended_early}`` each (``ended_early``: it had ended before
    it was told to stop)."""
    out: list[dict[str, Any]] = []
    for p in loads:
        done = _reap(p.pid, block=False)
        early = done is not None
        if done is None:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + STOP_GRACE_S
            while done is None and time.monotonic() < deadline:
                time.sleep(0.02)
                done = _reap(p.pid, block=False)
            if done is None:
                os.kill(p.pid, signal.SIGKILL)
                done = _reap(p.pid, block=True)
        assert done is not None
        p.returncode = done[0]
        out.append({"pid": p.pid, "cpu_s": round(done[1], 3), "exit": done[0], "ended_early": early})
    return out


def run_command(cmd: list[str], received: list[str]) -> int:
    """Run ``cmd`` to its end, forwarding SIGTERM / SIGHUP (a SIGINT is the terminal's: the command got it too);
    its exit status (``128 + N`` for a signal, 127 when it cannot start)."""
    try:
        proc = subprocess.Popen(cmd)
    except OSError as e:
        print(f"shared_load.py: command {cmd[0]!r} did not start: {e}", file=sys.stderr)
        return 127

    def forward(sig: int, _frame: object) -> None:
        received.append(signal.Signals(sig).name)
        if sig != signal.SIGINT and proc.poll() is None:
            proc.send_signal(sig)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc


def beside_run(new: list[Path], root: Path) -> tuple[Path | None, str | None]:
    """``(<run_dir>.shared-load.json, None)`` for the one new run directory, else ``(None, why not)``: no or several
    new run directories under ``root``, or a file of that name already there (never overwritten)."""
    if len(new) != 1:
        return None, f"{len(new)} new run directories under {root} (one needed: {', '.join(map(str, new)) or 'none'})"
    final = Path(str(new[0]) + RECORD_SUFFIX)
    if final.exists() or final.is_symlink():
        return None, f"{final} exists (kept as it was)"
    return final, None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.results_root
    before = run_dirs(root)
    record: dict[str, Any] = {
        "schema": SCHEMA, "kind": args.kind, "procs": args.procs,
        "mem_mib": args.mem_mib if args.kind == "mem" else None,
        "command": args.command, "cwd": os.getcwd(), "host_cores": os.cpu_count(),
        "results_root": str(root), "contended_cores_limit": CONTENDED_CORES, "started_utc": _utc(),
        "stopped_utc": None}
    path = args.record or root / f".shared-load-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.json"
    t0 = time.monotonic()
    loads = [start_load(args.kind, args.mem_mib) for _ in range(args.procs)]
    received: list[str] = []
    try:
        record["pids"] = [p.pid for p in loads]
        _write(path, record)
        print(f"shared_load: {args.procs} {args.kind} load process(es) started (pids "
              f"{', '.join(str(p.pid) for p in loads)}); record {path}", file=sys.stderr, flush=True)
        code = run_command(args.command, received)
    finally:
        stats = stop_loads(loads)
        wall = time.monotonic() - t0
    new = sorted(run_dirs(root) - before)
    cpu = sum(s["cpu_s"] for s in stats)
    record.update({"stopped_utc": _utc(), "load_wall_s": round(wall, 3), "loads": stats, "load_cpu_s": round(cpu, 3),
                   "load_cores": round(cpu / wall, 3) if wall > 0 else 0.0, "exit_code": code,
                   "signals_received": received, "run_dirs": [str(p) for p in new]})
    beside, why = beside_run(new, root) if args.record is None else (None, None)
    final = beside or path
    _write(final, record)
    if final != path:
        path.unlink(missing_ok=True)
    if why is not None:
        print(f"shared_load: WARNING: {why}: the record stays at {path} (scripts/contention_pairing.py reads a run as "
              f"loaded only with <RUN_DIR>{RECORD_SUFFIX} beside it)", file=sys.stderr, flush=True)
    early = [s["pid"] for s in stats if s["ended_early"]]
    print(f"shared_load: stopped {len(stats)} {args.kind} load process(es) after {wall:.1f} s: {cpu:.1f} CPU-s "
          f"({record['load_cores']:.2f} cores; contended limit {CONTENDED_CORES:g})"
          f"{'; ENDED EARLY: ' + ', '.join(map(str, early)) if early else ''}; command exit {code}; record {final}",
          file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
