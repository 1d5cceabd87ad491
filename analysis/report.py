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

and returns the per-label Markdown table (plus the validity line) for the runner to print.
Every number comes from the validated records; offloaded/released bytes and
selected layers come from evidence, never from labels.

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
    compare_implementations,
    confirmation_table,
    long_window_table,
    native_vs_same_runtime,
    spaced_vs_adjacent,
)
from analysis.load import RunData, load_run  # noqa: E402
from analysis.model import fit_model, model_table  # noqa: E402
from analysis.validate import token_digest_status, validate_run  # noqa: E402
from results_schema.io import write_json  # noqa: E402

SUMMARY_DIR = "summary"

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
    ("throughput_stdev_tok_s", "stdev"), ("retention", "retention vs baseline"), ("kv_gain_tokens", "KV gain tok"),
    ("tokens", "tokens vs baseline"), ("pareto", "Pareto"), ("knee", "knee"),
]


def _digest_column(data: RunData, summary: pd.DataFrame) -> list[str]:
    st = token_digest_status(data)
    out = []
    for _, r in summary.iterrows():
        vals = {v for (p, lb, _rep), v in st.items() if p == r["phase"] and lb == r["label"]}
        out.append("differs" if "differs" in vals else ("identical" if vals == {"identical"} else "no_baseline"))
    return out


def build(run_dir: Path | str, *, model_dir: Path | str | None = None) -> dict:
    """Compute every table of the report (no files written).

    Args:
        run_dir: the run directory.
        model_dir: model directory for the layer-byte checks (see ``analysis.validate.validate_run``).

    Returns:
        dict with frames ``summary``, ``comparison``, ``long_window``, ``spaced_vs_adjacent``,
        ``cross_stack``, ``model_table``; ``models`` (per phase, dict or None); ``validation``
        (``ValidationReport``); ``data`` (``RunData``).
    """
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    report = validate_run(run_dir, data, model_dir=model_dir)
    summary = aggregate(data)
    summary["tokens"] = _digest_column(data, summary) if not summary.empty else []
    comparison = compare_implementations(data, summary)
    lw = long_window_table(data, summary)
    sva = spaced_vs_adjacent(data, summary)
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
                "bandwidth_bytes_s": m.bandwidth_bytes_s, "bandwidth": "fitted"}
            if m is not None:
                t = model_table(summary, m, phase)
                t = t[t["label"].isin(ph.loc[ph["implementation"] == impl, "label"])]
                t.insert(1, "implementation", impl)
                mtables.append(t)
    mt = pd.concat(mtables, ignore_index=True) if mtables else pd.DataFrame()
    return {"data": data, "validation": report, "summary": summary, "comparison": comparison, "long_window": lw,
            "spaced_vs_adjacent": sva, "cross_stack": cross, "confirmation": confirm, "models": models, "model_table": mt}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_savefig(fig, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def plot_pareto(summary: pd.DataFrame, ax=None):
    """Capacity (released MiB, from evidence) vs median throughput; the front per implementation highlighted."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"baseline": "black", "current": "tab:blue", "official": "tab:orange", "sync": "tab:green"}
    markers = ["o", "s", "^", "D", "v", "P"]
    for pi, (phase, ph) in enumerate(summary.groupby("phase", sort=False)):
        for impl, sub in ph.groupby("implementation", sort=False):
            x = sub["released_bytes"].astype(float) / 2**20
            y = sub["throughput_median_tok_s"].astype(float)
            ax.scatter(x, y, c=colors.get(impl, "gray"), marker=markers[pi % len(markers)], alpha=0.45,
                       label=f"{phase}: {impl}")
            front = sub[sub["pareto"]]
            if impl != "baseline" and not front.empty:
                base = ph[ph["implementation"] == "baseline"]
                f = pd.concat([base[base["pareto"]], front]).sort_values("released_bytes")
                ax.plot(f["released_bytes"].astype(float) / 2**20, f["throughput_median_tok_s"], "-",
                        c=colors.get(impl, "gray"), lw=2)
                ax.scatter(front["released_bytes"].astype(float) / 2**20, front["throughput_median_tok_s"],
                           facecolors="none", edgecolors=colors.get(impl, "gray"), s=140, lw=2)
            for _, r in sub[sub["knee"]].iterrows():
                ax.annotate(f"knee {r['label']}", (r["released_bytes"] / 2**20, r["throughput_median_tok_s"]),
                            textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel("released device memory (MiB, evidence: offloaded - static buffers)")
    ax.set_ylabel("median process throughput (tok/s)")
    ax.set_title("Capacity vs throughput (Pareto front highlighted)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig or ax.figure


def plot_retention(summary: pd.DataFrame, ax=None):
    """Retention vs number of offloaded layers (evidence), per phase and implementation; bars = min..max."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    for (phase, impl), sub in summary.groupby(["phase", "implementation"], sort=False):
        sub = sub.sort_values("num_selected_layers")
        base = sub["baseline_throughput_median_tok_s"].astype(float)
        y = sub["retention"].astype(float)
        lo = y - sub["throughput_min_tok_s"].astype(float) / base
        hi = sub["throughput_max_tok_s"].astype(float) / base - y
        ax.errorbar(sub["num_selected_layers"], y, yerr=[lo, hi], fmt="o-" if impl != "baseline" else "o",
                    capsize=3, label=f"{phase}: {impl}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("offloaded layers (evidence)")
    ax.set_ylabel("throughput retention vs phase baseline")
    ax.set_title("Retention vs offloaded layers (bars: process min..max)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig or ax.figure


COMPARISON_COLUMNS = [
    ("phase", "phase"), ("group_size", "G"), ("num_in_group", "N"), ("prefetch_step", "prefetch"),
    ("a_median_tok_s", "current tok/s"), ("b_median_tok_s", "official tok/s"), ("delta_tok_s", "delta tok/s"),
    ("delta_pct", "delta %"), ("ci_low_tok_s", "CI95 low"), ("ci_high_tok_s", "CI95 high"),
    ("verdict", "verdict"), ("pooled_ci_low_tok_s", "pooled CI low"), ("pooled_ci_high_tok_s", "pooled CI high"),
    ("pooled_verdict", "pooled verdict"),
]


def render_markdown(tables: dict) -> tuple[str, str]:
    """Return ``(full_markdown, main_table_markdown)``."""
    summary, rep = tables["summary"], tables["validation"]
    main = markdown_table(summary, MAIN_COLUMNS, PRECISION)
    n_err, n_warn = len(rep.errors), len(rep.warnings)
    vline = f"validation: {'VALID' if rep.valid else 'INVALID'} ({n_err} error(s), {n_warn} warning(s))"
    parts = ["# Offload comparison summary", "", vline, ""]
    for i in rep.errors[:50]:
        parts.append(f"- error `{i.code}`: {i.message}")
    for i in rep.warnings[:20]:
        parts.append(f"- warning `{i.code}`: {i.message}")
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
    parts += ["## Current vs official (bootstrap 95% CI of the median difference; faster/slower only when the CI "
              "excludes 0)", ""]
    comp = tables["comparison"]
    parts += [markdown_table(comp, COMPARISON_COLUMNS) if not comp.empty else "_no (G,N) point with both_", ""]
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
                                        ("confirms_direction", "same direction")],
                                  {"long_retention": 4, "short_retention": 4, "retention_difference": 4,
                                   "long_rounds_per_process": 1}), ""]
    sva = tables["spaced_vs_adjacent"]
    if not sva.empty:
        parts += ["## Same layer count: adjacent vs spaced", "", markdown_table(sva, [
            ("phase", "phase"), ("implementation", "implementation"), ("num_selected_layers", "layers"),
            ("adjacent_label", "adjacent"), ("spaced_label", "spaced"), ("adjacent_median_tok_s", "adjacent tok/s"),
            ("spaced_median_tok_s", "spaced tok/s"), ("delta_pct", "delta %"), ("ci_low_tok_s", "CI95 low"),
            ("ci_high_tok_s", "CI95 high"), ("verdict", "verdict")]), ""]
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
                parts.append(f"- {key}: {m['mode']}, {m['bytes_per_layer']:,.0f} bytes/layer, bandwidth "
                             f"{m['bandwidth_bytes_s'] / 1e9:.4g} GB/s (fitted), baseline {m['baseline_tok_s']:.2f} tok/s")
        parts += ["", markdown_table(mt, [("phase", "phase"), ("implementation", "implementation"), ("label", "label"),
                                          ("measured_tok_s", "measured"), ("predicted_tok_s", "predicted"),
                                          ("error_pct", "error %")]), ""]
    return "\n".join(parts) + "\n", vline + "\n\n" + main + "\n"


def write_summary(run_dir: Path | str, *, model_dir: Path | str | None = None) -> str:
    """Write ``summary/`` for a run directory and return the per-label Markdown table.

    Args:
        run_dir: a run directory with ``<phase>-runs.jsonl`` / ``<phase>-failures.jsonl``.
        model_dir: model directory for the layer-byte checks; default ``<run_dir>/model`` or the
            records' ``model`` path.

    Returns:
        The validity line and the per-label Markdown table (label, G, N, selected layers,
        offloaded bytes, throughput tok/s, retention vs baseline, Pareto flag, ...).

    Raises:
        FileNotFoundError: no run files in ``run_dir``.
    """
    run_dir = Path(run_dir)
    tables = build(run_dir, model_dir=model_dir)
    out = run_dir / SUMMARY_DIR
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "validation.json", tables["validation"])
    payload = {
        "schema_version": 1,
        "run_dir": str(run_dir),
        "valid": tables["validation"].valid,
        "precision": PRECISION,
        "rows": records(tables["summary"]),
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
    _atomic_write(out / "comparison-summary.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    csv = tables["summary"].copy()
    _atomic_write(out / "comparison-summary.csv", csv.to_csv(index=False))
    full, main = render_markdown(tables)
    _atomic_write(out / "comparison-summary.md", full)
    if not tables["summary"].empty:
        fig = plot_pareto(tables["summary"])
        _atomic_savefig(fig, out / "pareto.png")
        plt.close(fig)
        fig = plot_retention(tables["summary"])
        _atomic_savefig(fig, out / "retention.png")
        plt.close(fig)
    return main
