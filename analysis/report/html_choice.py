"""The "Choose, then confirm" section of ``summary/report.html`` and its plotly figure.

What is modelled: ``choice_figure(view)``: predicted vs measured over the whole grid of a choose run
(``analysis.report.choice_view.ChoiceView``): x = predicted released GiB of every distinct setting of the last
decision with predictions, y = its predicted retention with the interval as error bars, one point per setting
in the ``meta="prediction"`` trace (hover: G, N, prefetch_step, class id); the verified settings as diamonds
at their measured retention (``meta="verified"``: green inside their predicted interval, red when they missed
it); the recommended (measured) setting as a ringed star (``meta="recommended"``); a vertical line at the
need and a horizontal one at retention 1 (the baseline). SVG traces only (``go.Scatter``), like
``analysis.report.html_figures``.

``choice_section(view, plot_html)``: the section's HTML: the decision lines (``ChoiceSummary.lines``) with the
recommendation first (``li.choice-recommended``) and every miss, untrusted model or missing recommendation
marked (``li.choice-bad``, plus a banner above the lines), the table of verified settings, then the figure.

What is deliberately not modelled: deciding anything (every number is read from the run's files).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from analysis.report.choice_view import ChoiceView, is_bad
from analysis.report.html_figures import style

SECTION_ID = "choose-confirm"
PLOT_ID = "choice"
"""``id`` of the section's heading and of the figure's ``div``."""
MEETS, BELOW, INSIDE, MISSED, REC = "#1f77b4", "#9e9e9e", "#2e7d32", "#c62828", "#f9a825"


def _e(v) -> str:
    return html.escape("" if v is None else str(v))


def _predictions(view: ChoiceView) -> go.Scatter:
    pts = view.points
    return go.Scatter(
        x=[p.released_gib for p in pts], y=[p.retention for p in pts], mode="markers", meta="prediction",
        name=f"predicted ({view.drawn_stage}, {view.drawn_form} form): every distinct setting; grey: below the need",
        marker={"symbol": "circle", "size": 7, "color": [MEETS if p.meets_need else BELOW for p in pts]},
        error_y={"type": "data", "symmetric": False, "array": [p.retention_high - p.retention for p in pts],
                 "arrayminus": [p.retention - p.retention_low for p in pts], "thickness": 1, "width": 2,
                 "color": "rgba(31,119,180,0.35)"},
        customdata=[[p.group_size, p.num_in_group, p.prefetch_step, p.class_id, p.retention_low, p.retention_high,
                     p.predicted_tok_s, "meets the need" if p.meets_need else "below the need"] for p in pts],
        hovertemplate=("<b>G=%{customdata[0]} N=%{customdata[1]} prefetch_step=%{customdata[2]}</b><br>class "
                       "%{customdata[3]}<br>released: %{x:.4g} GiB (predicted)<br>predicted retention %{y:.3f} "
                       "[%{customdata[4]:.3f}, %{customdata[5]:.3f}]<br>predicted %{customdata[6]:.2f} tok/s<br>"
                       "%{customdata[7]}<extra>prediction</extra>"))


def _verified(view: ChoiceView) -> go.Scatter:
    drawn = view.drawn()
    vs = [v for v, _x, _y in drawn]
    return go.Scatter(
        x=[x for _v, x, _y in drawn], y=[y for _v, _x, y in drawn], mode="markers+text", meta="verified",
        name="verified: measured retention (verify median / its baseline median); red: MISSED",
        text=[v.label for v in vs], textposition="top left", textfont={"size": 10},
        marker={"symbol": "diamond", "size": 13, "color": [MISSED if v.within is False else INSIDE for v in vs],
                "line": {"width": 1, "color": "white"}},
        customdata=[[v.label, v.stage, v.predicted_retention, v.retention_low, v.retention_high,
                     "MISSED the predicted interval" if v.within is False else "inside the predicted interval"]
                    for v in vs],
        hovertemplate=("<b>%{customdata[0]}</b> (verified, %{customdata[1]})<br>measured retention %{y:.3f}<br>"
                       "predicted %{customdata[2]:.3f} [%{customdata[3]:.3f}, %{customdata[4]:.3f}]<br>"
                       "%{customdata[5]}<extra>verified</extra>"))


def choice_figure(view: ChoiceView, *, note: str = "") -> go.Figure | None:
    """The figure of the module docstring; None when no decision has predictions (a need of 0)."""
    if not view.points:
        return None
    fig = go.Figure([_predictions(view)])
    r = view.recommended
    if r is not None and r.at is not None:  # under the verified diamonds: the diamond's colour stays visible
        fig.add_trace(go.Scatter(
            x=[r.at[0]], y=[r.at[1]], mode="markers", meta="recommended", name=f"recommended: {r.label}",
            marker={"symbol": "star", "size": 24, "color": REC, "line": {"width": 2, "color": "#222222"}},
            hovertemplate=f"<b>recommended: {_e(r.label)}</b><br>measured retention %{{y:.3f}}<extra></extra>"))
    fig.add_trace(_verified(view))
    fig.add_vline(x=view.need_gib, line={"color": MISSED, "width": 1.5, "dash": "dash"},
                  annotation_text=f"need {view.need_gib:.4g} GiB", annotation_position="top right")
    fig.add_hline(y=1.0, line={"color": "gray", "width": 1})
    extra = [f"interval ±{view.half_width_pct:.1f}%" if view.half_width_pct is not None else "",
             "not measured: " + ", ".join(v.label for v in view.verified if v.measured is None)
             if any(v.measured is None for v in view.verified) else "",
             "" if r is not None else "no measured setting is recommended"]
    note = "<br>".join(x for x in [note, "; ".join(x for x in extra if x)] if x)
    return style(fig, "Choose, then confirm: predicted vs measured retention over every distinct setting",
                 "released GiB (predicted: offloaded - static slots)", "retention vs baseline", note)


def _verified_table(view: ChoiceView) -> str:
    if not view.verified:
        return ""
    rec = view.summary.recommended.label if view.summary is not None and view.summary.recommended else None
    rows = []
    for v in view.verified:
        cls = "choice-bad" if v.within is False else "choice-recommended" if v.label == rec else ""
        meas = "not measured" if v.measured is None else f"{v.measured:.4f}"
        inside = {None: "–", True: "inside", False: "MISSED"}[v.within]
        attr = f' class="{cls}"' if cls else ""
        rows.append(f'<tr{attr}><td>{_e(v.label)}{" (recommended)" if v.label == rec else ""}</td>'
                    f"<td>{_e(v.stage)}</td><td class=\"num\">{v.predicted_retention:.4f}</td>"
                    f'<td class="num">{v.retention_low:.4f} – {v.retention_high:.4f}</td>'
                    f'<td class="num">{_e(meas)}</td><td>{inside}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("verified setting", "stage", "predicted retention",
                                             "predicted interval", "measured retention", "measured vs interval"))
    return f'<table id="choice-verified"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _banners(view: ChoiceView) -> str:
    out = []
    s = view.summary
    if s is None:
        out.append("no summary/choice.json beside this report: the measured decision is not shown")
    elif not s.trusted:
        out.append("model NOT TRUSTED on this host: a verified setting still missed its prediction after the "
                   "refit; the recommendation comes from the measured front only")
    if view.missed:
        out.append(f"{len(view.missed)} verified setting(s) MISSED their predicted interval: "
                   + ", ".join(v.label for v in view.missed))
    if s is not None and s.recommended is None:
        out.append("NONE recommended: no valid measured setting meets the need (nothing is recommended from "
                   "predictions)")
    return "".join(f'<p class="note choice-bad">{_e(x)}</p>' for x in out)


def choice_section(view: ChoiceView, plot_html: str | None) -> str:
    """The section's HTML (module docstring); ``plot_html`` is the figure's ``div`` (None: no figure)."""
    items = []
    for line in view.ordered_lines:
        cls = "choice-bad" if is_bad(line) else "choice-recommended" if line.startswith("recommended") else ""
        items.append(f'<li class="{cls}">{_e(line)}</li>' if cls else f"<li>{_e(line)}</li>")
    s = view.summary
    runs = (f"<p>Processes run: {s.processes_run:,}; measuring every candidate with the same design: "
            f"{s.processes_every_candidate:,}.</p>") if s is not None else ""
    figure = plot_html if plot_html is not None else "<p>No decision has predictions (a need of 0 bytes).</p>"
    return (f'<h2 id="{SECTION_ID}">Choose, then confirm</h2>{_banners(view)}'
            f'<ul id="choice-lines">{"".join(items)}</ul>{runs}{_verified_table(view)}{figure}')
