"""Orchestration overhead of ``runners.matrix``: runner wall time minus case process wall time, per case.

What is measured: ``python -m runners.matrix`` is started as a subprocess (by
default on the embedded tiny CPU matrix); its wall time from launch to exit is
compared with the sum of the case process wall times the runner recorded
(``process_wall_s`` of every run line, ``duration_s`` of every failure line), the
configured cooldowns and the CPU copy bench (a measurement process of its own, from
the runner's ``done:`` line). Overhead = runner wall - case walls - cooldowns - copy
bench: Python
and Hydra start-up, identity gate, manifest, launching/reaping, finalizing,
analysis and ``SHA256SUMS``. Target: <= 1 s per case.

What is deliberately not measured: vLLM's own start-up inside a case (that is
case time).

Usage::

    python -m runners.orchestration.overhead                       # the tiny default matrix (real vLLM)
    python -m runners.orchestration.overhead --no-analyze          # without the analysis step
    python -m runners.orchestration.overhead -- +experiment=smoke  # extra matrix overrides after --
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from runners.paths import REPO_ROOT
from conf.typed import load_saved_config


def measure(results_root: Path, overrides: Sequence[str], *, run_id: str = "overhead") -> dict[str, object]:
    """Run the matrix once and return the overhead breakdown (seconds).

    Raises:
        RuntimeError: the runner exited with a code other than 0 or 1.
    """
    cmd = [sys.executable, "-m", "runners.matrix", f"results_root={results_root}", f"run_id={run_id}",
           "progress=false", *overrides]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"runner exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    run_dirs = [p for p in results_root.glob(f"*/{run_id}") if p.is_dir()]
    if len(run_dirs) != 1:
        raise RuntimeError(f"expected one run directory named {run_id} under {results_root}, found {run_dirs}")
    run_dir = run_dirs[0]
    cases: list[tuple[str, float]] = []
    for f in sorted(run_dir.glob("*-runs.jsonl")):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            cases.append((f"{d['record']['phase']}/{d['record']['label']}-r{d['record']['repeat']}",
                          float(d["process_wall_s"])))
    for f in sorted(run_dir.glob("*-failures.jsonl")):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            cases.append((f"{d['phase']}/{d['label']}-r{d['repeat']} (failed)", float(d["duration_s"])))
    import yaml

    cfg = load_saved_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    cooldown = 0.0
    for ph in cfg.phases.values():
        n = sum(1 for name, _ in cases if name.startswith(f"{ph.name}/"))
        cooldown += ph.cooldown_s * max(n - 1, 0)
    case_sum = sum(w for _, w in cases)
    n = len(cases)
    overhead = wall - case_sum - cooldown
    import re

    done = [line for line in proc.stdout.splitlines() if line.startswith("done:")]
    inner = re.search(r"runner wall ([\d.]+) s", done[-1]) if done else None
    bench = re.search(r"copy bench ([\d.]+) s", done[-1]) if done else None
    copy_bench = float(bench.group(1)) if bench else 0.0  # a measurement process, not overhead
    overhead -= copy_bench
    return {"run_dir": str(run_dir), "runner_exit": proc.returncode, "runner_summary": done[-1] if done else "",
            "startup_s": (wall - float(inner.group(1))) if inner else None, "cases": n, "runner_wall_s": wall,
            "case_wall_sum_s": case_sum, "cooldown_s": cooldown, "copy_bench_s": copy_bench, "overhead_s": overhead,
            "overhead_per_case_s": overhead / n if n else float("nan"), "per_case": cases}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.orchestration.overhead", description=__doc__.split("\n")[0])
    ap.add_argument("--results-root", default=None, help="where the measured run goes (default: a temp dir)")
    ap.add_argument("--no-analyze", action="store_true", help="pass analyze=false to the runner")
    ap.add_argument("--target-s", type=float, default=1.0, help="target overhead per case (seconds)")
    ap.add_argument("overrides", nargs="*", help="extra runner overrides (after --)")
    a = ap.parse_args(argv)
    overrides = list(a.overrides) + (["analyze=false"] if a.no_analyze else [])
    root = Path(a.results_root) if a.results_root else Path(tempfile.mkdtemp(prefix="overhead-"))
    m = measure(root.resolve(), overrides)
    print(f"run: {m['run_dir']} (runner exit {m['runner_exit']})")
    per_case: list[tuple[str, float]] = m["per_case"]  # type: ignore[assignment]  # measure() builds this list
    for name, w in per_case:
        print(f"  case {name}: {w:.2f} s")
    print(f"cases: {m['cases']}")
    print(f"runner says: {m['runner_summary']}")
    if m["startup_s"] is not None:
        print(f"interpreter + Hydra compose + planning (before the run clock starts): {m['startup_s']:.2f} s")
    print(f"runner wall: {m['runner_wall_s']:.2f} s; case processes: {m['case_wall_sum_s']:.2f} s; "
          f"cooldowns: {m['cooldown_s']:.2f} s; copy bench: {m['copy_bench_s']:.2f} s")
    per = float(m["overhead_per_case_s"])  # type: ignore[arg-type]
    verdict = "within" if per <= a.target_s else "ABOVE"
    print(f"overhead: {m['overhead_s']:.2f} s total, {per:.3f} s per case ({verdict} the {a.target_s:g} s target)")
    return 0 if per <= a.target_s else 1


if __name__ == "__main__":
    raise SystemExit(main())
