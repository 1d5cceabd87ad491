"""Reports of a run directory: ``summary/`` JSON, CSV, Markdown, PNG plots and validation.

What is modelled: ``write_summary(run_dir)`` loads and validates the run,
aggregates per label, compares implementations, fits the transfer-bound model
and writes

    summary/comparison-summary.json   every table (full precision; NaN -> null)
    summary/comparison-summary.csv    the per-label table (full precision)
    summary/comparison-summary.md     every table at printed precision (``PRECISION``)
    summary/validation.json           ``results_schema.records.validation.ValidationReport``
    summary/pareto.png                capacity (released MiB) vs median throughput, front highlighted
    summary/retention.png             retention vs offloaded layers per implementation
    summary/sequential.png            a sequential phase: each label's interval at every look (its own level)
    summary/choice.json               a choose run: its decision from its measurements (``analysis.model.choice``)
    summary/choice.png                a choose run: predicted vs measured retention over every distinct setting
    summary/report.html               self-contained interactive report (``analysis.report.html``)

(``out_dir`` puts them elsewhere; ``python -m analysis report`` never overwrites an existing
``summary/``, which ``SHA256SUMS`` covers). ``run_dir`` is stored resolved (absolute).

and returns the per-label Markdown table (plus the validity line) for the runner to print.
Every number comes from the validated records; offloaded/released bytes and
selected layers come from evidence, never from labels.

Released bytes are *accounted* bytes (what the offloader moved out of the
device-resident set minus its static buffers), not a memory measurement. On the
CPU runtime host and "device" memory are the same RAM: nothing is freed, RSS and
KV-cache capacity do not change, and every output says so (``CPU_NOTE``).

What is deliberately not modelled: accuracy results (``analysis.accuracy.verifier``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT
from analysis.comparison.decision import decision_table
from analysis.report.html import write_report_html
from analysis.report.markdown import render_markdown, verdict_legend
from analysis.comparison.noise_floor import noise_floors
from analysis.comparison.pareto import knee_rule_text
from analysis.report.choice_view import read_choice_view
from analysis.report.plots import plot_choice, plot_pareto, plot_retention, save_png
from analysis.report.sequential_plot import plot_looks
from analysis.report.provenance import one_line, provenance
from analysis.model.choice import write_choice
from analysis.report.tables import CPU_NOTE, PRECISION, build, is_cpu_run, records
from analysis.report.host_memory import host_memory_table
from analysis.validation.checks import token_digest_status
from results_schema.codec.files import write_text_atomic
from results_schema.codec.io import write_json
from results_schema.records.sequential import read_looks
from results_schema.records.summary import ComparisonSummary, Provenance

SUMMARY_DIR = "summary"


def write_summary(run_dir: Path | str, *, model_dir: Path | str | None = None,
                  out_dir: Path | str | None = None, margin_pct: float = DEFAULT_MARGIN_PCT) -> str:
    """Write ``summary/`` for a run directory and return the per-label Markdown table.

    This is the runner's end-of-run call (it writes ``<run_dir>/summary`` before ``SHA256SUMS``
    is computed). ``python -m analysis report`` refuses to overwrite an existing summary and
    passes ``out_dir`` instead.

    Args:
        run_dir: a run directory with ``<phase>-runs.jsonl`` / ``<phase>-failures.jsonl``;
            recorded resolved (absolute) in ``comparison-summary.json``.
        model_dir: model directory for the layer-byte checks; default ``<run_dir>/model`` or the
            records' ``model`` path.
        out_dir: where the files go (default ``<run_dir>/summary``).
        margin_pct: equivalence margin of every verdict (``analysis.comparison.verdict_rule.verdict``).

    Returns:
        The validity line and the per-label Markdown table (label, G, N, selected layers,
        offloaded bytes, throughput tok/s, retention vs baseline, Pareto flag, ...).

    Raises:
        FileNotFoundError: no run files in ``run_dir``.
    """
    run_dir = Path(run_dir).resolve()
    tables = build(run_dir, model_dir=model_dir, margin_pct=margin_pct)
    out = run_dir / SUMMARY_DIR if out_dir is None else Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cpu = is_cpu_run(tables["data"].runs)
    write_json(out / "validation.json", tables["validation"])
    prov = provenance(run_dir, tables["data"])
    write_json(out / "comparison-summary.json", summary_document(run_dir, tables, prov, cpu=cpu))
    write_text_atomic(out / "comparison-summary.csv", tables["summary"].to_csv(index=False))
    full, main = render_markdown(tables)
    choice = write_choice(run_dir, tables, out)  # a choose run: the decision from its measurements
    if choice:
        full += "\n## Choose, then confirm\n\n" + "\n".join(f"- {x}" for x in choice) + "\n"
    vline = main.split("\n", 1)[0]  # the validity line stays first; provenance right under it
    write_text_atomic(out / "comparison-summary.md", full.replace(vline + "\n", f"{vline}\n\n{one_line(prov)}\n", 1))
    if not tables["summary"].empty:
        _write_plots(tables["summary"], out, one_line(prov), cpu=cpu)
    looks = read_looks(run_dir)
    if looks:  # a sequential phase: each label's interval over its looks
        save_png(plot_looks(looks, note=one_line(prov)), out / "sequential.png")
    view = read_choice_view(run_dir, out) if choice else None
    if view is not None and view.points:
        save_png(plot_choice(view, note=one_line(prov)), out / "choice.png")
    write_report_html(run_dir, out)
    return main


def summary_document(run_dir: Path, tables: dict, prov: Provenance, *, cpu: bool) -> ComparisonSummary:
    """The ``comparison-summary.json`` document of ``analysis.report.tables.build``'s tables (validated by its model).

    Raises:
        pydantic.ValidationError: a table does not fit the schema (nothing is written then).
    """
    return ComparisonSummary.model_validate({
        "schema_version": 1,
        "run_dir": str(run_dir),
        "valid": tables["validation"].valid,
        "notes": [CPU_NOTE] if cpu else [],
        "precision": PRECISION,
        "provenance": prov,
        "margin_pct": tables["margin_pct"],
        "verdict_rule": verdict_legend(tables["margin_pct"]),
        "knee_rule": knee_rule_text(),
        "rows": records(tables["summary"]),
        "decision": records(decision_table(tables["data"], tables["summary"], tables["validation"],
                                          margin_pct=tables["margin_pct"])),
        "comparison": records(tables["comparison"]),
        "long_window": records(tables["long_window"]),
        "spaced_vs_adjacent": records(tables["spaced_vs_adjacent"]),
        "cross_stack": records(tables["cross_stack"]),
        "confirmation": records(tables["confirmation"]),
        "token_digests": [{"phase": p, "label": lb, "repeat": rep, "status": st}
                          for (p, lb, rep), st in sorted(token_digest_status(tables["data"]).items())],
        "models": tables["models"],
        "model_table": records(tables["model_table"]),
        "noise_floor": noise_floors(tables["data"].runs),
        "host_memory": records(host_memory_table(tables["data"])),
        "variance_components": tables["variance"],
        "shared_in_time": tables["shared"],
        "detectable_effects": tables["effects"],
        "aa_comparisons": tables["aa"],
        "dimensioning": tables["dimensioning"],
    })


def _write_plots(summary: pd.DataFrame, out: Path, note: str, *, cpu: bool) -> None:
    """``pareto.png`` and ``retention.png`` of ``summary`` with ``note`` (the provenance line) at the bottom."""
    for name, plot in (("pareto.png", plot_pareto), ("retention.png", plot_retention)):
        save_png(plot(summary, cpu=cpu, note=note), out / name)
