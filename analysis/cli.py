"""``python -m analysis``: report, verify, validate and recommend over a run directory.

Subcommands:
    report RUN_DIR [--out DIR] [--margin-pct M] [--allow-invalid]
                                        write RUN_DIR/summary (or DIR, a new directory) and print the per-label
                                        table (a run with a serving phase: its serving summary and figures
                                        too, ``analysis.serving.summary``); the last line is the verdict (``validation: INVALID: failing
                                        checks ...; cases ...``); exit 1 if invalid unless --allow-invalid;
                                        never overwrites an existing summary (exit 2)
    validate RUN_DIR                    print the validation report; last line VALID / INVALID naming the
                                        failing checks and cases (exit 1 if invalid)
    verify RUN_DIR                      recompute the summary from raw JSONL; exit 1 unless max diff is 0
    recommend RUN_DIR --need-gib X      best valid measured point releasing >= X GiB, plus model predictions
                                        ([--phase P] [--implementation I]: unknown names exit 2 listing choices);
                                        a choose run (choose-decisions.jsonl) first prints its measured decision
                                        (summary/choice.json) and whether X is its own need; --phase defaults to
                                        its verify phase there
    recommend RUN_DIR --need-kv-gib X   same for a KV-cache gain of X GiB
    transfer-check FILE.json [--modes graph] [--threshold-pct 5]
                                        the step model (per protocol boundary) against a GPU check JSON
                                        (python -m offload_tools.gpu_check_torch): one JSON line with per-point
                                        predicted / measured step and max_abs_error_pct; exit 1 above the threshold
    pareto FILE.csv                     Pareto front and planner's knee of any table with columns
                                        label,capacity_bytes,throughput_tok_s; prints JSON {"front", "knee"}
    accuracy-verify DIR [--limit N] [--manifest PATH] [--max-accuracy-drop F] [--report-dir DIR] [--no-write]
                                        accuracy-equivalence verifier (= python -m analysis.accuracy.verifier);
                                        exit 0 passed, 1 failed, 2 unreadable input
    catalog build|compare|query ...     DuckDB catalog across run directories (analysis.catalog.cli, docs/catalog.md)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from analysis.accuracy.verifier import ROW_LIMIT_RANGE
from analysis.comparison.verdict_rule import MARGIN_PCT_RANGE
from results_schema.rules.number_rule import NumberRange


EXIT_INVALID = 1
"""Exit status of ``report`` / ``validate`` for an INVALID run (``report --allow-invalid``: 0)."""

GIB_NEED = NumberRange(unit="GiB")
BANDWIDTH_GBPS = NumberRange(low=0, low_open=True, unit="GB/s")
THRESHOLD_PCT = NumberRange(unit="percent")


class OneLineParser(argparse.ArgumentParser):
    """An ``argparse`` parser whose refusal is one line (``python -m analysis recommend: error: argument
    --need-gib: nan: must be a finite number >= 0 (GiB); see --help``), exit 2, instead of a usage block."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message>; see --help`` to stderr and exit 2."""
        print(f"{self.prog}: error: {message}; see --help", file=sys.stderr)
        sys.exit(2)


def _read_validation(path: Path):
    from results_schema.codec.io import read_json
    from results_schema.records.validation import ValidationReport

    return read_json(path, ValidationReport)


def _add_accuracy_verify(sub: "argparse._SubParsersAction[OneLineParser]") -> None:
    """The ``accuracy-verify`` subcommand's parser (options of ``python -m analysis.accuracy.verifier``)."""
    p = sub.add_parser("accuracy-verify", help="accuracy-equivalence verifier over accuracy case files",
                       description="Verify accuracy case files under DIR (searched recursively for *.result.json; "
                                   "for a runners.matrix run give DIR=<run_dir>/records/<phase>). Delegates to "
                                   "analysis.accuracy.verifier; formal mode unless --limit is given.")
    p.add_argument("run_dir", type=Path, metavar="DIR")
    p.add_argument("--limit", type=ROW_LIMIT_RANGE.arg_type(integer=True), default=None,
                   help="limited (smoke) mode: cases ran min(N, rows) examples; omit for formal mode")
    p.add_argument("--manifest", default=None, help="dataset manifest (default: the one each case recorded)")
    p.add_argument("--max-accuracy-drop", default=None, metavar="F", help="drop tolerance, fraction in [0, 1]")
    p.add_argument("--report-dir", default=None, help="where accuracy-verification.{json,md,csv} go (default: DIR)")
    p.add_argument("--no-write", action="store_true", help="print only; do not write the report files")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = OneLineParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report", help="write summary/ and print the table")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, default=None,
                   help="write the report into this new directory (required when RUN_DIR/summary exists: "
                        "it is covered by SHA256SUMS and is never overwritten)")
    p.add_argument("--model-dir", type=Path, default=None, help="model directory for layer-byte checks")
    p.add_argument("--margin-pct", type=MARGIN_PCT_RANGE.arg_type(), default=None,
                   help="equivalence margin of every verdict, percent of the reference median (default 5)")
    p.add_argument("--allow-invalid", action="store_true",
                   help="exit 0 even when the run is INVALID (the report still says INVALID)")
    p = sub.add_parser("validate", help="print the validation report")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--model-dir", type=Path, default=None,
                   help="model directory for layer-byte checks (default: run_dir/model or the records' model path)")
    p = sub.add_parser("verify", help="independent recomputation of the summary")
    p.add_argument("run_dir", type=Path)
    p = sub.add_parser("recommend", help="pick a setting for a capacity need")
    p.add_argument("run_dir", type=Path)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--need-gib", type=GIB_NEED.arg_type(), help="memory to release (GiB, >= 0; compared with evidence-accounted released bytes)")
    g.add_argument("--need-kv-gib", type=GIB_NEED.arg_type(), help="KV cache gain needed (GiB, >= 0)")
    p.add_argument("--phase", default=None, help="phase of the run (default: a choose run's verify phase, else "
                                                 "the one with most labels)")
    p.add_argument("--implementation", default="current",
                   help="offload implementation whose measured points are candidates (the baseline always is)")
    p.add_argument("--bandwidth-gbps", type=BANDWIDTH_GBPS.arg_type(), default=None, help="host-to-device GB/s (default: fitted)")
    p.add_argument("--margin-pct", type=MARGIN_PCT_RANGE.arg_type(), default=None,
                   help="equivalence margin of the verdicts printed, percent (default 5)")
    p = sub.add_parser("pareto", help="front and knee of a CSV table (label,capacity_bytes,throughput_tok_s)")
    p.add_argument("csv", type=Path, metavar="FILE.csv")
    p = sub.add_parser("transfer-check", help="step model vs a GPU check JSON (analysis.model.transfer_check)")
    p.add_argument("file", type=Path, metavar="FILE.json")
    p.add_argument("--modes", nargs="+", default=None, help="modes to compare (eager graph compile; default all)")
    p.add_argument("--threshold-pct", type=THRESHOLD_PCT.arg_type(), default=5.0, help="largest |error| in percent for exit 0")
    _add_accuracy_verify(sub)
    from analysis.catalog.cli import add_parser as add_catalog

    add_catalog(sub)
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    """Dispatch a parsed command line to its subcommand; returns the exit status."""
    commands = {"catalog": _catalog, "pareto": _pareto, "transfer-check": _transfer_check, "accuracy-verify": _accuracy_verify, "report": _report,
                "validate": _validate, "verify": _verify}
    return commands.get(args.command, _recommend)(args)


def _transfer_check(args: argparse.Namespace) -> int:
    from analysis.model.transfer_check import main as transfer_main

    return transfer_main(args.file, args.modes, args.threshold_pct)


def _catalog(args: argparse.Namespace) -> int:
    from analysis.catalog.cli import run as catalog_run

    return catalog_run(args)


def _pareto(args: argparse.Namespace) -> int:
    import json

    from analysis.comparison.pareto import front_and_knee, read_front_csv

    try:
        labels, cap, thr = read_front_csv(args.csv)
        out = front_and_knee(labels, cap, thr)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


def _accuracy_verify(args: argparse.Namespace) -> int:
    from analysis.accuracy.verifier import main as accuracy_main

    argv = [str(args.run_dir)]
    for flag, value in (("--limit", args.limit), ("--manifest", args.manifest), ("--report-dir", args.report_dir),
                        ("--max-accuracy-drop", args.max_accuracy_drop)):
        if value is not None:
            argv += [flag, str(value)]
    if args.no_write:
        argv.append("--no-write")
    return accuracy_main(argv)


def _report_target_error(args: argparse.Namespace) -> str | None:
    """Why ``report`` may not write where it was asked to (None: it may)."""
    existing = args.run_dir / "summary"
    if args.out is None and existing.exists():
        return (f"error: {existing} already exists (written by the run and covered by its SHA256SUMS); "
                f"refusing to overwrite it. Give --out DIR (a new directory) to write a fresh report there.")
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        return (f"error: --out {args.out} already exists and is not an empty directory; refusing to overwrite "
                f"it. Give a new directory.")
    return None


def _report(args: argparse.Namespace) -> int:
    from analysis.report.summary import write_summary
    from results_schema.records.serving import SERVING_SUFFIX

    refusal = _report_target_error(args)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    if not args.run_dir.is_dir():
        raise FileNotFoundError(f"run directory {args.run_dir} does not exist")
    out = args.run_dir / "summary" if args.out is None else args.out
    kw = {} if args.margin_pct is None else {"margin_pct": args.margin_pct}
    text = write_summary(args.run_dir, model_dir=args.model_dir, out_dir=out, **kw)
    print(text)
    if any(args.run_dir.glob(f"*{SERVING_SUFFIX}")):  # a serving phase: its tables and figures too
        from analysis.serving.summary import write_serving_summary

        print(write_serving_summary(args.run_dir, out))
    print(f"wrote {out.resolve()}")
    rep = _read_validation(out / "validation.json")
    print(rep.verdict() + (" (--allow-invalid: exit 0)" if not rep.valid and args.allow_invalid else ""))
    return 0 if rep.valid or args.allow_invalid else EXIT_INVALID


def _validate(args: argparse.Namespace) -> int:
    from analysis.validation.validate import validate_run

    rep = validate_run(args.run_dir, model_dir=args.model_dir)
    for c in rep.counts:
        exp = "?" if c.expected is None else c.expected
        print(f"count {c.phase}/{c.label}: expected {exp}, runs {c.runs}, failures {c.failures}")
    for check in rep.checks:
        print(f"{'ok  ' if check.passed else 'FAIL'} {check.name}: {check.errors} error(s), {check.warnings} warning(s)")
    for i in rep.issues:
        print(f"{i.severity}: {i.code}: {i.message}")
    print(rep.verdict())
    return 0 if rep.valid else EXIT_INVALID


def _verify(args: argparse.Namespace) -> int:
    from analysis.verify import verify

    res = verify(args.run_dir)
    for m in res.mismatches[:50]:
        print(f"mismatch: {m}")
    print(f"compared {res.compared} values; max abs difference {res.max_abs_diff:.3g} raw, "
          f"{res.max_abs_diff_printed:g} at printed precision")
    print("OK" if res.ok else "FAILED")
    return 0 if res.ok else 1


def _recommend(args: argparse.Namespace) -> int:
    from offload_tools.layer_bytes import kv_bytes_per_token, load_config
    from analysis.model.fit import ChoiceError, recommend
    from analysis.report.tables import CPU_NOTE, build, copy_bench_bandwidth, is_cpu_run
    from analysis.validation.validate import find_model_dir

    kw = {} if args.margin_pct is None else {"margin_pct": args.margin_pct}
    tables = build(args.run_dir, **kw)
    data = tables["data"]
    phase = _choose_preamble(args, tables)
    mdir = find_model_dir(data)
    kvb = None
    if mdir is not None and not data.runs.empty:
        kvb = kv_bytes_per_token(load_config(mdir), str(data.runs["dtype"].iloc[0]))
    try:
        rec = recommend(tables["summary"], data.runs, need_gib=args.need_gib, need_kv_gib=args.need_kv_gib,
                        phase=phase, implementation=args.implementation,
                        bandwidth_bytes_s=None if args.bandwidth_gbps is None else args.bandwidth_gbps * 1e9,
                        valid=tables["validation"].valid, kv_bytes_per_token=kvb,
                        margin_pct=tables["margin_pct"], bench_bandwidth_bytes_s=copy_bench_bandwidth(args.run_dir))
    except ChoiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if is_cpu_run(data.runs):
        rec.lines.insert(0, "note: " + CPU_NOTE)
    for line in rec.lines:
        print(line)
    if rec.best is None:
        return 1
    print(f"recommendation: {rec.best['label']} (G={rec.best['group_size']}, N={rec.best['num_in_group']}, "
          f"prefetch_step={rec.best['prefetch_step']})" + (f"; {rec.verdict}" if rec.verdict else ""))
    return 0


def _choose_preamble(args: argparse.Namespace, tables: dict) -> str | None:
    """A choose run: print that it is one, its measured decision and whether the asked need is its own; return
    the phase of the measured-point recommendation that follows (``--phase``, else the run's verify phase)."""
    from analysis.model.choice import read_decisions
    from analysis.report.choice_view import measured_choice_lines, need_differs
    from results_schema.records.choice import verify_phase

    decisions = read_decisions(args.run_dir)
    if not decisions:
        return args.phase
    lines, source = measured_choice_lines(args.run_dir, tables)
    print(f"choose run: choose, then confirm ({len(decisions)} decision line(s) in choose-decisions.jsonl); "
          f"its measured decision ({source}):")
    for line in lines:
        print(f"  {line}")
    differs = need_differs(decisions[0], args.need_gib, args.need_kv_gib)
    print(f"note: {differs}; the measured-point recommendation below is for the asked need" if differs else
          f"note: the asked need is this run's own ({decisions[0].need_source})")
    measured = set(tables["summary"]["phase"]) if not tables["summary"].empty else set()
    phase = args.phase or (verify_phase(decisions) if verify_phase(decisions) in measured else None)
    print(f"measured-point recommendation (measured settings only; phase {phase or 'with the most labels'}"
          + ("" if args.phase else ", --phase to pick another") + "):")
    return phase
