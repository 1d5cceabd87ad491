"""Interactive plotly figures of the HTML report (SVG traces only, never WebGL).

What is modelled: three figures built from the decision rows of ``comparison-summary.json``
(``results_schema.records.summary.DecisionRow``) and its per-label rows:

    pareto_figure     released MiB (evidence-accounted) vs median throughput (tok/s); one marker trace
                      per (phase, implementation) with ``meta="case"`` (one point per label, so the
                      browser test can count drawn points per case), each with its verdict interval (the
                      retention interval times the phase baseline's median tok/s); hover: label, layers, bytes,
                      retention with interval, verdict; the Pareto front of each implementation as a
                      labelled line; the knee as a ringed star; invalid labels crossed out (red x).
    retention_figure  retention vs offloaded layers with the verdict's interval (``RETENTION_CI_NAME``) as error bars.
    latency_figure    round latency P50 / P95 (seconds per generate call) per label.

Plotly Express switches to WebGL (``scattergl``) above 1000 points and headless browsers without a
GPU may not draw it; these figures use ``go.Scatter`` / ``go.Bar`` (SVG) whatever the size.

What is deliberately not modelled: the page (``analysis.report.html``), NaN points: a point whose
coordinates are not finite is left out of a trace and named in the figure's subtitle (plotly would
silently drop it).
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from analysis.comparison.decision import RETENTION_CI_NAME
from offload.selection import case_label

IMPL_COLORS = {"baseline": "#222222", "current": "#1f77b4", "official": "#ff7f0e", "sync": "#2ca02c",
               "overlay": "#d62728"}
IMPL_SYMBOLS = {"baseline": "circle", "current": "square", "official": "triangle-up", "sync": "diamond",
                 "overlay": "triangle-down"}
MIB = float(2**20)


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(float(x))


def point_label(r) -> str:
    """``baseline`` or ``(G,N)`` (``(G,N,kK)``) of a decision row: ``case_label(style="point")``."""
    return case_label(r.implementation, r.group_size, r.num_in_group, r.prefetch_step, style="point")


def _ret_text(r) -> str:
    if not _finite(r.retention):
        return "–"
    ci = (f" [{r.retention_ci_low:.3f}, {r.retention_ci_high:.3f}] {r.retention_ci_name}"
          if _finite(r.retention_ci_low) and _finite(r.retention_ci_high) else " (no interval)")
    return f"{r.retention:.3f}{ci}"


def ci_title(rows) -> str:
    """What the figures' bars are: ``RETENTION_CI_NAME`` when every drawn interval is the fixed rule's, else each
    sequential label's own (``point: CI96.9% at look 1 (3 vs 3 processes)``) and the fixed one for the rest."""
    seq = [r for r in rows if _finite(r.retention_ci_low) and r.retention_ci_name not in ("95% CI", "no interval")]
    if not seq:
        return RETENTION_CI_NAME
    fixed = any(_finite(r.retention_ci_low) and r.retention_ci_name == "95% CI" for r in rows)
    named = "; ".join(f"{r.label}: retention {r.retention_ci_name}" for r in seq)
    return f"the sequential verdicts' intervals ({named})" + (f", else {RETENTION_CI_NAME}" if fixed else "")


def _scaled_ci(rows) -> dict:
    """``error_y`` of the Pareto figure: each row's verdict interval (``retention_ci_low`` / ``_high``) times its
    phase baseline's median tok/s, around its median tok/s; hidden when no row has one."""
    def has(r) -> bool:
        return _finite(r.retention_ci_low) and _finite(r.retention_ci_high) and _finite(r.baseline_throughput_median_tok_s)

    return {"type": "data", "symmetric": False, "visible": any(has(r) for r in rows),
            "array": [r.retention_ci_high * r.baseline_throughput_median_tok_s - r.throughput_median_tok_s
                      if has(r) else 0 for r in rows],
            "arrayminus": [r.throughput_median_tok_s - r.retention_ci_low * r.baseline_throughput_median_tok_s
                           if has(r) else 0 for r in rows]}


def _groups(rows):
    out: dict[tuple[str, str], list] = {}
    for r in rows:
        out.setdefault((r.phase, r.implementation), []).append(r)
    return out


TEMPLATE = "plotly_white"  # plotly's template for every figure of the report


def style(fig: go.Figure, title: str, x: str, y: str, note: str) -> go.Figure:
    """``fig`` with the report's layout (title with ``note`` under it, axis titles ``x`` / ``y``, template, size); returned."""
    fig.update_layout(
        title={"text": title + (f"<br><sup>{note}</sup>" if note else ""), "x": 0.01},
        xaxis_title=x, yaxis_title=y, template=TEMPLATE, height=520,
        legend={"font": {"size": 11}}, margin={"t": 90, "l": 70, "r": 20, "b": 60}, hovermode="closest")
    return fig


PARETO_TITLE = ("Capacity vs throughput (Pareto front per implementation; knee starred; bars: {ci} x "
                "the baseline's median)")


def pareto_figure(rows, *, cpu: bool = False, note: str = "") -> go.Figure:
    """Capacity (released MiB) vs median throughput; see the module docstring.

    Args:
        rows: decision rows (objects with ``DecisionRow`` attributes), any order.
        cpu: add the CPU caveat (nothing is freed on the CPU runtime) to the axis title.
        note: subtitle (provenance line).

    Returns:
        The figure; its ``meta="case"`` traces hold exactly one point per row with finite coordinates.
    """
    fig = go.Figure()
    phases = sorted({r.phase for r in rows})
    dropped = []
    for (phase, impl), sub in _groups(rows).items():
        good = [r for r in sub if _finite(r.throughput_median_tok_s)]
        dropped += [r.label for r in sub if r not in good]
        name = impl if len(phases) == 1 else f"{phase}: {impl}"
        fig.add_trace(go.Scatter(
            x=[r.released_bytes / MIB for r in good], y=[r.throughput_median_tok_s for r in good],
            mode="markers+text", name=name, meta="case", text=[point_label(r) for r in good],
            textposition="top right", textfont={"size": 10, "color": IMPL_COLORS.get(impl, "gray")},
            marker={"symbol": IMPL_SYMBOLS.get(impl, "cross"), "size": 11, "color": IMPL_COLORS.get(impl, "gray"),
                    "line": {"width": 1, "color": "white"}},
            error_y=_scaled_ci(good),
            customdata=[[r.label, r.selected_layers or "none", f"{r.released_bytes:,}", _ret_text(r), r.verdict,
                         f"{r.processes}"] for r in good],
            hovertemplate=("<b>%{customdata[0]}</b><br>layers: %{customdata[1]}<br>released bytes: "
                           "%{customdata[2]}<br>throughput: %{y:.2f} tok/s<br>retention: %{customdata[3]}"
                           "<br>verdict: %{customdata[4]}<br>processes: %{customdata[5]}<extra>" + name
                           + "</extra>")))
        if impl != "baseline":
            base = [r for r in rows if r.phase == phase and r.implementation == "baseline" and r.pareto]
            front = sorted([r for r in base + good if r.pareto and _finite(r.throughput_median_tok_s)],
                           key=lambda r: r.released_bytes)
            if len(front) >= 2:
                fig.add_trace(go.Scatter(
                    x=[r.released_bytes / MIB for r in front], y=[r.throughput_median_tok_s for r in front],
                    mode="lines", name=f"Pareto front: {name}", hoverinfo="skip",
                    line={"color": IMPL_COLORS.get(impl, "gray"), "width": 2, "dash": "dot"}))
    knees = [r for r in rows if r.knee and _finite(r.throughput_median_tok_s)]
    if knees:
        fig.add_trace(go.Scatter(
            x=[r.released_bytes / MIB for r in knees], y=[r.throughput_median_tok_s for r in knees],
            mode="markers", name="knee of the front", hoverinfo="skip",
            marker={"symbol": "star-open", "size": 24, "color": "#9467bd", "line": {"width": 2}}))
    bad = [r for r in rows if not r.valid and _finite(r.throughput_median_tok_s)]
    if bad:
        fig.add_trace(go.Scatter(
            x=[r.released_bytes / MIB for r in bad], y=[r.throughput_median_tok_s for r in bad],
            mode="markers", name="INVALID (validation error): crossed out",
            customdata=[[r.label, r.issues] for r in bad],
            hovertemplate="<b>%{customdata[0]}</b> INVALID: %{customdata[1]}<extra></extra>",
            marker={"symbol": "x-thin-open", "size": 26, "color": "#d62728", "line": {"width": 3}}))
    x = "released MiB (evidence-accounted: offloaded - static buffers; not measured)"
    if cpu:
        x += " — CPU runtime: nothing is freed"
    if dropped:
        note += ("<br>" if note else "") + "not plotted (no finite throughput): " + ", ".join(dropped)
    return style(fig, PARETO_TITLE.format(ci=ci_title(rows)), x, "median process throughput (tok/s)", note)


def retention_figure(rows, *, note: str = "") -> go.Figure:
    """Retention vs offloaded layers (evidence), the verdict's interval (``retention_ci_low`` / ``_high``, named
    ``RETENTION_CI_NAME`` as the decision table names it) as error bars where one exists."""
    fig = go.Figure()
    groups = _groups(rows)
    keys = list(groups)
    for gi, ((phase, impl), sub) in enumerate(groups.items()):
        good = [r for r in sub if _finite(r.retention)]
        off = (gi - (len(keys) - 1) / 2) * 0.08
        has_ci = [_finite(r.retention_ci_low) and _finite(r.retention_ci_high) for r in good]
        fig.add_trace(go.Scatter(
            x=[r.num_selected_layers + off for r in good], y=[r.retention for r in good], mode="markers+text",
            text=[point_label(r) for r in good], textposition="middle right",
            textfont={"size": 10, "color": IMPL_COLORS.get(impl, "gray")},
            name=impl if len({p for p, _ in keys}) == 1 else f"{phase}: {impl}", meta="case",
            marker={"symbol": IMPL_SYMBOLS.get(impl, "cross"), "size": 10, "color": IMPL_COLORS.get(impl, "gray")},
            error_y={"type": "data", "symmetric": False,
                     "array": [r.retention_ci_high - r.retention if c else 0 for r, c in zip(good, has_ci, strict=True)],
                     "arrayminus": [r.retention - r.retention_ci_low if c else 0 for r, c in zip(good, has_ci, strict=True)],
                     "visible": any(has_ci)},
            customdata=[[r.label, r.selected_layers or "none", _ret_text(r), r.verdict] for r in good],
            hovertemplate=("<b>%{customdata[0]}</b><br>layers: %{customdata[1]}<br>retention: %{customdata[2]}"
                           "<br>verdict: %{customdata[3]}<extra></extra>")))
    fig.add_hline(y=1.0, line={"color": "gray", "width": 1})
    if not any(_finite(r.retention_ci_low) for r in rows):
        note += ("<br>" if note else "") + "no interval: fewer than 2 processes per label"
    return style(fig, f"Throughput retention vs offloaded layers (bars: {ci_title(rows)}, the verdict's interval)",
                   "offloaded layers (evidence)", "retention vs phase baseline", note)


def latency_figure(rows, *, note: str = "") -> go.Figure | None:
    """Round latency P50 and P95 per label (seconds per measured generate call); None without data.

    Args:
        rows: per-label summary rows (``SummaryRow`` attributes ``round_latency_p50_s`` / ``_p95_s``).
    """
    good = [r for r in rows if _finite(r.round_latency_p50_s)]
    if not good:
        return None
    names = [r.label if len({x.phase for x in rows}) == 1 else f"{r.phase}/{r.label}" for r in good]
    fig = go.Figure([
        go.Bar(x=names, y=[r.round_latency_p50_s for r in good], name="P50 round latency (s)"),
        go.Bar(x=names, y=[r.round_latency_p95_s if _finite(r.round_latency_p95_s) else None for r in good],
               name="P95 round latency (s)"),
    ])
    fig.update_layout(barmode="group")
    return style(fig, "Round latency per label (one generate call over all prompts)", "label", "seconds", note)
