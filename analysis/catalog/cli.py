"""``python -m analysis catalog build|compare|query`` (see ``docs/catalog.md``).

    catalog build RESULTS_DIR [--db FILE] [--force]    load every run directory (incremental, idempotent)
    catalog compare RUN_A RUN_B [--db FILE] [--any-phase] [--margin-pct X]
                                                        pair labels by setting; interval verdicts (B vs A)
    catalog query "SQL" [--db FILE] [--csv]             any read-only SQL over the tables and views

Exit status: 0 done; 1 compare found an INVALID pair or no pair; 2 bad input (missing directory or
catalog, unknown run, SQL error, locked database), with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.comparison.verdict_rule import MARGIN_PCT_RANGE

if TYPE_CHECKING:  # rich and pandas load only when a catalog command runs
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

DEFAULT_DB = Path("results") / "catalog.duckdb"


def add_parser(sub) -> None:
    """Register the ``catalog`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser("catalog", help="DuckDB catalog across run directories (build, compare, query)",
                       description=__doc__.splitlines()[0])
    csub = p.add_subparsers(dest="catalog_command", required=True)
    b = csub.add_parser("build", help="load every run directory under RESULTS_DIR")
    b.add_argument("results_dir", type=Path)
    b.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"catalog file (default {DEFAULT_DB})")
    b.add_argument("--force", action="store_true", help="reload runs whose files did not change")
    c = csub.add_parser("compare", help="pair labels of two runs and print interval verdicts (B vs A)")
    c.add_argument("run_a")
    c.add_argument("run_b")
    c.add_argument("--db", type=Path, default=DEFAULT_DB)
    c.add_argument("--any-phase", action="store_true", help="pair labels of different phases too")
    c.add_argument("--margin-pct", type=MARGIN_PCT_RANGE.arg_type(), default=None,
                   help="equivalence margin for the verdict (percent; default: analysis.comparison.compare's)")
    q = csub.add_parser("query", help="run read-only SQL")
    q.add_argument("sql")
    q.add_argument("--db", type=Path, default=DEFAULT_DB)
    q.add_argument("--csv", action="store_true", help="print CSV instead of a table")


def _fmt(v, d=2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{d}f}"
    return str(v)


def _console() -> Console:
    """A rich console; off a terminal: wide (200 columns) and without colour codes."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 200), color_system=None)
    return console


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``catalog`` command; returns the exit status."""
    from analysis.catalog.store import CatalogError

    console = _console()
    commands = {"build": _build, "query": _query}
    try:
        return commands.get(args.catalog_command, _compare)(args, console)
    except CatalogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _build(args: argparse.Namespace, console: Console) -> int:
    from analysis.catalog.store import build, query

    res = build(args.results_dir, args.db)
    for r in res:
        console.print(f"{r.action:9} {r.run_id}  ({r.processes} processes)  {r.run_dir}", markup=False)
    n = query(args.db, "SELECT count(*) AS n FROM runs")["n"].iloc[0]
    console.print(f"catalog {args.db}: {n} run(s)", markup=False)
    return 0


def _query(args: argparse.Namespace, console: Console) -> int:
    from analysis.catalog.store import query

    from rich.table import Table

    df = query(args.db, args.sql)
    if args.csv:
        sys.stdout.write(df.to_csv(index=False))
        return 0
    t = Table(show_lines=False)
    for c in df.columns:
        t.add_column(str(c), overflow="fold")
    for row in df.itertuples(index=False):
        t.add_row(*[_fmt(v, 4) for v in row])
    console.print(t)
    console.print(f"{len(df)} row(s)")
    return 0


def _compare(args: argparse.Namespace, console: Console) -> int:
    from analysis.catalog.store import CatalogError
    from analysis.catalog.compare import DIFF_FIELDS, compare_runs

    if args.margin_pct is not None and not (math.isfinite(args.margin_pct) and args.margin_pct > 0):
        raise CatalogError(f"--margin-pct {args.margin_pct}: must be a finite percentage > 0 (e.g. 5)")
    df, runs = compare_runs(args.db, args.run_a, args.run_b, match_phase=not args.any_phase,
                            margin_pct=args.margin_pct)
    a, b = runs["a"], runs["b"]
    for k, r in (("A", a), ("B", b)):
        console.print(f"{k}: {r['run_id']}  {'VALID' if r['valid'] else 'INVALID'}  host {r['hostname']}  "
                      f"device {r['device_name']}  vllm {r['vllm_version']}  model {r['model_name']}  "
                      f"{r['run_dir']}", markup=False)
    diff = [f for f in DIFF_FIELDS if str(a.get(f)) != str(b.get(f))]
    console.print("differs: " + (", ".join(diff) if diff else "nothing recorded (same stack and host)"),
                  markup=False)
    console.print(_compare_table(df))
    _print_metrics(args, console)
    if df.empty:
        console.print("no label of A has the same setting as a label of B"
                      + ("" if args.any_phase else " in the same phase (try --any-phase)"), markup=False)
        return 1
    counts = df["verdict"].value_counts().to_dict()
    console.print("verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()), markup=False)
    for r in df[df["verdict"] == "withheld"].itertuples(index=False):
        console.print(f"withheld: {r.phase_a}/{r.label_a} vs {r.phase_b}/{r.label_b}: {r.issues}", markup=False)
    return 1 if "INVALID" in counts else 0


def _print_metrics(args: argparse.Namespace, console: Console) -> None:
    """The per-record metric and serving comparisons (``analysis.catalog.compare_metrics``)."""
    from rich.table import Table

    from analysis.catalog.compare_metrics import compare_metrics

    m = compare_metrics(args.db, args.run_a, args.run_b, margin_pct=args.margin_pct)
    if m.empty:
        console.print("per-record metrics and serving results: no pair with values on both sides", markup=False)
        return
    t = Table(title="B vs A per setting and metric (better/worse: B better/worse than A, lower latency, memory "
                    "and load time being better; 95% t interval of B / A - 1, ratio of geometric means)", title_justify="left")
    for name in ("table", "phase", "label A", "label B", "rate", "metric", "n A/B", "A", "B", "delta %",
                 "CI95 %", "verdict"):
        t.add_column(name, no_wrap=True)
    for r in m.itertuples(index=False):
        ci = f"{r.ci_low_pct:+.1f}..{r.ci_high_pct:+.1f}" if math.isfinite(r.ci_low_pct) else "none"
        t.add_row(r.table, r.phase, r.label_a, r.label_b, r.request_rate, r.metric, f"{r.n_a}/{r.n_b}",
                  _fmt(r.median_a, 4), _fmt(r.median_b, 4), f"{r.delta_pct:+.1f}", ci, r.verdict)
    console.print(t)


def _compare_table(df: pd.DataFrame) -> Table:
    """The B-vs-A table of ``analysis.catalog.compare.compare_runs``'s pairs."""
    from rich.table import Table

    t = Table(title="B vs A per setting (verdict: B is faster/slower/equivalent than A; 95% t interval "
                    "of B / A - 1 over processes, ratio of geometric means)", title_justify="left")
    for name in ("phase", "label A", "label B", "n A/B", "A tok/s", "B tok/s", "delta %", "CI95 %",
                 "ret. A", "ret. B", "released A", "released B", "verdict"):
        t.add_column(name, no_wrap=True)
    t.add_column("issues", overflow="fold")
    for r in df.itertuples(index=False):
        ci = f"{r.ci_low_pct:+.1f}..{r.ci_high_pct:+.1f}" if math.isfinite(r.ci_low_pct) else "none"
        phase = r.phase_a if r.phase_a == r.phase_b else f"{r.phase_a}/{r.phase_b}"
        t.add_row(phase, r.label_a, r.label_b, f"{r.processes_a}/{r.processes_b}", _fmt(r.median_a_tok_s),
                  _fmt(r.median_b_tok_s), f"{r.delta_pct:+.1f}", ci, _fmt(r.retention_a, 3),
                  _fmt(r.retention_b, 3), f"{int(r.released_bytes_a):,}", f"{int(r.released_bytes_b):,}",
                  r.verdict, r.issues)
    return t
