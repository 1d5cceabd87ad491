"""Reports of a run directory: ``summary/`` JSON, CSV, Markdown, PNG plots and validation.

What is modelled: ``write_summary(run_dir)`` loads and validates the run,
aggregates per label, compares implementations, fits the transfer-bound model
and writes

    summary/comparison-summary.json   every table (full precision; NaN -> null)
    summary/comparison-summary.csv    the per-label table (full precision)
    summary/comparison-summary.md     every table at printed precision (``PRECISION``)
    summary/validation.json           ``results_schema.models.ValidationReport``
    summary/pareto.png                capacity (released MiB) vs median throughput, front highlighted
    summary/retention.png             retention vs offloaded layers per implementation
    summary/report.html               self-contained interactive report (``analysis.html_report``)

(``out_dir`` puts them elsewhere; ``python -m analysis report`` never overwrites an existing
``summary/``, which ``SHA256SUMS`` covers). ``run_dir`` is stored resolved (absolute).

and returns the per-label Markdown table (plus the validity line) for the runner to print.
Every number comes from the validated records; offloaded/released bytes and
selected layers come from evidence, never from labels.

Released bytes are *accounted* bytes (what the offloader moved out of the
device-resident set minus its static buffers), not a memory measurement. On the
CPU runtime host and "device" memory are the same RAM: nothing is freed, RSS and
KV-cache capacity do not change, and every output says so (``CPU_NOTE``).

What is deliberately not modelled: accuracy results (``analysis.accuracy``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.aggregate import aggregate  # noqa: E402
from analysis.compare import (  # noqa: E402
    DEFAULT_MARGIN_PCT,
    check_margin,
    compare_implementations,
    verdict_text,
    label_vs_baseline,
    confirmation_table,
    long_window_table,
    native_vs_same_runtime,
    spaced_vs_adjacent,
)
from analysis.load import RunData, load_run  # noqa: E402
from analysis.model import fit_model, model_table  # noqa: E402
from analysis.decision import decision_table  # noqa: E402
from analysis.html_report import write_report_html  # noqa: E402
from analysis.provenance import one_line, provenance  # noqa: E402
from analysis.pareto import knee_rule_text  # noqa: E402
from analysis.validate import point_exclusions, token_digest_status, validate_run  # noqa: E402
from results_schema.io import write_json  # noqa: E402
from results_schema.summary import ComparisonSummary  # noqa: E402

SUMMARY_DIR = "summary"

CPU_NOTE = ("CPU runtime: host and \"device\" memory are the same RAM. \"released bytes\" are accounted bytes "
            "(what the offloader moved out of the device-resident set, minus its static buffers; what it would "
            "free on an accelerator), not measured memory: process RSS and KV-cache capacity do not change.")
"""Caveat printed under every CPU-runtime table and in the recommender output."""


def is_cpu_run(frame: pd.DataFrame) -> bool:
    """True when any row of ``frame`` (a runs or summary frame with a ``runtime`` column) ran on ``cpu``."""
    return "runtime" in frame and not frame.empty and (frame["runtime"].astype(str) == "cpu").any()

PRECISION: dict[str, int] = {
    "throughput_median_tok_s": 2, "throughput_mean_tok_s": 2, "throughput_stdev_tok_s": 2,
    "throughput_min_tok_s": 2, "throughput_max_tok_s": 2, "pooled_round_throughput_median_tok_s": 2,
    "pooled_round_throughput_stdev_tok_s": 2, "round_latency_p50_s": 4, "round_latency_p95_s": 4,
    "load_seconds_median": 2, "kv_cache_tokens_median": 1, "kv_cache_gib_median": 4, "peak_rss_bytes_median": 0,
    "device_memory_bytes_median": 0, "baseline_throughput_median_tok_s": 2, "retention": 4,
    "throughput_change_pct": 2, "kv_gain_tokens": 1, "kv_gain_gib": 4,
}
"""Decimals each per-label statistic is printed with (Markdown); ``analysis verify`` compares at this precision."""


def _clean(v):
    if v is None:
        return None
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if v is pd.NA:
        return None
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
    if isinstance(v, tuple):
        return list(v)
    return v


def records(df: pd.DataFrame) -> list[dict]:
    """Frame -> JSON-safe list of dicts (NaN/NA -> None, numpy scalars -> Python)."""
    return [{k: _clean(v) for k, v in row.items()} for row in df.astype(object).to_dict(orient="records")]


def _fmt(v, decimals: int | None = None) -> str:
    v = _clean(v)
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


def display_columns(summary: pd.DataFrame) -> pd.DataFrame:
    """Add the text columns of the main table: ``vs_baseline`` (verdict, CI, margin), ``window``, ``notes``."""
    s = summary.copy()
    if s.empty:
        for c in ("vs_baseline", "window", "notes"):
            s[c] = []
        return s
    vb, win, notes = [], [], []
    for _, r in s.iterrows():
        v = r.get("vs_baseline_verdict")
        if v is None or (isinstance(v, float) and math.isnan(v)):
            vb.append("–")
        elif v == "reference":
            vb.append("reference")
        else:
            vb.append(verdict_text(v, r.get("vs_baseline_ci_low_pct"), r.get("vs_baseline_ci_high_pct"),
                                   margin_pct=float(r.get("vs_baseline_margin_pct"))))
        ws, rounds = r.get("window_measured_s_min"), r.get("rounds")
        win.append("–" if ws is None or (isinstance(ws, float) and math.isnan(ws)) else
                   f"{float(ws):.2f} s / {int(r.get('window_rounds_min'))} rounds (min per process)")
        n = [str(x) for x in (r.get("vs_baseline_note"), r.get("front_excluded")) if isinstance(x, str) and x]
        notes.append("; ".join(n))
    s["vs_baseline"], s["window"], s["notes"] = vb, win, notes
    return s


def _digest_column(data: RunData, summary: pd.DataFrame) -> list[str]:
    st = token_digest_status(data)
    out = []
    for _, r in summary.iterrows():
        vals = {v for (p, lb, _rep), v in st.items() if p == r["phase"] and lb == r["label"]}
        out.append("differs" if "differs" in vals else ("identical" if vals == {"identical"} else "no_baseline"))
    return out


def build(run_dir: Path | str, *, model_dir: Path | str | None = None,
          margin_pct: float = DEFAULT_MARGIN_PCT) -> dict:
    """Compute every table of the report (no files written).

    Args:
        run_dir: the run directory.
        model_dir: model directory for the layer-byte checks (see ``analysis.validate.validate_run``).
        margin_pct: equivalence margin of every verdict (``analysis.compare.verdict``), percent > 0.

    Returns:
        dict with frames ``summary``, ``comparison``, ``long_window``, ``spaced_vs_adjacent``,
        ``cross_stack``, ``model_table``; ``models`` (per phase, dict or None); ``validation``
        (``ValidationReport``); ``data`` (``RunData``); ``margin_pct``.

    Raises:
        ValueError: a margin that is not a finite number > 0.
    """
    check_margin(margin_pct)
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    report = validate_run(run_dir, data, model_dir=model_dir)
    summary = aggregate(data, excluded=point_exclusions(report, data))
    summary["tokens"] = _digest_column(data, summary) if not summary.empty else []
    if not summary.empty:
        vb = label_vs_baseline(data, summary, margin_pct=margin_pct)
        for c in vb.columns:
            summary[c] = vb[c]
    comparison = compare_implementations(data, summary, margin_pct=margin_pct)
    lw = long_window_table(data, summary, margin_pct=margin_pct)
    sva = spaced_vs_adjacent(data, summary, margin_pct=margin_pct)
    cross = native_vs_same_runtime(summary)
    confirm = confirmation_table(summary)
    models, mtables = {}, []
    for phase in summary["phase"].unique():
        ph = summary[summary["phase"] == phase]
        for impl in ph["implementation"].unique():
            if impl == "baseline":
                continue
            m = fit_model(summary, data.runs, phase, implementation=impl)
            key = f"{phase}/{impl}"
            models[key] = None if m is None else {
                "phase": phase, "implementation": impl, "mode": m.mode, "baseline_tok_s": m.baseline_tok_s,
                "num_prompts": m.num_prompts, "num_layers": m.num_layers, "bytes_per_layer": m.bytes_per_layer,
                "bandwidth_bytes_s": m.bandwidth_bytes_s, "bandwidth": m.bandwidth_source,
                "fit_rms_error_pct": m.fit_rms_error_pct, "fit_points": m.fit_points,
                "predictions_trusted": m.predictions_trusted,
                "copy_bench_bandwidth_bytes_s": copy_bench_bandwidth(run_dir)}
            if m is not None:
                t = model_table(summary, m, phase)
                t = t[t["label"].isin(ph.loc[ph["implementation"] == impl, "label"])]
                t.insert(1, "implementation", impl)
                mtables.append(t)
    mt = pd.concat(mtables, ignore_index=True) if mtables else pd.DataFrame()
    return {"data": data, "validation": report, "summary": summary, "comparison": comparison, "long_window": lw,
            "spaced_vs_adjacent": sva, "cross_stack": cross, "confirmation": confirm, "models": models, "model_table": mt,
            "margin_pct": float(margin_pct)}


RESULT_MODE = 0o644
"""Mode of every file the report writes (``tempfile.mkstemp`` alone would leave 0600)."""


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.fchmod(fd, RESULT_MODE)  # mkstemp creates 0600; result files are world-readable
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_savefig(fig, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.fchmod(fd, RESULT_MODE)
    os.close(fd)
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


IMPL_COLORS = {"baseline": "black", "current": "tab:blue", "official": "tab:orange", "sync": "tab:green"}
IMPL_MARKERS = {"baseline": "o", "current": "s", "official": "^", "sync": "D"}


def point_label(r) -> str:
    """``baseline`` or ``(G,N)`` (``(G,N,kK)`` when the prefetch step is not 1)."""
    if r["implementation"] == "baseline" or int(r["group_size"]) == 0:
        return "baseline"
    k = int(r.get("prefetch_step", 1) or 1)
    return f"({int(r['group_size'])},{int(r['num_in_group'])}" + (f",k{k})" if k != 1 else ")")


def _annotate(ax, points: list[tuple[float, float, str, str]], fontsize: float = 7.0) -> None:
    """Annotate ``(x, y, text, color)`` points without overlaying labels.

    Each label goes right of its point; when its (approximate) box would overlap a label already
    placed, it is moved up or down in steps of one text line until it is free.
    """
    ax.autoscale_view()
    to_pt = 72.0 / ax.figure.dpi
    h = fontsize + 2.0
    placed: list[tuple[float, float, float, float]] = []  # boxes in points: x0, y0, x1, y1
    steps = [0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6]
    for x, y, text, color in points:
        px, py = (v * to_pt for v in ax.transData.transform((x, y)))
        w = 0.62 * fontsize * len(text)
        dy = 2.0
        for k in steps:
            dy = 2.0 + k * h
            box = (px + 5, py + dy, px + 5 + w, py + dy + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append((px + 5, py + dy, px + 5 + w, py + dy + h))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, dy), fontsize=fontsize, color=color,
                    va="bottom")


def _verdict_tag(r) -> str:
    """`` inconclusive`` / `` excluded`` suffixes of a plotted point (same rule as the tables)."""
    tag = ""
    v = r.get("vs_baseline_verdict")
    if isinstance(v, str) and v not in ("reference", ""):
        tag += f" {v}"
    ex = r.get("front_excluded")
    if isinstance(ex, str) and ex:
        tag += " EXCLUDED"
    return tag


def _margin_of(summary: pd.DataFrame) -> float | None:
    if "vs_baseline_margin_pct" in summary and summary["vs_baseline_margin_pct"].notna().any():
        return float(summary["vs_baseline_margin_pct"].dropna().iloc[0])
    return None


def plot_pareto(summary: pd.DataFrame, ax=None, *, cpu: bool | None = None):
    """Capacity (released MiB, accounted by evidence) vs median throughput; front per implementation highlighted.

    Every point is annotated with its (G,N); implementations have distinct markers and sizes, so
    coincident points of different implementations stay visible (concentric), and labels of nearby
    points are stacked. ``cpu`` (default: from ``summary["runtime"]``) adds the CPU caveat.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5))
    phases = list(dict.fromkeys(summary["phase"]))
    fills = ["full", "none"]
    impls = list(dict.fromkeys(summary["implementation"]))
    notes = []
    for pi, (phase, ph) in enumerate(summary.groupby("phase", sort=False)):
        for impl, sub in ph.groupby("implementation", sort=False):
            color = IMPL_COLORS.get(impl, "gray")
            x = sub["released_bytes"].astype(float) / 2**20
            y = sub["throughput_median_tok_s"].astype(float)
            size = 90 - 25 * (impls.index(impl) % 3)
            hollow = fills[pi % 2] == "none"
            ax.scatter(x, y, s=size, marker=IMPL_MARKERS.get(impl, "P"), alpha=0.75,
                       facecolors="none" if hollow else color, edgecolors=color, linewidths=1.2,
                       label=f"{phase}: {impl}" if len(phases) > 1 else impl, zorder=3)
            front = sub[sub["pareto"]]
            if impl != "baseline" and not front.empty:
                base = ph[ph["implementation"] == "baseline"]
                f = pd.concat([base[base["pareto"]], front]).sort_values("released_bytes")
                ax.plot(f["released_bytes"].astype(float) / 2**20, f["throughput_median_tok_s"], "-",
                        c=color, lw=1.5, alpha=0.6, zorder=2)
                ax.scatter(front["released_bytes"].astype(float) / 2**20, front["throughput_median_tok_s"],
                           facecolors="none", edgecolors=color, s=220, lw=1.5, zorder=2)
            for _, r in sub.iterrows():
                text = point_label(r) + (" knee" if bool(r.get("knee", False)) else "") + _verdict_tag(r)
                notes.append((float(r["released_bytes"]) / 2**20, float(r["throughput_median_tok_s"]), text, color))
    ax.scatter([], [], s=220, facecolors="none", edgecolors="gray", lw=1.5, label="Pareto front (ringed)")
    _annotate(ax, notes)
    xl = "released bytes (MiB, accounted by evidence: offloaded - static buffers; not measured)"
    if cpu:
        xl += "\nCPU runtime: host = device RAM, nothing is freed (RSS / KV capacity unchanged)"
    ax.set_xlabel(xl, fontsize=9)
    ax.margins(x=0.1)
    ax.set_ylabel("median process throughput (tok/s)")
    margin = _margin_of(summary)
    ax.set_title("Capacity vs throughput (points: (G,N); Pareto front ringed)" + (" [CPU]" if cpu else "")
                 + ("" if margin is None else f"\nverdict vs baseline, margin ±{margin:g}%; knee: last release "
                                              f"before the cost per byte jumps; EXCLUDED: invalid or tokens differ"),
                 fontsize=9 if margin is not None else None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig or ax.figure


def plot_retention(summary: pd.DataFrame, ax=None, *, cpu: bool | None = None):
    """Retention vs number of offloaded layers (evidence): one scatter per phase and implementation.

    Each point is annotated with its (G,N); points with equal layer counts are dodged horizontally
    (never joined, so no segment can be mistaken for an error bar). Min..max bars are drawn only for
    labels with more than one process, and the legend says so.
    """
    cpu = is_cpu_run(summary) if cpu is None else cpu
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 5))
    phases = list(dict.fromkeys(summary["phase"]))
    groups = list(summary.groupby(["phase", "implementation"], sort=False))
    # dodge: every point sharing a layer count (any phase / implementation / (G,N)) gets its own x
    order = {key: i for i, (key, _g) in enumerate(groups)}
    ranked = summary.assign(_g=[order[(p, i)] for p, i in zip(summary["phase"], summary["implementation"],
                                                               strict=True)])
    ranked = ranked.sort_values(["num_selected_layers", "_g", "group_size", "num_in_group"])
    dodge = {}
    for n, same in ranked.groupby("num_selected_layers", sort=False):
        k = len(same)
        width = min(0.18, 0.8 / k)
        for i, idx in enumerate(same.index):
            dodge[idx] = float(n) + width * (i - (k - 1) / 2)
    notes, any_bars = [], False
    for (phase, impl), sub in groups:
        color = IMPL_COLORS.get(impl, "gray")
        x = pd.Series([dodge[i] for i in sub.index], index=sub.index)
        y = sub["retention"].astype(float)
        ax.scatter(x, y, marker=IMPL_MARKERS.get(impl, "P"), color=color, s=45, zorder=3,
                   label=f"{phase}: {impl}" if len(phases) > 1 else impl)
        rep = sub["processes"].astype(int) > 1
        if rep.any():
            any_bars = True
            base = sub.loc[rep, "baseline_throughput_median_tok_s"].astype(float)
            lo = y[rep] - sub.loc[rep, "throughput_min_tok_s"].astype(float) / base
            hi = sub.loc[rep, "throughput_max_tok_s"].astype(float) / base - y[rep]
            ax.errorbar(x[rep], y[rep], yerr=[lo, hi], fmt="none", ecolor=color, capsize=3, lw=1, zorder=2)
        for (_, r), xi in zip(sub.iterrows(), x, strict=True):
            n = int(r["processes"])
            notes.append((xi, float(r["retention"]), point_label(r) + (f" n={n}" if n > 1 else "")
                          + _verdict_tag(r), color))
    if any_bars:
        ax.errorbar([], [], yerr=[[], []], fmt="none", ecolor="gray", capsize=3,
                    label="bar: process min..max (labels with > 1 process)")
    else:
        ax.plot([], [], " ", label="1 process per label: no spread bars")
    ax.axhline(1.0, color="gray", lw=0.8)
    _annotate(ax, notes)
    ax.margins(x=0.12)
    ax.set_xlabel("offloaded layers (evidence; equal counts dodged horizontally)")
    ax.set_ylabel("throughput retention vs phase baseline")
    margin = _margin_of(summary)
    ax.set_title("Retention vs offloaded layers (points: (G,N))" + (" [CPU runtime]" if cpu else "")
                 + ("" if margin is None else f"\nverdict vs baseline, margin ±{margin:g}%: inconclusive when n=1, "
                                              f"retention > 1.0 or the CI is wider than the margin"),
                 fontsize=9 if margin is not None else None)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig or ax.figure


COMPARISON_COLUMNS = [
    ("phase", "phase"), ("group_size", "G"), ("num_in_group", "N"), ("prefetch_step", "prefetch"),
    ("a_median_tok_s", "current tok/s"), ("b_median_tok_s", "official tok/s"), ("delta_tok_s", "delta tok/s"),
    ("delta_pct", "delta %"), ("ci_low_pct", "CI95 low %"), ("ci_high_pct", "CI95 high %"),
    ("a_processes", "n current"), ("b_processes", "n official"), ("margin_pct", "margin ±%"), ("verdict", "verdict"),
    ("pooled_ci_low_tok_s", "pooled CI low"), ("pooled_ci_high_tok_s", "pooled CI high"),
    ("pooled_verdict", "pooled verdict"), ("note", "note"),
]
def verdict_legend(margin_pct: float) -> str:
    """The verdict rule (``analysis.compare.verdict``) in words, with the margin in force."""
    return (f"equivalence margin ±{margin_pct:g}% of the reference median. equivalent only when the whole "
            f"process-level 95% CI of the relative difference lies inside ±{margin_pct:g}% (also when it excludes "
            f"0: a difference smaller than the margin is never a speed-up); otherwise faster / slower when the CI "
            f"excludes 0; otherwise inconclusive (the CI contains 0 but is wider than the margin), and "
            f"inconclusive when no CI can be computed (fewer than 2 processes on a side; the note gives n).")


VERDICT_LEGEND = verdict_legend(DEFAULT_MARGIN_PCT)


def copy_bench_bandwidth(run_dir: Path | str) -> float | None:
    """Plain ``copy_`` bandwidth (bytes/s) that ``offload.bench`` measured for this run
    (``<run_dir>/copy-bench.json``, written by the runner on CPU runs); None when absent."""
    path = Path(run_dir) / "copy-bench.json"
    if not path.is_file():
        return None
    try:
        v = float(json.loads(path.read_text())["plain_copy_bandwidth_bytes_s"])
    except (ValueError, KeyError, TypeError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def cpu_cost_lines(tables: dict) -> str:
    """CPU runs: each point's retention and predicted vs measured tok/s, fitted vs plain copy bandwidth.

    With every case on the same GEMM kernels (``cpu_kernels.path`` plain), a point's cost is
    the copy of its offloaded layers on the compute path (serial model), so the fitted
    bandwidth can be compared with ``offload.bench``'s plain ``copy_`` of the same layer bytes.
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
        cmp_ = (f"offload.bench plain copy_ {bench / 1e9:.4g} GB/s (model / plain = {fitted / bench:.3g})"
                if bench else "offload.bench plain copy_ not measured")
        source = str(m.get("bandwidth") or "fitted")  # "grid edge (...)" when the fit hit its search bound
        what = "fitted" if source == "fitted" else f"{source}, not a fit:"
        lines.append(f"- {key}: CPU copy bandwidth {what} {fitted / 1e9:.4g} GB/s; {cmp_}; "
                     f"{m['bytes_per_layer']:,.0f} bytes/layer, baseline {m['baseline_tok_s']:.2f} tok/s")
    ret = summary.set_index(["phase", "label"])["retention"] if "retention" in summary else None
    t = mt.copy()
    if ret is not None:
        t["retention"] = [float(ret.get((p, lb), float("nan"))) for p, lb in zip(t["phase"], t["label"])]
    lines += ["", markdown_table(t, [("phase", "phase"), ("implementation", "implementation"), ("label", "label"),
                                     ("retention", "retention"), ("measured_tok_s", "measured tok/s"),
                                     ("predicted_tok_s", "predicted tok/s"), ("error_pct", "error %")],
                                 {"retention": 4, "measured_tok_s": 2, "predicted_tok_s": 2, "error_pct": 1})]
    return "\n".join(lines)


def render_markdown(tables: dict) -> tuple[str, str]:
    """Return ``(full_markdown, main_table_markdown)``."""
    summary, rep = tables["summary"], tables["validation"]
    main = markdown_table(display_columns(summary), [c for c in MAIN_COLUMNS], PRECISION)
    n_err, n_warn = len(rep.errors), len(rep.warnings)
    vline = f"validation: {'VALID' if rep.valid else 'INVALID'} ({n_err} error(s), {n_warn} warning(s))"
    parts = ["# Offload comparison summary", "", vline, ""]
    for i in rep.errors[:50]:
        parts.append(f"- error `{i.code}`: {i.message}")
    for i in rep.warnings[:20]:
        parts.append(f"- warning `{i.code}`: {i.message}")
    cpu = is_cpu_run(tables["data"].runs) or is_cpu_run(summary)
    if cpu:
        main += "\n\n> **Note:** " + CPU_NOTE
        cost = cpu_cost_lines(tables)
        if cost:
            main += "\n\n" + cost
    margin = tables.get("margin_pct", DEFAULT_MARGIN_PCT)
    main += (f"\n\nvs baseline: verdict of each label's processes against the phase baseline's (margin "
             f"±{margin:g}%); a single process, or retention > 1.0, is inconclusive. Pareto / knee: valid, "
             f"token-identical points only (notes say why a point is excluded). "
             + knee_rule_text())
    parts += ["", "## Per label (bytes and layers from runtime evidence)", "", main, ""]
    stats_cols = [("phase", "phase"), ("label", "label"), ("throughput_mean_tok_s", "mean"),
                  ("throughput_min_tok_s", "min"), ("throughput_max_tok_s", "max"),
                  ("pooled_round_throughput_median_tok_s", "pooled round median"),
                  ("pooled_round_throughput_stdev_tok_s", "pooled round stdev"),
                  ("round_latency_p50_s", "P50 round s"), ("round_latency_p95_s", "P95 round s"),
                  ("load_seconds_median", "load s"), ("kv_cache_tokens_median", "KV tokens"),
                  ("kv_cache_gib_median", "KV GiB"), ("peak_rss_bytes_median", "peak RSS bytes"),
                  ("device_memory_bytes_median", "device bytes")]
    parts += ["## Statistics", "", markdown_table(summary, stats_cols, PRECISION), ""]
    fails = tables["data"].failures
    if not fails.empty:
        parts += ["## Failed cases", "", markdown_table(fails, [
            ("phase", "phase"), ("label", "label"), ("repeat", "repeat"), ("failure_type", "failure"),
            ("exit_code", "exit"), ("error_type", "error type"), ("error_message", "message"),
            ("log_path", "log")]), ""]
    from analysis.placement import load_nodes, load_placements, placement_markdown

    parts += placement_markdown(load_placements(tables["data"].run_dir)[0], load_nodes(tables["data"].run_dir))
    margin = tables.get("margin_pct", DEFAULT_MARGIN_PCT)
    parts += [f"Verdicts (every table): {verdict_legend(margin)}", ""]
    parts += [f"## Current vs official (bootstrap 95% CI of the median difference; margin ±{margin:g}%)", ""]
    comp = tables["comparison"]
    parts += [markdown_table(comp, COMPARISON_COLUMNS) if not comp.empty else "_no (G,N) point with both_", ""]
    if not comp.empty:
        parts += [f"Verdicts: {verdict_legend(margin)}", ""]
    lw = tables["long_window"]
    if not lw.empty:
        parts += ["## Long-window confirmation", "",
                  markdown_table(lw, COMPARISON_COLUMNS + [("short_verdict", "same-runtime verdict"),
                                                           ("confirms", "confirms")]), ""]
    conf = tables["confirmation"]
    if not conf.empty:
        parts += ["## Long-window / confirmation retention (each phase vs its own baseline)", "",
                  markdown_table(conf, [("long_phase", "long phase"), ("short_phase", "confirms"), ("label", "label"),
                                        ("long_rounds_per_process", "rounds/proc"),
                                        ("long_retention", "long retention"), ("short_retention", "short retention"),
                                        ("retention_difference", "difference"),
                                        ("long_verdict", "long vs baseline"), ("short_verdict", "short vs baseline"),
                                        ("margin_pct", "margin ±%"), ("confirms_direction", "same verdict")],
                                  {"long_retention": 4, "short_retention": 4, "retention_difference": 4,
                                   "long_rounds_per_process": 1}), ""]
    sva = tables["spaced_vs_adjacent"]
    if not sva.empty:
        parts += ["## Same layer count: adjacent vs spaced", "", markdown_table(sva, [
            ("phase", "phase"), ("implementation", "implementation"), ("num_selected_layers", "layers"),
            ("adjacent_label", "adjacent"), ("spaced_label", "spaced"), ("adjacent_median_tok_s", "adjacent tok/s"),
            ("spaced_median_tok_s", "spaced tok/s"), ("delta_pct", "delta %"), ("ci_low_pct", "CI95 low %"),
            ("ci_high_pct", "CI95 high %"), ("margin_pct", "margin ±%"), ("verdict", "verdict"), ("note", "note")]), ""]
    cross = tables["cross_stack"]
    if not cross.empty:
        parts += ["## Native vs same-runtime (cross-stack: different software stacks, auxiliary only)", "",
                  markdown_table(cross, [("comparison", "comparison"), ("implementation", "implementation"),
                                         ("group_size", "G"), ("num_in_group", "N"), ("native_label", "native"),
                                         ("native_retention", "native retention"),
                                         ("same_runtime_retention", "same-runtime retention"),
                                         ("retention_difference", "difference")],
                                  {"native_retention": 4, "same_runtime_retention": 4, "retention_difference": 4}), ""]
    mt = tables["model_table"]
    if not mt.empty:
        parts += ["## Transfer-bound model (predicted vs measured)", ""]
        for key, m in tables["models"].items():
            if m:
                err = m.get("fit_rms_error_pct")
                parts.append(f"- {key}: {m['mode']}, {m['bytes_per_layer']:,.0f} bytes/layer, bandwidth "
                             f"{m['bandwidth_bytes_s'] / 1e9:.4g} GB/s ({m['bandwidth']}), RMS fit error "
                             f"{'–' if err is None else f'{err:.1f}%'} over {m.get('fit_points', 0)} point(s), "
                             f"baseline {m['baseline_tok_s']:.2f} tok/s")
        parts += ["", markdown_table(mt, [("phase", "phase"), ("implementation", "implementation"), ("label", "label"),
                                          ("measured_tok_s", "measured"), ("predicted_tok_s", "predicted"),
                                          ("error_pct", "error %")]), ""]
    return "\n".join(parts) + "\n", vline + "\n\n" + main + "\n"


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
        margin_pct: equivalence margin of every verdict (``analysis.compare.verdict``).

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
    payload = {
        "schema_version": 1,
        "run_dir": str(run_dir),
        "valid": tables["validation"].valid,
        "notes": [CPU_NOTE] if cpu else [],
        "precision": PRECISION,
        "provenance": prov.model_dump(mode="json"),
        "margin_pct": tables["margin_pct"],
        "verdict_rule": verdict_legend(tables["margin_pct"]),
        "knee_rule": knee_rule_text(),
        "rows": records(tables["summary"]),
        "decision": records(decision_table(tables["data"], tables["summary"], tables["validation"])),
        "comparison": records(tables["comparison"]),
        "long_window": records(tables["long_window"]),
        "spaced_vs_adjacent": records(tables["spaced_vs_adjacent"]),
        "cross_stack": records(tables["cross_stack"]),
        "confirmation": records(tables["confirmation"]),
        "token_digests": [{"phase": p, "label": lb, "repeat": rep, "status": st}
                          for (p, lb, rep), st in sorted(token_digest_status(tables["data"]).items())],
        "models": tables["models"],
        "model_table": records(tables["model_table"]),
    }
    ComparisonSummary.model_validate(payload)  # the schema of the file, checked before it is written
    _atomic_write(out / "comparison-summary.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    csv = tables["summary"].copy()
    _atomic_write(out / "comparison-summary.csv", csv.to_csv(index=False))
    full, main = render_markdown(tables)
    vline = main.split("\n", 1)[0]  # the validity line stays first; provenance right under it
    _atomic_write(out / "comparison-summary.md", full.replace(vline + "\n", f"{vline}\n\n{one_line(prov)}\n", 1))
    if not tables["summary"].empty:
        for name, plot in (("pareto.png", plot_pareto), ("retention.png", plot_retention)):
            fig = plot(tables["summary"], cpu=cpu)
            fig.text(0.01, 0.002, one_line(prov), fontsize=6, color="gray", va="bottom")
            _atomic_savefig(fig, out / name)
            plt.close(fig)
    write_report_html(run_dir, out)
    return main
