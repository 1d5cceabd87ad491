"""``summary/report.html``: one self-contained, interactive page per run.

What is modelled: a page rendered only from the files the report step wrote
(``comparison-summary.json`` -> ``results_schema.records.summary.ComparisonSummary``, ``validation.json`` ->
``ValidationReport``, ``accuracy-verification.json`` -> ``AccuracyVerification`` and ``serving-summary.json`` ->
``ServingSummary`` where present) and
the run's ``*-failures.jsonl``, in this order:

    1. the validation verdict (VALID / INVALID) with every failing check, every error and every
       failed case; warnings below it;
    2. provenance (model, hardware, ISA, runtime versions, run id, config hash, git revision);
    3. the decision table (released GiB, KV gain, retention with interval, verdict, tokens vs baseline);
       a choose run (``choose-decisions.jsonl``): "Choose, then confirm" below it, its decision lines
       (``summary/choice.json``) and predicted vs measured over the whole grid (``analysis.report.html_choice``);
    4. the interactive Pareto plot, retention and latency plots (``analysis.report.html_figures``, SVG);
    5. accuracy verification when present (per report: its cases, the first examples of each task as text,
       the baseline's reply beside each offload case's, and its failed checks); current-vs-official verdicts
       when present;
       a run with ``serving-summary.json``: the serving section (``analysis.report.html_serving``: verdicts vs the
       baseline's floor, the per-request output comparison, percentiles with their n, rate-order effects);
    6. a glossary (``analysis.comparison.decision.GLOSSARY``) and links to the raw files (relative paths).

Self-contained: plotly.js is inlined once per page (``plotly.offline.get_plotlyjs``) and each figure
is written without it (``include_plotlyjs=False``); no element has an outside ``src`` or ``href``,
so the page renders offline (``include_plotlyjs="cdn"`` would render blank offline).

What is deliberately not modelled: computing anything; every number is read from the files above.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import plotly.io as pio
from plotly.offline import get_plotlyjs

from analysis.accuracy.table import paired_cell
from analysis.comparison.decision import GLOSSARY, ci_cell, ci_header, reasons_cell, verdict_cell
from analysis.model.trust import model_lines
from analysis.comparison.noise_floor import floor_lines
from analysis.comparison.dimensioning import dimensioning_lines
from analysis.comparison.power import power_lines
from analysis.comparison.shared_time import shared_lines
from analysis.comparison.sequential_check import LOOK_HEADER, look_rows
from results_schema.records.sequential import LookDecision, read_looks
from analysis.report.released import released_cell
from analysis.report.choice_view import ChoiceView, read_choice_view
from analysis.report.html_choice import PLOT_ID as CHOICE_PLOT_ID, choice_figure, choice_section
from analysis.report.html_figures import latency_figure, pareto_figure, retention_figure
from analysis.report.html_serving import SERVING_GLOSSARY, read_serving_summary, serving_section
from results_schema.records.accuracy import AccuracyVerification, SampleExample
from results_schema.codec.files import write_text_atomic
from results_schema.codec.io import RecordError, read_json, scan_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.serving_summary import ServingSummary
from results_schema.records.validation import ValidationReport
from results_schema.records.summary import ComparisonSummary

REPORT_NAME = "report.html"
PLOT_IDS = ("pareto", "retention", "latency", CHOICE_PLOT_ID)
"""``id`` of each figure's ``div`` (the browser test waits on ``#pareto``; ``choice``: a choose run only)."""

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 18px 40px;color:#1b1b1b}
h1{font-size:1.5em;margin:18px 0 6px}h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{padding:12px 16px;border-radius:6px;margin:12px 0;font-size:1.05em}
.verdict.valid{background:#e7f6e7;border:2px solid #2e7d32}.verdict.invalid{background:#fdecea;border:2px solid #c62828}
.verdict strong{font-size:1.25em}
table{border-collapse:collapse;font-size:.88em;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.invalid td{background:#fdecea;text-decoration:line-through}tr.invalid td.keep{text-decoration:none}
.v-INVALID{color:#c62828;font-weight:bold}.v-slower{color:#b35c00}.v-faster{color:#2e7d32}.v-inconclusive{color:#666}
.note{background:#fff8e1;border-left:4px solid #f9a825;padding:6px 10px;font-size:.9em}
dt{font-weight:bold;margin-top:8px}dd{margin-left:18px}code{background:#f4f4f4;padding:0 3px}
tr.failure td,tr.withheld td{background:#fdecea}.pct-extreme{font-weight:bold;color:#b35c00}
.choice-recommended{background:#e7f6e7;font-weight:bold}.choice-bad{color:#c62828;font-weight:bold}
"""


def _e(v) -> str:
    return html.escape("" if v is None else str(v))


def _num(v, d: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{d}f}"


def _table(header: list[str], rows: list[list[str]], *, row_class: list[str] | None = None, tid: str = "") -> str:
    """Rows are already-escaped cell HTML; a cell starting with ``\\x00num`` is right-aligned."""
    out = [f"<table{f' id={chr(34)}{tid}{chr(34)}' if tid else ''}><thead><tr>"
           + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = []
        for c in r:
            if c.startswith("\x00num"):
                cells.append(f'<td class="num">{c[4:]}</td>')
            elif c.startswith("\x00keep"):
                cells.append(f'<td class="keep">{c[5:]}</td>')
            else:
                cells.append(f"<td>{c}</td>")
        out.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _n(v, d: int = 2) -> str:
    return "\x00num" + _e(_num(v, d))


def verdict_section(validation: ValidationReport, failures: list[CaseFailure]) -> str:
    """The first block of the page: VALID/INVALID, failing checks, errors, failed cases, warnings."""
    ok = validation.valid
    parts = [f'<div class="verdict {"valid" if ok else "invalid"}" id="verdict">'
             f'<strong>{"VALID" if ok else "INVALID"}</strong> — validation of this run: '
             f"{len(validation.errors)} error(s), {len(validation.warnings)} warning(s), "
             f"{len(failures)} failed case(s).</div>"]
    contended = validation.contended_line()
    if contended:
        parts.append(f'<p class="note" id="contended"><strong>{_e(contended)}</strong>: verdicts resting on them are '
                     "withheld and their points kept off the front (warnings <code>contended_case</code>).</p>")
    bad = [c for c in validation.checks if not c.passed]
    if bad:
        parts.append("<h3>Failing checks</h3><ul id=\"failing-checks\">"
                     + "".join(f"<li><code>{_e(c.name)}</code>: {c.errors} error(s)</li>" for c in bad) + "</ul>")
    if validation.errors:
        parts.append("<h3>Errors</h3>" + _table(
            ["code", "phase", "label", "repeat", "message"],
            [[f"<code>{_e(i.code)}</code>", _e(i.phase), _e(i.label), _e(i.repeat), _e(i.message)]
             for i in validation.errors], tid="errors"))
    if failures:
        parts.append("<h3>Failed cases</h3>" + _table(
            ["phase", "label", "repeat", "failure", "exit", "error type", "message", "log"],
            [[_e(f.phase), _e(f.label), _e(f.repeat), _e(f.failure_type), _e(f.exit_code), _e(f.error_type),
              _e(f.error_message), _e(f.log_path)] for f in failures], tid="failed-cases"))
    if validation.warnings:
        parts.append(f"<details><summary>{len(validation.warnings)} warning(s)</summary>" + _table(
            ["code", "phase", "label", "message"],
            [[f"<code>{_e(i.code)}</code>", _e(i.phase), _e(i.label), _e(i.message)] for i in validation.warnings])
            + "</details>")
    counts = [c for c in validation.counts if c.expected is not None and c.runs != c.expected]
    if counts:
        parts.append("<h3>Case counts that differ from the plan</h3>" + _table(
            ["phase", "label", "expected", "runs", "failures"],
            [[_e(c.phase), _e(c.label), _n(c.expected), _n(c.runs), _n(c.failures)] for c in counts]))
    return "\n".join(parts)


def provenance_section(cs: ComparisonSummary) -> str:
    p = cs.provenance
    rows = [
        ("run id", p.run_id), ("experiment", p.experiment), ("created (UTC)", p.created_utc),
        ("model", f"{p.model_name or '?'} ({p.model_num_layers} layers) — {p.model_path or '?'}"
         if p.model_name else None),
        ("model SHA256SUMS hash", p.model_sha256sums_sha256), ("host", p.hostname),
        ("hardware", "; ".join(p.devices) or None), ("architecture", p.machine),
        ("ISA extensions", p.isa or "not recorded by this run"), ("platform", p.platform),
        ("vLLM (case processes)", ", ".join(p.vllm_versions) or None),
        ("torch (case processes)", ", ".join(p.torch_versions) or None), ("Python", p.python_version),
        ("packages", ", ".join(f"{k} {v}" for k, v in sorted(p.packages.items()) if v) or None),
        ("git revision", f"{p.git_revision}{' (dirty)' if p.git_dirty else ''}" if p.git_revision else None),
        ("config SHA-256", p.config_sha256), ("run directory", cs.run_dir),
    ]
    body = _table(["", ""], [[_e(k), f"<code>{_e(v)}</code>" if v is not None else "not recorded"]
                             for k, v in rows], tid="provenance")
    if not p.manifest:
        body += '<p class="note">No valid <code>environment-manifest.json</code> in the run directory: ' \
                "model, hardware and config identity are not recorded.</p>"
    return body


def decision_section(cs: ComparisonSummary) -> str:
    header = ["phase", "label", "impl", "G", "N", "layers", "released GiB", "KV gain tok", "KV gain GiB",
              "throughput tok/s", "retention", ci_header(r.retention_ci_name for r in cs.decision), "verdict", "tokens vs baseline", "Pareto", "knee",
              "issues"]
    rows, cls = [], []
    for r in cs.decision:
        ci = ("no interval" if r.retention_ci_low is None or r.retention_ci_high is None
              else ci_cell(r.retention_ci_low, r.retention_ci_high, r.retention_ci_name, 4, " – "))
        rows.append([_e(r.phase), _e(r.label), _e(r.implementation), _n(r.group_size), _n(r.num_in_group),
                     _e(r.selected_layers or "–"), _e(released_cell(r.released_bytes, 6)), _n(r.kv_gain_tokens, 0),
                     _n(r.kv_gain_gib, 4), _n(r.throughput_median_tok_s), _n(r.retention, 4), "\x00num" + _e(ci),
                     f'\x00keep<span class="v-{_e(r.verdict)}">{_e(verdict_cell(r.verdict, r.withheld))}</span>',
                     _e(r.tokens), "yes" if r.pareto else "", "yes" if r.knee else "",
                     "\x00keep" + _e(reasons_cell(r.issues, r.unstable))])
        cls.append("" if r.valid else "invalid")
    out = _table(header, rows, row_class=cls, tid="decision")
    for n in cs.notes:
        out += f'<p class="note">{_e(n)}</p>'
    return out + noise_floor_html(cs)


def noise_floor_html(cs: ComparisonSummary) -> str:
    """The model fit vs the copy bench, the run's noise floor and the verdicts below it, the variance components
    and each label's resolving power, and the knee rule (``analysis.model.trust.model_lines``,
    ``analysis.comparison.noise_floor.floor_lines``, ``analysis.comparison.power.power_lines``), one paragraph each."""
    lines = (model_lines(cs.models, cs.model_table) + floor_lines(cs.noise_floor, cs.decision, cs.margin_pct)
             + power_lines(cs.variance_components, cs.detectable_effects, cs.decision)
             + shared_lines(cs.shared_in_time)
             + dimensioning_lines(list(cs.aa_comparisons), list(cs.dimensioning)))
    return "".join(f'<p class="note noise-floor">{_e(ln)}</p>' for ln in [*lines, f"knee rule: {cs.knee_rule}"])


def accuracy_section(items: list[tuple[str, AccuracyVerification]]) -> str:
    parts = []
    for name, a in items:
        parts.append(f'<p id="accuracy-verdict-{_e(name)}"><strong>{"PASSED" if a.passed else "FAILED"}</strong> '
                     f"({_e(a.mode_note)}) — <code>{_e(name)}</code></p>")
        parts.append(_table(["label", "impl", "task", "examples", "correct", "accuracy", "drop vs baseline",
                             "identical to baseline", "paired lost / gained (exact McNemar p)"],
                            [[_e(c.label), _e(c.implementation), _e(c.task), _n(c.num_examples), _n(c.correct),
                              _n(c.accuracy, 4), _n(c.drop_vs_baseline, 4), "yes" if c.identical_to_baseline else "no",
                              _e(paired_cell(c))]
                             for c in a.cases]))
        parts.append(accuracy_samples_table(a.samples, name))
        bad = [c for c in a.checks if c.status == "fail"]
        if bad:
            parts.append("<ul>" + "".join(f"<li>FAIL <code>{_e(c.name)}</code> {_e(c.label or '')}: {_e(c.message)}"
                                          "</li>" for c in bad) + "</ul>")
    return "\n".join(parts)


def accuracy_samples_table(samples: Sequence[SampleExample], name: str) -> str:
    """The first examples of each task as text: a row per example and case (question and gold on its first row),
    the baseline's reply beside each offload case's; every text escaped, line breaks kept."""
    if not samples:
        return ""
    rows = []
    for s in samples:
        for k, r in enumerate(s.replies):
            reply = _e(r.output_text).replace("\n", "<br>") or "(empty)"
            same = "(baseline)" if k == 0 else ("yes" if r.identical_to_baseline else "NO")
            rows.append([_e(s.task) if k == 0 else "", _n(s.index) if k == 0 else "",
                         _e(s.question).replace("\n", "<br>") if k == 0 else "", _e(s.gold) if k == 0 else "",
                         _e(r.label), reply, _e("unparsable" if r.parsed is None else r.parsed),
                         "yes" if r.correct else "no", same])
    return ("<h3>Examples: baseline beside offload</h3>"
            + _table(["task", "#", "question", "gold", "case", "reply", "parsed", "correct", "identical to baseline"],
                     rows, tid=f"accuracy-samples-{_e(name)}"))


def comparison_section(cs: ComparisonSummary) -> str:
    if not cs.comparison:
        return ""
    rows = [[_e(r.get("phase")), _n(r.get("group_size")), _n(r.get("num_in_group")), _n(r.get("a_median_tok_s")),
             _n(r.get("b_median_tok_s")), _n(r.get("delta_pct")), _n(r.get("ci_low_pct")), _n(r.get("ci_high_pct")),
             _e(r.get("verdict")), _e(r.get("note"))] for r in cs.comparison]
    return "<h2>Current vs official (same (G,N))</h2>" + _table(
        ["phase", "G", "N", "current tok/s", "official tok/s", "delta %", "CI95 low %", "CI95 high %", "verdict",
         "note"], rows, tid="comparison")


def _links(run_dir: Path, out_dir: Path) -> list[tuple[str, str]]:
    """(text, relative href) for the raw files of the run and the other summary files."""
    cands = sorted(run_dir.glob("*.jsonl")) + [run_dir / n for n in (
        "environment-manifest.json", "config.yaml", "overrides.yaml", "SHA256SUMS", "reproduction/run.sh")]
    cands += [run_dir / d for d in ("logs", "evidence", "records")]
    cands += [out_dir / n for n in ("comparison-summary.md", "comparison-summary.json", "comparison-summary.csv",
                                    "validation.json", "pareto.png", "retention.png", "sequential.png", "choice.json", "choice.png",
                                    "accuracy-verification.md", "serving-summary.md", "serving-summary.json",
                                    "serving-latency.png", "serving-front.png")]
    out = []
    for p in cands:
        if p.exists():
            rel = os.path.relpath(p, out_dir)
            out.append((str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else p.name,
                        rel + ("/" if p.is_dir() else "")))
    return out


def host_memory_section(cs: ComparisonSummary, *, cpu: bool) -> str:
    """Host memory per offloaded / released byte per label, with the source of each figure, the bytes the
    offloader's own storage explains and the flag (``analysis.report.host_memory``)."""
    from analysis.report.host_memory import CPU_HOST_NOTE, EVIDENCE, EXPLAINED_RULE, flag_reason

    if not cs.host_memory:
        return ""
    rows = [[_e(r["phase"]), _e(r["label"]), _n(r.get("host_delta_bytes"), 0), _n(r.get("offloaded_bytes"), 0),
             _n(r.get("released_bytes"), 0), _n(r.get("host_per_offloaded"), 3), _n(r.get("host_per_released"), 3),
             _n(r.get("explained_host_bytes"), 0), _n(r.get("excess_per_offloaded"), 3), _e(flag_reason(dict(r)))]
            for r in cs.host_memory]
    table = _table(["phase", "label", "host delta B", "offloaded B", "released B", "host B / offloaded B",
                    "host B / released B", "explained B", "excess B / offloaded B", "flag"], rows, tid="host-memory")
    sources = "; ".join(sorted({str(r["host_source"]) for r in cs.host_memory}))
    note = f"<p>{_e(CPU_HOST_NOTE)}</p>" if cpu else ""
    return (f"<h2>Host memory per offloaded byte</h2>{table}<p>Sources: host bytes = {_e(sources)}; "
            f"{_e(EVIDENCE)}. Host delta = label median - phase baseline median. {_e(EXPLAINED_RULE)}</p>{note}")


def looks_section(looks: Sequence[LookDecision]) -> str:
    """A sequential phase's looks: each label's interval at every look (``analysis.comparison.sequential_check``);
    '' without a look."""
    if not looks:
        return ""
    return ('<h2 id="sequential">Sequential looks</h2><p>Each label\'s interval at every look it was judged at '
            "(the look's own level; docs/sequential.md).</p>"
            + _table(LOOK_HEADER, [[_e(c) for c in r] for r in look_rows(looks)], tid="looks"))


def render(cs: ComparisonSummary, validation: ValidationReport, *, failures: Sequence[CaseFailure] = (),
           accuracy: Sequence[tuple[str, AccuracyVerification]] = (), links: Sequence[tuple[str, str]] = (),
           choice: ChoiceView | None = None, serving: ServingSummary | None = None,
           serving_error: str | None = None, looks: Sequence[LookDecision] = ()) -> str:
    """The page as one HTML string (see the module docstring for its order and guarantees); ``choice``: a
    choose run's view (``analysis.report.choice_view``); ``serving``: the run's serving summary, or
    ``serving_error``: why its file did not validate (an INVALID serving section either way heads an INVALID page);
    ``looks``: a sequential phase's look lines (``results_schema.records.sequential``), each label's interval per look."""
    from analysis.report.provenance import one_line

    note = html.escape(one_line(cs.provenance))
    cpu = any(r.runtime == "cpu" for r in cs.rows)
    figs = {"pareto": pareto_figure(cs.decision, cpu=cpu, note=note) if cs.decision else None,
            "retention": retention_figure(cs.decision, note=note) if cs.decision else None,
            "latency": latency_figure(cs.rows, note=note),
            CHOICE_PLOT_ID: choice_figure(choice, note=note) if choice is not None else None}
    cfg = {"displaylogo": False, "responsive": True}
    plots = {k: pio.to_html(f, full_html=False, include_plotlyjs=False, div_id=k, config=cfg)
             for k, f in figs.items() if f is not None}
    acc_failed = [name for name, a in accuracy if not a.passed]  # a failed verification never heads a VALID page
    has_serving = serving is not None or serving_error is not None
    serving_failed = serving_error is not None or (serving is not None and not serving.valid)
    status = "VALID" if validation.valid and not acc_failed and not serving_failed else "INVALID"
    title = f"{status} — offload report {cs.provenance.run_id}"
    acc_note = (f'<p class="verdict invalid" id="accuracy-failed"><strong>accuracy verification FAILED</strong>: '
                f'{_e(", ".join(acc_failed))} (see Accuracy verification below)</p>' if acc_failed else "")
    serving_note = ('<p class="verdict invalid" id="serving-failed"><strong>serving validation FAILED</strong> '
                    '(see <a href="#serving">Serving</a> below)</p>' if serving_failed else "")
    no_record = ("<p>No throughput case in this run (serving only: see <a href=\"#serving\">Serving</a>).</p>"
                 if has_serving else "<p>No case produced a record.</p>")
    body = [f"<h1>{_e(title)}</h1>", acc_note, serving_note, verdict_section(validation, list(failures)),
            "<h2>Provenance</h2>", provenance_section(cs),
            "<h2>Decision table</h2>", decision_section(cs) if cs.decision else no_record]
    if choice is not None:
        body.append(choice_section(choice, plots.get(CHOICE_PLOT_ID)))
    body += [looks_section(looks), "<h2>Capacity vs throughput</h2>"]
    body.append(plots.get("pareto", "<p>No data point to plot.</p>"))
    if "retention" in plots:
        body += ["<h2>Retention</h2>", plots["retention"]]
    if "latency" in plots:
        body += ["<h2>Latency</h2>", plots["latency"]]
    if accuracy:
        body += ["<h2>Accuracy verification</h2>", accuracy_section(list(accuracy))]
    body.append(host_memory_section(cs, cpu=cpu))
    body.append(comparison_section(cs))
    if has_serving:
        body.append(serving_section(serving, serving_error))
    glossary = {**GLOSSARY, **(SERVING_GLOSSARY if has_serving else {})}
    body.append("<h2>Glossary</h2><dl id=\"glossary\">" + "".join(
        f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in glossary.items()) + "</dl>")
    if links:
        body.append("<h2>Raw files</h2><ul id=\"raw-files\">" + "".join(
            f'<li><a href="{_e(h)}">{_e(t)}</a></li>' for t, h in links) + "</ul>")
    data = json.dumps({"run_id": cs.provenance.run_id, "valid": status == "VALID", "cases": len(cs.decision),
                       "serving": has_serving})
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style>\n<script type=\"text/javascript\">{get_plotlyjs()}</script>\n"
            f"<script type=\"application/json\" id=\"report-data\">{html.escape(data, quote=False)}</script>"
            "</head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def accuracy_reports(out_dir: Path) -> list[tuple[str, AccuracyVerification]]:
    """``(relative name, report)`` for ``accuracy-verification.json`` in ``out_dir`` and its subfolders."""
    items = []
    for p in sorted(out_dir.rglob("accuracy-verification.json")):
        try:
            items.append((str(p.relative_to(out_dir)), read_json(p, AccuracyVerification)))
        except RecordError:
            continue
    return items


def write_report_html(run_dir: Path | str, out_dir: Path | str | None = None) -> Path:
    """Render ``<out_dir>/report.html`` from the summary files already in ``out_dir``.

    Args:
        run_dir: the run directory (failures and raw-file links).
        out_dir: the summary directory holding ``comparison-summary.json`` and ``validation.json``
            (default ``<run_dir>/summary``).

    Returns:
        The path written (mode 0644, atomically replaced).

    Raises:
        FileNotFoundError: a summary file is missing. RecordError: one does not validate.
    """
    run_dir = Path(run_dir).resolve()
    out_dir = (run_dir / "summary") if out_dir is None else Path(out_dir).resolve()
    cs = read_json(out_dir / "comparison-summary.json", ComparisonSummary)
    validation = read_json(out_dir / "validation.json", ValidationReport)
    failures = []
    for p in sorted(run_dir.glob("*-failures.jsonl")):
        good, _errs = scan_jsonl(p, CaseFailure)
        failures += [f for _l, f in good]
    serving, serving_error = read_serving_summary(out_dir)
    page = render(cs, validation, failures=failures, accuracy=accuracy_reports(out_dir),
                  links=_links(run_dir, out_dir), choice=read_choice_view(run_dir, out_dir), serving=serving,
                  serving_error=serving_error, looks=read_looks(run_dir))
    path = out_dir / REPORT_NAME
    write_text_atomic(path, page)
    return path
