"""``python -m tests.support.bench``: validate + aggregate cost vs plain ``pandas.read_json``.

Writes N synthetic ``CaseRun`` lines (default 100,000: 9 labels of a
same-runtime matrix, 3 measured rounds each, distinct repeats) to a temporary
run directory, then times, in the same process and run:

* reference: ``pandas.read_json(path, lines=True)`` of the same file (no validation);
* ours: ``analysis.load.load_run`` (strict JSON parse and every check of every
  line: ``results_schema.reading.table_scan.scan_table`` decodes each line into the msgspec
  struct derived from ``CaseRun``, refuses duplicate keys, and runs ``CaseRun``'s
  cross-field validators ported to columns; then the frames, a column at a time)
  followed by ``analysis.aggregate.aggregate``. The ``CaseRun`` models are not built
  (``RunData.case_runs`` builds them on first use; aggregation does not use them).

Each is timed ``--repeat`` times; the best time of each is used. Prints both
times and the ratio (target <= 1.5x). Exit status 0 always (a benchmark, not a
gate) unless ``--max-ratio`` is given and exceeded.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.aggregate import aggregate
from analysis.load import load_run
from tests.support.synthetic import default_cases, make_case_run

TARGET_RATIO = 1.5
"""Strict load + validate + aggregate may take at most this many times ``pandas.read_json``."""


def write_records(path: Path, n: int, seed: int = 0) -> None:
    """Write ``n`` valid CaseRun lines: templates from the synthetic matrix, repeat index varied."""
    rng = random.Random(seed)
    cases = default_cases(implementations=("current", "official"))
    templates = []
    for i, case in enumerate(cases):
        for k in range(4):
            cr = make_case_run("same_runtime", case, k, rng)
            templates.append(cr.model_dump(mode="json"))
    with open(path, "w") as fh:
        for i in range(n):
            d = templates[i % len(templates)]
            d["record"]["repeat"] = i
            fh.write(json.dumps(d, allow_nan=False, separators=(",", ":")) + "\n")


def _best(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-ratio", type=float, default=None, help="exit 1 when the ratio exceeds this")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        path = run_dir / "same_runtime-runs.jsonl"
        t0 = time.perf_counter()
        write_records(path, args.records)
        gen_s = time.perf_counter() - t0
        ref_s, ref = _best(lambda: pd.read_json(path, lines=True), args.repeat)
        ours_s, summary = _best(lambda: aggregate(load_run(run_dir)), args.repeat)
        assert len(ref) == args.records
    ratio = ours_s / ref_s
    print(f"records: {args.records:,} ({path.name}, generated in {gen_s:.1f} s)")
    print(f"pandas.read_json(lines=True): {ref_s:.3f} s")
    print(f"load_run (strict parse + validate) + aggregate: {ours_s:.3f} s ({len(summary)} summary rows)")
    print(f"ratio: {ratio:.2f}x (target <= {TARGET_RATIO:g}x)")
    if args.max_ratio is not None and ratio > args.max_ratio:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
