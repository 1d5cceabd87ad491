"""``python -m tests.support.bench``: strict reading of a catalog's run directories vs ``pandas.read_json``.

What is measured: ``--runs`` run directories (default 200) shaped like the largest published design
(``conf/experiment/qwen7b.yaml``: 109 case processes per run, the count ``tests/conf/test_compose.py``
holds), each directory holding its lines in the design's phase files: ``same_runtime`` (63 + the 19
serving and accuracy processes, counted here as bench lines so that a directory holds 109 lines: an
upper bound, a real run writes those 19 as other records), ``long_window`` (15 lines of 10 rounds) and
``native`` (12). About 22,000 ``CaseRun`` lines in all. The lines are the recorded ones of
``tests/fixtures/real_tiny_run`` and ``tests/fixtures/synthetic_run`` (and, for the 10-round phase, lines
of the builder that made ``synthetic_run``), with ``record.phase`` set to the file's phase and
``record.repeat`` counting up; every line is valid. Timed in the same process and run, best of
``--repeat``:

* reference: ``pandas.read_json(path, lines=True)`` of every runs file (no validation);
* ours: ``analysis.load.load_run`` of every directory (strict JSON, every per-field constraint and every
  cross-field validator of every line, through ``results_schema.codec.io.parse_line``, then the runs
  and rounds frames), and ``results_schema.reading.table_scan.scan_table`` of every file alone.

Each keeps what it reads alive until its pass ends, as a catalog does; the three take turns within each
repeat, so that the load of a shared machine falls on all of them alike. Prints the times, the line and
file counts, and the ratios; the target is ``load_run`` within ``TARGET_RATIO`` x ``pandas.read_json``.
Exit status 0 (a benchmark, not a gate) unless ``--max-ratio`` is given and exceeded.

What is deliberately not measured: the failures, serving and accuracy files of a run, the catalog's
own bookkeeping (``analysis.catalog``), the disk (the files are read from the page cache).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import load_run
from results_schema.reading.table_scan import scan_table
from results_schema.records.models import CaseRun
from tests.support.synthetic import default_cases, make_case_run

TARGET_RATIO = 2.0
"""``load_run`` (strict read + validate + frames) may take at most this many times ``pandas.read_json``."""

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDED = (FIXTURES / "real_tiny_run" / "same_runtime-runs.jsonl", FIXTURES / "synthetic_run" / "same_runtime-runs.jsonl")
"""Files of recorded ``CaseRun`` lines used as the templates of 3-round lines."""

DESIGN_PHASES = (("same_runtime", 63 + 19, 3), ("long_window", 15, 10), ("native", 12, 3))
"""``(phase, lines per run directory, measured rounds per line)``: 109 lines, the qwen7b design's process count."""


def templates(measured_rounds: int) -> list[dict[str, Any]]:
    """Valid ``CaseRun`` lines (as JSON objects) with ``measured_rounds`` rounds each."""
    if measured_rounds == 3:
        return [json.loads(line) for path in RECORDED for line in path.read_text().splitlines()]
    rng = random.Random(0)
    return [make_case_run("long_window", case, 0, rng, measured_rounds=measured_rounds).model_dump(mode="json")
            for case in default_cases(implementations=("current", "official"))]


def write_runs(root: Path, runs: int) -> list[Path]:
    """Write ``runs`` run directories under ``root`` (see the module docstring); returns the runs files."""
    pools = {rounds: templates(rounds) for rounds in {r for _p, _n, r in DESIGN_PHASES}}
    files = []
    for i in range(runs):
        run_dir = root / f"run{i:04d}"
        run_dir.mkdir()
        for phase, n, rounds in DESIGN_PHASES:
            pool = pools[rounds]
            out = []
            for k in range(n):
                d = pool[(i + k) % len(pool)]
                d["record"]["phase"] = phase
                d["record"]["repeat"] = k
                out.append(json.dumps(d, allow_nan=False, separators=(",", ":")) + "\n")
            path = run_dir / f"{phase}-runs.jsonl"
            path.write_text("".join(out))
            files.append(path)
    return files


def _best_of(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, Any]]:
    """``{name: (best seconds, result)}``; the functions take turns within each repeat (so that the load of a
    shared machine falls on all of them alike) and a result is dropped before the next call, so that no pass
    carries another's objects."""
    best: dict[str, tuple[float, Any]] = {name: (float("inf"), None) for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            result = fn()
            best[name] = (min(best[name][0], time.perf_counter() - t0), result)
            del result
    return best


def _pandas(files: list[Path]) -> tuple[int, int]:
    frames = [pd.read_json(p, lines=True) for p in files]
    return sum(map(len, frames)), 0


def _scan(files: list[Path]) -> tuple[int, int]:
    tables = [scan_table(p, CaseRun) for p in files]
    return sum(len(t) for t, _e in tables), sum(len(e) for _t, e in tables)


def _load(dirs: list[Path]) -> tuple[int, int]:
    loaded = [load_run(d) for d in dirs]
    return sum(len(r.runs) for r in loaded), sum(len(r.line_errors) for r in loaded)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="run directories (109 CaseRun lines each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=None, help="exit 1 when the load_run ratio exceeds this")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_runs(Path(tmp), args.runs)
        dirs = sorted({p.parent for p in files})
        got = _best_of({"pandas": lambda: _pandas(files), "scan": lambda: _scan(files),
                        "load": lambda: _load(dirs)}, args.repeat)
    (ref_s, (lines, _)), (scan_s, scanned), (load_s, loaded) = got["pandas"], got["scan"], got["load"]
    if scanned != (lines, 0) or loaded != (lines, 0):
        raise AssertionError(f"not every valid line was accepted: pandas {lines}, scan_table {scanned}, load_run {loaded}")
    ratio = load_s / ref_s
    print(f"lines: {lines:,} in {len(files)} files of {len(dirs)} run directories")
    print(f"pandas.read_json(lines=True), every file: {ref_s:.3f} s")
    print(f"scan_table (strict parse + every validator), every file: {scan_s:.3f} s ({scan_s / ref_s:.2f}x)")
    print(f"load_run (scan_table + frames), every directory: {load_s:.3f} s")
    print(f"ratio: {ratio:.2f}x (target <= {TARGET_RATIO:g}x)")
    if args.max_ratio is not None and ratio > args.max_ratio:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
