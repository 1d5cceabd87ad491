"""Benchmark of choose-then-confirm against measuring every candidate: process counts and wall time, as ratios.

    .venv/bin/python scripts/bench_choose.py results/choose/<run>

Reads a finished choose run (``choose-decisions.jsonl``, ``<phase>-runs.jsonl``, ``<phase>-failures.jsonl``) and
prints, measured in the same run:

* processes: the run's case processes N against M, the processes the same design (the verify phase's repeats per
  label, one baseline label) would run to measure every distinct setting that meets the need; ratio N / M;
* case wall time: the run's summed case-process wall seconds against M x the run's median case-process wall
  seconds (the same machine, the same processes); ratio.

What is deliberately not modelled: runner overhead outside the case processes (identity, copy bench, analysis:
the same for both designs up to the per-case finalisation).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from results_schema.records.case_outcome import CaseFailure
from results_schema.records.choice import FILE_NAME, PROBE_STAGES, ChoiceDecision
from results_schema.codec.io import read_jsonl
from results_schema.records.models import CaseRun


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / FILE_NAME).is_file():
        print(f"usage: bench_choose.py RUN_DIR (a choose run with {FILE_NAME})", file=sys.stderr)
        return 2
    run = Path(argv[0])
    decisions = read_jsonl(run / FILE_NAME, ChoiceDecision)
    walls = [r.process_wall_s for p in sorted(run.glob("*-runs.jsonl")) for r in read_jsonl(p, CaseRun)]
    fails = sum(len(read_jsonl(p, CaseFailure)) for p in sorted(run.glob("*-failures.jsonl")))
    n = len(walls) + fails
    m = next((d.processes_every_candidate for d in decisions if d.stage not in PROBE_STAGES), 0)
    print(f"stages: {' -> '.join(d.stage for d in decisions)}; need {decisions[0].need_source}")
    if decisions[-1].stage == "stopped":
        print(f"processes: {n} run (the probe and its re-measures); the choice stopped before predicting: no "
              f"candidate counted, ratio not defined")
        return 0
    if m == 0:
        print(f"processes: {n} run; no candidate to measure (need met without offload): ratio not defined")
        return 0
    med = statistics.median(walls)
    print(f"processes: {n} run vs {m} to measure every candidate: ratio {n / m:.3f} ({m / n:.1f}x fewer)")
    print(f"case wall: {sum(walls):.0f} s run vs {m * med:.0f} s estimated for every candidate "
          f"({m} x median {med:.1f} s per process, this run): ratio {sum(walls) / (m * med):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
