"""End-of-run console output: a rich table of the columns a person decides on, the verdict last.

What is modelled: one row per (phase, label) of the decision table in
``summary/comparison-summary.json`` (read strictly as ``results_schema.records.summary.ComparisonSummary``):
label, implementation, G, N, offloaded layers, released GiB, KV gain, median throughput (tok/s),
retention with its 95% interval, tokens vs baseline, Pareto / knee, and last the verdict with its
reasons (validation error codes of the label; ``unstable (...)``). A verdict resting on a contended process
reads ``withheld: contended (N of M processes)``; under the table, how many cases a busy host contended. Under the table: the run's validation verdict with
every error (never summarised as ok), the caveats, and where the full Markdown and HTML are.

What is deliberately not modelled: the full tables (they stay in ``summary/comparison-summary.md``).
"""

from __future__ import annotations

import math
from typing import Literal
from pathlib import Path

from rich.console import Console
from rich.table import Table

from analysis.comparison.decision import ci_cell, ci_header, reasons_cell, verdict_cell
from analysis.model.trust import model_lines
from analysis.comparison.noise_floor import floor_lines
from analysis.comparison.dimensioning import dimensioning_lines
from analysis.comparison.power import power_lines
from analysis.comparison.shared_time import shared_lines
from analysis.comparison.inprocess import record_rows, report_lines
from analysis.comparison.sequential_check import look_table
from analysis.load import RUNS_SUFFIX, load_run
from results_schema.records.sequential import read_looks
from analysis.report.released import released_cell
from results_schema.codec.io import read_json
from results_schema.records.validation import CONTENDED_CODE, ValidationReport
from results_schema.records.summary import ComparisonSummary

VERDICT_STYLE = {"INVALID": "bold red", "slower": "yellow", "faster": "green", "equivalent": "cyan",
                 "inconclusive": "dim", "withheld": "magenta", "baseline": ""}



def _f(v, d: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:,.{d}f}"


def decision_table(cs: ComparisonSummary) -> Table:
    """The rich table of ``cs.decision`` (see module docstring)."""
    multi = len({r.phase for r in cs.decision}) > 1
    t = Table(title=f"{'VALID' if cs.valid else 'INVALID'} — run {cs.provenance.run_id}", title_justify="left",
              show_lines=False, header_style="bold")
    if multi:
        t.add_column("phase")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (("label", "left"), ("G", "right"), ("N", "right"), ("layers", "left"),
                       ("released GiB", "right"), ("KV gain tok", "right"), ("tok/s", "right"),
                       ("retention", "right"), (ci_header((r.retention_ci_name for r in cs.decision), ""), "right"), ("tokens", "left"), ("front", "left"),
                       ("verdict", "left"))
    for name, just in columns:
        t.add_column(name, justify=just, no_wrap=True)
    t.add_column("reasons", overflow="fold")
    for r in cs.decision:
        ci = ci_cell(r.retention_ci_low, r.retention_ci_high, r.retention_ci_name)
        front = ("Pareto" if r.pareto else "") + (" knee" if r.knee else "")
        style = VERDICT_STYLE.get(r.verdict, "")
        cells = ([r.phase] if multi else []) + [
            r.label, str(r.group_size), str(r.num_in_group), r.selected_layers or "–",
            released_cell(r.released_bytes), _f(r.kv_gain_tokens, 0), _f(r.throughput_median_tok_s),
            _f(r.retention, 3), ci, r.tokens, front.strip(),
            f"[{style}]{verdict_cell(r.verdict, r.withheld)}[/]" if style else verdict_cell(r.verdict, r.withheld),
            reasons_cell(r.issues, r.unstable)]
        t.add_row(*cells)
    return t


def soundness_lines(cs: ComparisonSummary, val: ValidationReport) -> list[str]:
    """How many cases a busy host contended, each one's foreign cores, and the labels withheld or unstable."""
    lines = []
    contended = val.contended_line()
    if contended:
        lines.append(f"host: {contended}; verdicts resting on them are withheld and their points kept off the front")
        lines += [f"  {i.message}" for i in val.warnings if i.code == CONTENDED_CODE]
    lines += [f"withheld: {r.phase}/{r.label}: {r.withheld}" for r in cs.decision if r.verdict == "withheld"]
    lines += [f"{r.unstable.split(' ', 1)[0]}: {r.phase}/{r.label}: {r.unstable}" for r in cs.decision if r.unstable]
    return lines


def print_host_memory(cs: ComparisonSummary, console: Console) -> None:
    """One line per label: host bytes per offloaded / released byte, the bytes the offloader's own storage explains,
    the flag (``analysis.report.host_memory.flag_reason``), the sources and the CPU meaning."""
    from analysis.report.host_memory import CPU_HOST_NOTE, EVIDENCE, EXPLAINED_RULE, flag_reason

    if not cs.host_memory:
        return
    for r in cs.host_memory:
        per_off, per_rel = r.get("host_per_offloaded"), r.get("host_per_released")
        explained = (f"; explained {_f(r.get('explained_host_bytes'), 0)} B, excess "
                     f"{_f(r.get('excess_per_offloaded'), 3)} per offloaded B" if r.get("offloaded_bytes") else "")
        reason = flag_reason(dict(r))
        console.print(f"host memory {r['phase']}/{r['label']}: {_f(per_off, 3)} host B per offloaded B, "
                      f"{_f(per_rel, 3)} per released B (host delta {_f(r.get('host_delta_bytes'), 0)} B over "
                      f"{_f(r.get('offloaded_bytes'), 0)} B offloaded{explained})"
                      + (f"  FLAG: {reason}" if reason else ""), markup=False)
    sources = sorted({str(r["host_source"]) for r in cs.host_memory})
    console.print(f"host memory sources: {'; '.join(sources)}; {EVIDENCE}. {EXPLAINED_RULE}", style="dim",
                  markup=False)
    if any(x.runtime == "cpu" for x in cs.rows):
        console.print(f"note: {CPU_HOST_NOTE}", style="dim", markup=False)


def _print_choice(out_dir: Path, console: Console) -> None:
    """A choose run's decision (``summary/choice.json``), misses and an untrusted model in yellow."""
    from results_schema.records.choice import SUMMARY_FILE, ChoiceSummary

    if not (out_dir / SUMMARY_FILE).is_file():
        return
    for line in read_json(out_dir / SUMMARY_FILE, ChoiceSummary).lines:
        bad = "MISSED" in line or "NOT TRUSTED" in line or "NONE" in line
        console.print(line, markup=False, style="yellow" if bad else "bold" if line.startswith("recommended") else "")


def _print_looks(out_dir: Path, console: Console) -> None:
    """A sequential phase's looks (``sequential-decisions.jsonl`` of the run, ``out_dir``'s parent): each label's
    interval per look (``analysis.comparison.sequential_check.look_table``)."""
    for line in look_table(read_looks(out_dir.parent)):
        console.print(line, markup=False)


def print_noise_levels(cs: ComparisonSummary, console: Console) -> None:
    """Where the noise lives and what the run could resolve (``analysis.comparison.power.power_lines``), then
    whether it is shared by the arms of one block of time (``analysis.comparison.shared_time.shared_lines``);
    each estimator's line dim."""
    for line in power_lines(cs.variance_components, cs.detectable_effects, cs.decision):
        console.print(line, markup=False, style="dim" if line.startswith("variance estimator") else "")
    for line in shared_lines(cs.shared_in_time):
        console.print(line, markup=False, style="dim" if line.startswith("shared-in-time model") else "")


def _print_inprocess(out_dir: Path, console: Console) -> None:
    """The in-process copy share of the run (``out_dir``'s parent), per process and pooled, when it has in-process
    cases (``analysis.comparison.inprocess``; not the verdict of record)."""
    run_dir = out_dir.parent
    if not any(run_dir.glob(f"*{RUNS_SUFFIX}")):
        return
    data = load_run(run_dir)
    for line in report_lines(record_rows(cr.record for _p, _l, cr in data.case_runs)):
        console.print(line, markup=False, style="yellow" if "DIFFER" in line else "")


def print_summary(out_dir: Path | str, console: Console | None = None) -> bool:
    """Print the decision table, then the validation verdict and its reasons; return ``valid``.

    Args:
        out_dir: a summary directory written by ``analysis.report.summary.write_summary``.
        console: where to print (default: a new ``rich.console.Console``).

    Raises:
        FileNotFoundError / results_schema.codec.io.RecordError: a summary file is missing or invalid.
    """
    out_dir = Path(out_dir)
    console = console or Console()
    cs = read_json(out_dir / "comparison-summary.json", ComparisonSummary)
    val = read_json(out_dir / "validation.json", ValidationReport)
    if cs.decision:
        # a log file or pipe gets the whole table (rich assumes 80 columns when not on a terminal)
        wide = console if console.is_terminal else Console(file=console.file, width=max(console.width, 170),
                                                           color_system=None)
        wide.print(decision_table(cs))
    else:
        console.print("no throughput case produced a record (a serving or accuracy phase reports on its own below)")
    print_host_memory(cs, console)
    for n in cs.notes:
        console.print(f"note: {n}", style="dim", markup=False)
    for line in model_lines(cs.models, cs.model_table):
        console.print(line, markup=False, style="yellow" if "UNTRUSTED" in line else "")
    for line in floor_lines(cs.noise_floor, cs.decision, cs.margin_pct):
        console.print(line, markup=False, style="yellow" if line.startswith("below") or "DIFFER" in line else "")
    print_noise_levels(cs, console)
    for line in dimensioning_lines(list(cs.aa_comparisons), list(cs.dimensioning)):
        console.print(line, markup=False, style="yellow" if "NOT AS EXPECTED" in line else "")
    if any(r.knee for r in cs.decision):
        console.print(f"knee rule: {cs.knee_rule}", style="dim", markup=False)
    for line in soundness_lines(cs, val):
        console.print(line, markup=False, style="magenta")
    _print_choice(out_dir, console)
    _print_looks(out_dir, console)
    _print_inprocess(out_dir, console)
    console.print(f"full tables: {out_dir / 'comparison-summary.md'}; report: {out_dir / 'report.html'}",
                  markup=False)
    head = "VALID" if val.valid else "INVALID"
    console.print(f"[{'bold green' if val.valid else 'bold red'}]validation: {head}[/] "
                  f"({len(val.errors)} error(s), {len(val.warnings)} warning(s))"
                  + (f"; {val.contended_line()}" if val.contended_line() else ""), markup=True)
    for c in val.checks:
        if not c.passed:
            console.print(f"  failed check {c.name}: {c.errors} error(s)", style="red", markup=False)
    for i in val.errors:
        where = "/".join(str(x) for x in (i.phase, i.label, i.repeat) if x is not None)
        console.print(f"  error {i.code}{f' [{where}]' if where else ''}: {i.message}", style="red", markup=False)
    return val.valid
