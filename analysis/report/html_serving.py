"""The "Serving" section of ``summary/report.html``: verdicts vs the baseline, outputs under load, percentiles.

What is modelled: ``serving_section(summary)`` renders ``summary/serving-summary.json``
(``results_schema.records.serving_summary.ServingSummary``) as HTML tables, in this order:

    1. the serving validity line with every serving error (``id="serving-verdict"``) and its warnings;
    2. each offload label vs the baseline per metric and rate (``BaselineVerdictRow``): both medians with their
       process counts, the change with its t interval, the baselines' floor, the margin and the verdict
       (``table#serving-verdicts``); a verdict on a label whose outputs differ at that rate is marked withheld
       and a verdict without an interval says so, so neither reads as a clean result;
    3. the per-request output comparison (``OutputCheckRow``) per case process and rate: requests compared,
       mismatched count with the first request indices, the baselines' floor and the status
       (``table#serving-outputs``; a ``differs`` row has ``class="failure"``);
    4. the percentiles (``PercentileRow``) with their sample size ``n`` and interval; a value that is the
       sample's extreme is marked ``max`` / ``min`` (``span.pct-extreme``), never shown as the percentile
       (``table#serving-percentiles``);
    5. the rate-order effects (``OrderEffectRow``, ``table#serving-order``).

``SERVING_GLOSSARY`` holds the page's glossary entries for these terms.

What is deliberately not modelled: computing anything (``analysis.serving.summary`` writes every number).
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path

from results_schema.codec.io import RecordError, read_json
from results_schema.records.serving_summary import (
    BaselineVerdictRow,
    OrderEffectRow,
    OutputCheckRow,
    PercentileRow,
    ServingSummary,
)

SERVING_SUMMARY_NAME = "serving-summary.json"
SECTION_ID = "serving"
FIRST_REQUESTS = 8
"""Mismatched request indices printed per row (the count is always printed; the JSON holds them all)."""
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}

SERVING_GLOSSARY: dict[str, str] = {
    "serving verdict": "An offload label vs the baseline on one serving metric (per-process P50 of TTFT, TPOT, "
                       "ITL or E2E) at one rate. Design blocks (the phase runs its baseline twice in each repeat): "
                       "each label process against the baselines of its own block, the median per-block "
                       "difference with a paired 95% t interval over blocks (blocks - 1 degrees of freedom: 2 "
                       "blocks call only a difference both repeat closely). Design processes: the change of the "
                       "median over processes with the unpaired 95% t interval over processes (ratio of geometric "
                       "means). slower / faster only when the interval lies beyond the baselines' floor on "
                       "one side, equivalent when it lies inside the margin (max(default margin, floor); the text "
                       "names the side when it excludes 0), inconclusive otherwise and always without an interval. Withheld when the "
                       "label's outputs differ from the baseline's at that rate, or a process ran it beside "
                       "foreign work.",
    "baselines' floor": "Design blocks: the widest spread (max - min) / median of the baselines inside one block. "
                        "Design processes: the spread of every baseline process at one rate; none with a single "
                        "baseline process.",
    "output comparison": "Every completed request's output token ids (SHA-256 in rate-<i>.requests.json) vs the "
                         "baseline processes' for the same prompt at the same rate (greedy, seeded, fixed length). "
                         "identical: every request matches a baseline; within_baseline_noise: the baselines disagree "
                         "among themselves on some requests (the floor) and no more requests than the floor's count "
                         "match no baseline; differs: more than that (fails the case and the run, exit 6); "
                         "no_baseline: nothing to compare with. Speed controls are baselines whose every forward "
                         "sleeps (no byte moved): they serve as slowly as an offloaded server, so the floor holds "
                         "what a slower server alone changes.",
    "percentile n": "The sample a percentile is taken over: requests (ITL: chunk gaps) pooled over the label's "
                    "processes at one rate. When fewer than one value lies above the p-th percentile "
                    "(n * (100 - p) / 100 < 1: P99 of fewer than 100 requests) the value is the sample's maximum "
                    "and is shown as max, without an interval (min likewise below).",
    "order effect": "The rates run in a rotated order per repeat; an order effect is a (label, rate, metric) whose "
                    "medians at different positions in the sweep differ by more than the spread of processes that "
                    "ran the rate at the same position (the label's and the baselines', or the default margin); in "
                    "the blocks design each position ran in another block, so the label's position medians are "
                    "taken relative to the baselines' at the same position (the host's drift between blocks "
                    "cancels).",
}


def _e(v: object) -> str:
    return html.escape("" if v is None else str(v))


def _num(v: float | int | None, d: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{d}f}"


def _rate(r: float | None) -> str:
    return "inf" if r is None else f"{r:g}"


def _table(tid: str, header: list[str], rows: list[tuple[str, list[str]]]) -> str:
    """``rows``: (row class, already-escaped cells); a cell starting with ``\\x00num`` is right-aligned."""
    out = [f'<table id="{tid}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead><tbody>"]
    for cls, cells in rows:
        tds = "".join(f'<td class="num">{c[4:]}</td>' if c.startswith("\x00num") else f"<td>{c}</td>" for c in cells)
        out.append(f"<tr{f' class={chr(34)}{cls}{chr(34)}' if cls else ''}>{tds}</tr>")
    return "".join(out) + "</tbody></table>"


def read_serving_summary(out_dir: Path) -> tuple[ServingSummary | None, str | None]:
    """``(summary, None)`` from ``out_dir/serving-summary.json``; ``(None, None)`` when the run has none;
    ``(None, reason)`` when the file does not validate (the page says so instead of omitting the section)."""
    path = out_dir / SERVING_SUMMARY_NAME
    if not path.is_file():
        return None, None
    try:
        return read_json(path, ServingSummary), None
    except RecordError as exc:
        return None, str(exc)


def _differs(s: ServingSummary) -> set[tuple[str, str, float | None]]:
    return {(o.phase, o.label, o.rate_rps) for o in s.outputs if o.status == "differs"}


def _verdict_rows(s: ServingSummary) -> str:
    bad = _differs(s)
    rows: list[tuple[str, list[str]]] = []
    for v in s.baseline_verdicts:
        withheld = (v.phase, v.label, v.rate_rps) in bad
        rows.append(("withheld" if withheld else "", _verdict_cells(v, withheld)))
    return _table("serving-verdicts", ["phase", "label", "rate req/s", "metric", "baseline ms (processes)",
                                       "label ms (processes)", "delta %", "interval %", "floor %", "margin %",
                                       "verdict", "rule"], rows)


def _verdict_cells(v: BaselineVerdictRow, withheld: bool) -> list[str]:
    interval = (f"{v.ci_low_pct:+.1f} .. {v.ci_high_pct:+.1f}" if v.ci_low_pct is not None and v.ci_high_pct is not None
                else "no interval")
    if withheld:
        verdict = f'<span class="v-INVALID">withheld: outputs differ ({_e(v.verdict)})</span>'
    elif v.verdict == "withheld":
        verdict = f'<span class="v-inconclusive">{_e(v.verdict_text)}</span>'
    elif v.ci_low_pct is None or v.ci_high_pct is None:
        verdict = f'<span class="v-inconclusive">{_e(v.verdict)} (no interval)</span>'
    else:
        verdict = f'<span class="v-{_e(v.verdict)}">{_e(v.verdict)}</span>'
    return [_e(v.phase), _e(v.label), "\x00num" + _rate(v.rate_rps), _e(METRIC_NAMES[v.metric]) + " P50",
            "\x00num" + f"{_num(v.b_median_ms)} ({v.b_processes})", "\x00num" + f"{_num(v.a_median_ms)} ({v.a_processes})",
            "\x00num" + (f"{v.delta_pct:+.1f}" if v.delta_pct is not None else "–"), "\x00num" + _e(interval),
            "\x00num" + (_num(v.floor_pct, 1) if v.floor_pct is not None else "none"), "\x00num" + _num(v.margin_pct, 1),
            verdict, _e(v.verdict_text)]


def _first(indices: tuple[int, ...]) -> str:
    if not indices:
        return "–"
    shown = ", ".join(str(i) for i in indices[:FIRST_REQUESTS])
    return shown + (f", … (+{len(indices) - FIRST_REQUESTS})" if len(indices) > FIRST_REQUESTS else "")


_STATUS_CLASS = {"identical": "v-faster", "within_baseline_noise": "v-inconclusive", "no_baseline": "v-inconclusive",
                 "differs": "v-INVALID"}


def _output_cells(o: OutputCheckRow) -> list[str]:
    return [_e(o.phase), _e(o.label), _e(o.implementation), "\x00num" + str(o.repeat), "\x00num" + _rate(o.rate_rps),
            "\x00num" + str(o.position), "\x00num" + str(o.compared), "\x00num" + str(len(o.mismatched)),
            _e(_first(o.mismatched)), "\x00num" + str(len(o.floor)), "\x00num" + str(o.baselines),
            "\x00num" + str(o.controls), f'<span class="{_STATUS_CLASS[o.status]}">{_e(o.status)}</span>']


def _outputs(s: ServingSummary) -> str:
    if not s.outputs:
        return '<p class="note" id="serving-outputs-none">No output comparison: no per-request output tokens.</p>'
    rows = [("failure" if o.status == "differs" else "", _output_cells(o)) for o in s.outputs]
    n_bad = sum(o.status == "differs" for o in s.outputs)
    head = (f'<p class="verdict invalid" id="serving-outputs-failed"><strong>outputs differ</strong> in {n_bad} case '
            "process(es) and rate(s): the requests below match no baseline process beyond the baselines' floor.</p>"
            if n_bad else "")
    return head + _table("serving-outputs", ["phase", "label", "impl", "repeat", "rate req/s", "position",
                                             "compared", "mismatched", "first mismatched requests",
                                             "floor (baselines disagree)", "baselines", "of them speed controls",
                                             "status"], rows)


def _pct_cell(p: PercentileRow) -> str:
    if p.kind != "percentile":
        return (f'\x00num<span class="pct-extreme">{p.kind}</span> {_num(p.value_ms)} (n {p.n})')
    ci = (f" [{_num(p.ci_low_ms)} .. {_num(p.ci_high_ms)}]" if p.ci_low_ms is not None and p.ci_high_ms is not None
          else "")
    return f"\x00num{_num(p.value_ms)}{ci} (n {p.n})"


def _percentiles(s: ServingSummary) -> str:
    if not s.percentiles:
        return ""
    ps = sorted({p.percentile for p in s.percentiles})
    groups: dict[tuple[str, str, float | None, str], dict[int, PercentileRow]] = defaultdict(dict)
    for p in s.percentiles:
        groups[(p.phase, p.label, p.rate_rps, p.metric)][p.percentile] = p
    rows = []
    for (phase, label, rate, metric), by_p in groups.items():
        procs = max(p.processes for p in by_p.values())
        rows.append(("", [_e(phase), _e(label), "\x00num" + _rate(rate), _e(METRIC_NAMES[metric]),
                          "\x00num" + str(procs)]
                     + [_pct_cell(by_p[q]) if q in by_p else "–" for q in ps]))
    return _table("serving-percentiles", ["phase", "label", "rate req/s", "metric", "processes"]
                  + [f"P{q} ms [95% CI] (n)" for q in ps], rows)


def _order_cells(o: OrderEffectRow) -> list[str]:
    meds = ", ".join(f"pos {p}: {_num(v)}" for p, v in zip(o.positions, o.position_medians_ms, strict=True))
    return [_e(o.phase), _e(o.label), "\x00num" + _rate(o.rate_rps), _e(METRIC_NAMES[o.metric]) + " P50", _e(meds),
            "\x00num" + _num(o.spread_pct, 1) + (" (relative to the baselines)" if o.relative else ""),
            "\x00num" + _num(o.floor_pct, 1),
            '<span class="v-slower">effect</span>' if o.effect else "none"]


def _order(s: ServingSummary) -> str:
    if not s.order_effects:
        return ('<p class="note" id="serving-order-none">Rate order: every process ran the rates in one order '
                "(no position to compare).</p>")
    n = sum(o.effect for o in s.order_effects)
    return (f"<p>Rates rotated per repeat: {n} of {len(s.order_effects)} (label, rate, metric) differ by their "
            "position in the sweep beyond the same-position floor.</p>"
            + _table("serving-order", ["phase", "label", "rate req/s", "metric", "medians by position (ms)",
                                       "spread %", "floor %", "order effect"],
                     [("order-effect" if o.effect else "", _order_cells(o)) for o in s.order_effects]))


def serving_section(summary: ServingSummary | None, error: str | None = None) -> str:
    """The section's HTML (see the module docstring); ``error``: why ``serving-summary.json`` did not validate."""
    head = f'<h2 id="{SECTION_ID}">Serving</h2>'
    if summary is None:
        return head + (f'<p class="verdict invalid" id="serving-verdict"><strong>INVALID</strong> — '
                       f"<code>{SERVING_SUMMARY_NAME}</code> does not validate: {_e(error)}</p>")
    s = summary
    parts = [head, f'<div class="verdict {"valid" if s.valid else "invalid"}" id="serving-verdict">'
             f'<strong>{"VALID" if s.valid else "INVALID"}</strong> — serving validation: {len(s.errors)} error(s), '
             f"{len(s.warnings)} warning(s).</div>"]
    if s.errors:
        parts.append('<ul id="serving-errors">' + "".join(f"<li>{_e(x)}</li>" for x in s.errors) + "</ul>")
    if s.warnings:
        parts.append(f"<details><summary>{len(s.warnings)} serving warning(s)</summary><ul>"
                     + "".join(f"<li>{_e(x)}</li>" for x in s.warnings) + "</ul></details>")
    if s.slo is not None:
        parts.append(f"<p>SLO: TTFT &le; {s.slo.ttft_ms:g} ms and TPOT &le; {s.slo.tpot_ms:g} ms per request, "
                     f"{s.slo.attainment:.0%} of requests good. TPOT = (E2E - TTFT) / (output tokens - 1) per request; "
                     "ITL = every chunk gap pooled over requests.</p>")
    parts.append("<h3>Offload vs baseline</h3>")
    parts.append(_verdict_rows(s) if s.baseline_verdicts else
                 '<p class="note" id="serving-verdicts-none">No verdict: the run has no baseline or no offload label '
                 "at a common rate.</p>")
    parts += ["<h3>Outputs under load</h3>", _outputs(s)]
    if s.percentiles:
        parts += ["<h3>Percentiles with their sample</h3>", _percentiles(s)]
    parts += ["<h3>Rate order</h3>", _order(s)]
    return "\n".join(parts)
