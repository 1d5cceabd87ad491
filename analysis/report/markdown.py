"""The report's Markdown: ``summary/comparison-summary.md`` and the per-label table the runner prints.

What is modelled: ``markdown_table`` renders frame columns at printed precision (``analysis.report.tables.PRECISION``);
``render_markdown`` renders every table of ``analysis.report.tables.build`` with the validity line first;
``verdict_legend`` states the verdict rule in words.

What is deliberately not modelled: computing the tables (``analysis.report.tables``), writing files (``analysis.report.summary``).
"""

from __future__ import annotations


import pandas as pd

from analysis.comparison.decision import retention_interval
from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT
from analysis.model.trust import CACHE_NOTE
from analysis.comparison.noise_floor import floor_lines, noise_floors
from analysis.comparison.dimensioning import dimensioning_lines
from analysis.comparison.power import power_lines
from analysis.comparison.shared_time import shared_lines
from analysis.comparison.inprocess import record_rows, report_lines
from analysis.comparison.sequential_check import look_table
from results_schema.records.sequential import read_looks
from analysis.comparison.pareto import knee_rule_text
from analysis.report.tables import CPU_NOTE, PRECISION, clean, display_columns, is_cpu_run
from results_schema.records.validation import ValidationReport


def _fmt(v, decimals: int | None = None) -> str:
    v = clean(v)
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        d = 2 if decimals is None else decimals
        return f"{v:,.{d}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def markdown_table(df: pd.DataFrame, columns: list[tuple[str, str]], precision: dict[str, int] | None = None) -> str:
    """Render ``columns`` ``[(column, header)]`` of ``df`` as a GitHub Markdown table."""
    precision = precision or {}
    head = "| " + " | ".join(h for _c, h in columns) + " |"
    def numeric(c: str) -> bool:
        return c in df and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])

    sep = "|" + "|".join("---:" if numeric(c) else "---" for c, _h in columns) + "|"
    lines = [head, sep]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], precision.get(c)) for c, _h in columns) + " |")
    return "\n".join(lines)


MAIN_COLUMNS = [
    ("phase", "phase"), ("label", "label"), ("implementation", "impl"), ("group_size", "G"), ("num_in_group", "N"),
    ("selected_layers", "selected layers"), ("wrapped_count", "wrapped"), ("offloaded_bytes", "offloaded bytes"),
    ("released_bytes", "released bytes"), ("processes", "procs"), ("throughput_median_tok_s", "throughput tok/s"),
    ("throughput_stdev_tok_s", "stdev"), ("retention", "retention vs baseline"), ("vs_baseline", "vs baseline"),
    ("kv_gain_tokens", "KV gain tok"), ("tokens", "tokens vs baseline"), ("window", "window"), ("pareto", "Pareto"),
    ("knee", "knee"), ("notes", "notes"),
]



COMPARISON_COLUMNS = [
    ("phase", "phase"), ("group_size", "G"), ("num_in_group", "N"), ("prefetch_step", "prefetch"),
    ("a_median_tok_s", "current tok/s"), ("b_median_tok_s", "official tok/s"), ("delta_tok_s", "delta tok/s"),
    ("delta_pct", "delta %"), ("ci_low_pct", "CI95 low %"), ("ci_high_pct", "CI95 high %"),
    ("a_processes", "n current"), ("b_processes", "n official"), ("margin_pct", "margin ±%"), ("verdict", "verdict"),
    ("pooled_delta_tok_s", "pooled-round delta tok/s (descriptive)"), ("note", "note"),
]


def verdict_legend(margin_pct: float) -> str:
    """The verdict rule (``analysis.comparison.verdict_rule.verdict``) in words, with the margin in force."""
    return (f"equivalence margin ±{margin_pct:g}% of the reference median. equivalent only when the whole "
            f"process-level 95% t interval of the relative difference (ratio of geometric means; Welch t on log "
            f"values, the pooled t where wider) lies inside ±{margin_pct:g}% (also when it excludes 0: a difference "
            f"smaller than the margin is never a speed-up, and the text names its side); otherwise faster / slower when the CI "
            f"excludes 0; otherwise inconclusive (the CI contains 0 but is wider than the margin), and "
            f"inconclusive when no CI can be computed (fewer than 2 processes on a side; the note gives n).")


VERDICT_LEGEND = verdict_legend(DEFAULT_MARGIN_PCT)


def cpu_cost_lines(tables: dict) -> str:
    """CPU runs: each point's retention and predicted vs measured tok/s, fitted vs plain copy bandwidth.

    With every case on the same GEMM kernels (``cpu_kernels.path`` plain), a point's cost is
    the copy of its offloaded layers on the compute path (serial model), so the fitted
    bandwidth can be compared with ``offload_tools.bench``'s plain ``copy_`` of the same layer bytes.
    """
    mt, summary = tables["model_table"], tables["summary"]
    if mt.empty:
        return ""
    lines = ["Transfer-bound model on this CPU run (serial: the copy is on the compute path):"]
    for key, m in tables["models"].items():
        if not m:
            continue
        fitted = m["bandwidth_bytes_s"]
        bench = m.get("copy_bench_bandwidth_bytes_s")
        cmp_ = (f"offload_tools.bench plain copy_ {bench / 1e9:.4g} GB/s (model / plain = {fitted / bench:.3g}; {CACHE_NOTE})"
                if bench else "offload_tools.bench plain copy_ not measured")
        source = str(m.get("bandwidth") or "fitted")  # "grid edge (...)" when the fit hit its search bound
        what = "fitted" if source == "fitted" else f"{source}, not a fit:"
        lines.append(f"- {key}: CPU copy bandwidth {what} {fitted / 1e9:.4g} GB/s; {cmp_}; "
                     f"{m['bytes_per_layer']:,.0f} bytes/layer, baseline {m['baseline_tok_s']:.2f} tok/s")
        lines.append(f"- {key}: model " + ("trusted (every point within 10%, within 2x of the copy bench)"
                                           if m.get("trusted") else
                                           f"UNTRUSTED: {m.get('untrusted_reason')}; no prediction shown"))
    ret = summary.set_index(["phase", "label"])["retention"] if "retention" in summary else None
    t = mt.copy()
    if ret is not None:
        t["retention"] = [float(ret.get((p, lb), float("nan"))) for p, lb in zip(t["phase"], t["label"], strict=True)]
    lines += ["", markdown_table(t, [("phase", "phase"), ("implementation", "implementation"), ("label", "label"),
                                     ("retention", "retention"), ("measured_tok_s", "measured tok/s"),
                                     ("predicted_tok_s", "predicted tok/s"), ("error_pct", "error %")],
                                 {"retention": 4, "measured_tok_s": 2, "predicted_tok_s": 2, "error_pct": 1})]
    return "\n".join(lines)


def noise_floor_markdown(tables: dict, margin_pct: float) -> str:
    """The run's noise floor (``analysis.comparison.noise_floor.floor_lines``) as a Markdown list ('' without a baseline)."""
    summary = tables["summary"]
    rows = []
    if "vs_baseline_verdict" in summary:
        for _, r in summary.iterrows():
            ci = retention_interval(r.get("vs_baseline_ci_low_pct"), r.get("vs_baseline_ci_high_pct"))
            rows.append({"phase": r["phase"], "label": r["label"], "verdict": str(r["vs_baseline_verdict"]),
                         "retention_ci_low": ci[0] if ci else None, "retention_ci_high": ci[1] if ci else None})
    lines = floor_lines(noise_floors(tables["data"].runs), rows, margin_pct)
    lines += power_lines(tables.get("variance", []), tables.get("effects", []), rows)
    lines += shared_lines(tables.get("shared", []))
    lines += dimensioning_lines(tables.get("aa", []), tables.get("dimensioning", []))
    return "\n".join(f"- {ln}" for ln in lines)


def _main_table(tables: dict) -> str:
    """The per-label table with its CPU note, CPU cost lines and the verdict / Pareto explanation."""
    summary = tables["summary"]
    main = markdown_table(display_columns(summary), list(MAIN_COLUMNS), PRECISION)
    if is_cpu_run(tables["data"].runs) or is_cpu_run(summary):
        main += "\n\n> **Note:** " + CPU_NOTE
        cost = cpu_cost_lines(tables)
        if cost:
            main += "\n\n" + cost
    margin = tables.get("margin_pct", DEFAULT_MARGIN_PCT)
    floor = noise_floor_markdown(tables, margin)
    if floor:
        main += "\n\n" + floor
    main += (f"\n\nvs baseline: verdict of each label's processes against the phase baseline's (margin "
             f"±{margin:g}%); a single process, or retention > 1.0, is inconclusive; withheld when a process it "
             f"rests on was contended (foreign work on the host while it measured). Pareto / knee: valid, "
             f"token-identical, uncontended and stable points only (notes say why a point is excluded). "
             + knee_rule_text())
    return main


STATS_COLUMNS = [
    ("phase", "phase"), ("label", "label"), ("throughput_mean_tok_s", "mean"), ("throughput_min_tok_s", "min"),
    ("throughput_max_tok_s", "max"), ("pooled_round_throughput_median_tok_s", "pooled round median"),
    ("pooled_round_throughput_stdev_tok_s", "pooled round stdev"), ("round_latency_p50_s", "P50 round s"),
    ("round_latency_p95_s", "P95 round s"), ("load_seconds_median", "load s"), ("kv_cache_tokens_median", "KV tokens"),
    ("kv_cache_gib_median", "KV GiB"), ("peak_rss_bytes_median", "peak RSS bytes"),
    ("device_memory_bytes_median", "device bytes"),
]
FAILURE_COLUMNS = [
    ("phase", "phase"), ("label", "label"), ("repeat", "repeat"), ("failure_type", "failure"), ("exit_code", "exit"),
    ("error_type", "error type"), ("error_message", "message"), ("log_path", "log"),
]
CONFIRMATION_COLUMNS = [
    ("long_phase", "long phase"), ("short_phase", "confirms"), ("label", "label"),
    ("long_rounds_per_process", "rounds/proc"), ("long_retention", "long retention"),
    ("short_retention", "short retention"), ("retention_difference", "difference"),
    ("long_verdict", "long vs baseline"), ("short_verdict", "short vs baseline"), ("margin_pct", "margin ±%"),
    ("confirms_direction", "same verdict"),
]
SPACED_COLUMNS = [
    ("phase", "phase"), ("implementation", "implementation"), ("num_selected_layers", "layers"),
    ("adjacent_label", "adjacent"), ("spaced_label", "spaced"), ("adjacent_median_tok_s", "adjacent tok/s"),
    ("spaced_median_tok_s", "spaced tok/s"), ("delta_pct", "delta %"), ("ci_low_pct", "CI95 low %"),
    ("ci_high_pct", "CI95 high %"), ("margin_pct", "margin ±%"), ("verdict", "verdict"), ("note", "note"),
]
CROSS_COLUMNS = [
    ("comparison", "comparison"), ("implementation", "implementation"), ("group_size", "G"), ("num_in_group", "N"),
    ("native_label", "native"), ("native_retention", "native retention"),
    ("same_runtime_retention", "same-runtime retention"), ("retention_difference", "difference"),
]


def _header(rep: ValidationReport) -> tuple[str, list[str]]:
    """The validity line and the document's head (first 50 errors, first 20 warnings)."""
    contended = rep.contended_line()
    vline = (f"validation: {'VALID' if rep.valid else 'INVALID'} ({len(rep.errors)} error(s), "
             f"{len(rep.warnings)} warning(s))" + (f"; {contended}" if contended else ""))
    parts = ["# Offload comparison summary", "", vline, ""]
    parts += [f"- error `{i.code}`: {i.message}" for i in rep.errors[:50]]
    parts += [f"- warning `{i.code}`: {i.message}" for i in rep.warnings[:20]]
    return vline, parts


def _comparison_sections(tables: dict, margin: float) -> list[str]:
    """Current vs official, long-window, confirmation, spaced-vs-adjacent and cross-stack sections."""
    parts = [f"Verdicts (every table): {verdict_legend(margin)}", ""]
    parts += [f"## Current vs official (95% t interval over processes; margin ±{margin:g}%)", ""]
    comp = tables["comparison"]
    parts += [markdown_table(comp, COMPARISON_COLUMNS) if not comp.empty else "_no (G,N) point with both_", ""]
    if not comp.empty:
        parts += [f"Verdicts: {verdict_legend(margin)}", ""]
    lw = tables["long_window"]
    if not lw.empty:
        parts += ["## Long-window confirmation", "",
                  markdown_table(lw, COMPARISON_COLUMNS + [("short_verdict", "same-runtime verdict"),
                                                           ("confirms", "confirms")]), ""]
    sections = (
        ("confirmation", "## Long-window / confirmation retention (each phase vs its own baseline)",
         CONFIRMATION_COLUMNS, {"long_retention": 4, "short_retention": 4, "retention_difference": 4,
                                "long_rounds_per_process": 1}),
        ("spaced_vs_adjacent", "## Same layer count: adjacent vs spaced", SPACED_COLUMNS, None),
        ("cross_stack", "## Native vs same-runtime (cross-stack: different software stacks, auxiliary only)",
         CROSS_COLUMNS, {"native_retention": 4, "same_runtime_retention": 4, "retention_difference": 4}),
    )
    for key, title, columns, precision in sections:
        if not tables[key].empty:
            parts += [title, "", markdown_table(tables[key], columns, precision), ""]
    return parts


def _model_section(tables: dict) -> list[str]:
    """The transfer-bound model fits and their predicted vs measured table ([] without a fit)."""
    mt = tables["model_table"]
    if mt.empty:
        return []
    parts = ["## Transfer-bound model (predicted vs measured)", ""]
    for key, m in tables["models"].items():
        if m:
            err = m.get("fit_rms_error_pct")
            parts.append(f"- {key}: {m['mode']}, {m['bytes_per_layer']:,.0f} bytes/layer, bandwidth "
                         f"{m['bandwidth_bytes_s'] / 1e9:.4g} GB/s ({m['bandwidth']}), RMS fit error "
                         f"{'–' if err is None else f'{err:.1f}%'} over {m.get('fit_points', 0)} point(s), "
                         f"baseline {m['baseline_tok_s']:.2f} tok/s; " + ("trusted" if m.get("trusted") else
                                                                         f"UNTRUSTED: {m.get('untrusted_reason')}"))
    return parts + ["", markdown_table(mt, [("phase", "phase"), ("implementation", "implementation"),
                                            ("label", "label"), ("measured_tok_s", "measured"),
                                            ("predicted_tok_s", "predicted"), ("error_pct", "error %")]), ""]


def _host_memory_section(tables: dict) -> list[str]:
    """Host memory per offloaded / released byte per label (``analysis.report.host_memory``)."""
    from analysis.report.host_memory import host_memory_lines, host_memory_table
    from analysis.report.tables import is_cpu_run

    data = tables["data"]
    return host_memory_lines(host_memory_table(data).to_dict("records"), cpu=is_cpu_run(data.runs))


def render_markdown(tables: dict) -> tuple[str, str]:
    """Return ``(full_markdown, main_table_markdown)`` of ``analysis.report.tables.build``'s tables.

    The full document: validity line and issues, per-label table, statistics, failed cases,
    placements, comparison sections, model fits. The main table is the validity line plus the
    per-label table (what the runner prints).
    """
    from analysis.validation.placement import load_nodes, load_placements, placement_markdown

    vline, parts = _header(tables["validation"])
    main = _main_table(tables)
    parts += ["", "## Per label (bytes and layers from runtime evidence)", "", main, ""]
    parts += ["## Statistics", "", markdown_table(tables["summary"], STATS_COLUMNS, PRECISION), ""]
    fails = tables["data"].failures
    if not fails.empty:
        parts += ["## Failed cases", "", markdown_table(fails, FAILURE_COLUMNS), ""]
    run_dir = tables["data"].run_dir
    parts += placement_markdown(load_placements(run_dir)[0], load_nodes(run_dir))
    parts += _host_memory_section(tables)
    parts += _comparison_sections(tables, tables.get("margin_pct", DEFAULT_MARGIN_PCT))
    looks = look_table(read_looks(run_dir))
    if looks:
        parts += ["## Sequential looks (docs/sequential.md: each label's interval at every look it was judged at)", "",
                  *looks, ""]
    inproc = report_lines(record_rows(cr.record for _p, _l, cr in tables["data"].case_runs))
    if inproc:
        parts += [f"## {inproc[0]}", "", *(f"- {line}" for line in inproc[1:]), ""]
    parts += _model_section(tables)
    return "\n".join(parts) + "\n", vline + "\n\n" + main + "\n"
