"""Replay recorded throughput runs through both pairings of the sequential design (docs/measurements/
paired-backtest-2026-12-05.md).

What is modelled: for each run directory given, the per-process values of its throughput phase
(``<phase>-runs.jsonl``, read with the production reader; block ``b`` is the record's repeat ``b - 1``) and, where
the run was sequential, its recorded looks (``sequential-decisions.jsonl``). Each label is replayed against the
baseline with the production ``analysis.comparison.sequential.label_looks`` under ``pairing: none`` and
``pairing: block`` (the run's own design: looks, target, alpha, spending; a fixed-design run is replayed with the
default's looks 3, 4, 6 over its repeats, which there are cycles of a rotated order, not ABBA blocks). A replay
that needs more blocks than the run recorded for that label (the run stopped the label earlier, or the run ended)
ends ``open (data ends)``: the processes it would have used are then at least the next look's. First, the recorded
looks are recomputed with ``analysis.comparison.sequential_check.recheck_looks`` (what ``analysis validate`` runs):
the unpaired replay is the run's own decision only where they agree.

Printed per run: the block and own SDs of its processes (``analysis.comparison.shared_time.block_anova`` over the
blocks complete for every label: the method-of-moments block SD and the residual SD), the recorded looks' recheck, one row per label (the recorded stop, each replay's verdict, look,
interval and processes), and the run's baseline + offload processes under each rule (the known-size control's
processes not counted; the baseline runs until the last label, the control included, stops).

Usage: ``python scripts/sequential_backtest.py RUN_DIR [RUN_DIR ...] [--phase same_runtime]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from analysis.comparison.sequential import LookVerdict, SequentialDesign, label_looks  # noqa: E402
from analysis.comparison.sequential_check import recheck_looks  # noqa: E402
from analysis.comparison.shared_time import block_anova  # noqa: E402
from results_schema.codec.io import read_jsonl  # noqa: E402
from results_schema.records.models import CaseRun  # noqa: E402
from results_schema.records.sequential import read_looks  # noqa: E402

DEFAULT_LOOKS = (3, 4, 6)


def _values(run_dir: Path, phase: str) -> tuple[dict[str, dict[int, float]], dict[str, str], int, int]:
    """``label -> {repeat: tok/s}``, ``label -> implementation``, contended processes, processes."""
    vals: dict[str, dict[int, float]] = {}
    impl: dict[str, str] = {}
    contended = total = 0
    for r in read_jsonl(run_dir / f"{phase}-runs.jsonl", CaseRun):
        vals.setdefault(r.record.label, {})[r.record.repeat] = r.record.throughput_tok_s
        impl[r.record.label] = r.record.implementation
        total += 1
        contended += bool(r.record.host_load is not None and r.record.host_load.contended)
    return vals, impl, contended, total


def _in_order(v: dict[int, float]) -> list[float]:
    """The values of blocks 1, 2, ... up to the first missing block (a replay cannot skip a block)."""
    out = []
    while len(out) in v:
        out.append(v[len(out)])
    return out


def _replay(a: dict[int, float], b: dict[int, float], design: SequentialDesign) -> tuple[str, int, bool]:
    """(text, processes the label used or would at least use, whether the replay ran out of data while open)."""
    av, bv = _in_order(a), _in_order(b)
    looks: list[LookVerdict] = label_looks(av, bv, design, with_mde=False)
    if not looks:
        return f"open (data ends before look 1: {len(av)} vs {len(bv)} blocks)", design.looks[0], True
    last = looks[-1]
    d = last.decision
    ci = f"{d.ci_low_pct:+.1f}..{d.ci_high_pct:+.1f}%"
    if last.stopped:
        return f"{last.verdict} at look {last.look} ({ci}), {last.processes}", last.processes, False
    nxt = design.looks[last.look]
    return f"open at look {last.look} ({ci}); data ends, >= {nxt}", nxt, True


def _components(vals: dict[str, dict[int, float]]) -> str:
    blocks = sorted(set.intersection(*(set(v) for v in vals.values())))
    if len(blocks) < 2 or len(vals) < 2:
        return "fewer than 2 blocks complete for every label: no components"
    r = block_anova(np.log(np.array([[v[b] for b in blocks] for v in vals.values()])))
    return (f"block SD {100 * math.sqrt(r.block_var):.1f}%, own SD {100 * math.sqrt(r.ms_error):.1f}% "
            f"({len(vals)} labels x {len(blocks)} complete blocks; F p = {r.p_block:.3f})" if r.p_block is not None
            else "no residual variance")


def _recorded(lines, label: str) -> str:
    for line in lines:
        for x in line.labels:
            if x.label == label and x.verdict != "open":
                return f"{x.verdict} at look {line.look}, {x.processes}"
    return "-"


def run_report(run_dir: Path, phase: str) -> list[str]:
    vals, impl, contended, total = _values(run_dir, phase)
    lines = read_looks(run_dir, phase)
    first = lines[0] if lines else None
    looks = tuple(first.looks) if first else DEFAULT_LOOKS
    base = first.baseline if first else "baseline"
    kw = dict(target_pct=first.target_pct, alpha=first.alpha, spending=first.spending) if first else {}
    designs = {p: SequentialDesign(looks, pairing=p, **kw) for p in ("none", "block")}
    out = [f"### {run_dir.parent.name}/{run_dir.name}", "",
           f"{'sequential, looks ' + str(list(looks)) if first else 'fixed design (rotated cycles as blocks), replayed with looks ' + str(list(looks))}; "
           f"{total} processes, {contended} contended; {_components(vals)}"]
    if first:
        diffs = recheck_looks(lines, {(phase, k): v for k, v in vals.items()})
        out.append(f"recorded looks recomputed (analysis validate's check): {'agree' if not diffs else diffs}")
    out += ["", "| label | recorded | unpaired replay | paired replay |", "|---|---|---|---|"]
    used: dict[str, dict[str, tuple[int, bool]]] = {"none": {}, "block": {}}
    for label in vals:
        if label == base:
            continue
        cells = []
        for p, d in designs.items():
            text, n, ran_out = _replay(vals[label], vals[base], d)
            used[p][label] = (n, ran_out)
            cells.append(text)
        out.append(f"| {label} | {_recorded(lines, label) if first else 'fixed'} | {cells[0]} | {cells[1]} |")
    offload = [lab for lab in used["none"] if impl.get(lab) != "baseline"]
    totals = []
    for p in ("none", "block"):
        u = used[p]
        n = max(x for x, _ in u.values()) + sum(u[lab][0] for lab in offload)
        lower = any(u[lab][1] for lab in u)
        totals.append(f"{'>= ' if lower else ''}{n}")
    out += ["", f"baseline + offload processes ({', '.join(offload)}; the control's own not counted): unpaired "
            f"{totals[0]}, paired {totals[1]}", ""]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--phase", default="same_runtime")
    args = ap.parse_args(argv)
    for run_dir in args.run_dirs:
        print("\n".join(run_report(run_dir, args.phase)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
