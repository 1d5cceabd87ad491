"""Serving analysis: latency-vs-load curves, the highest rate meeting the SLO, its front, verdicts.

What is modelled (input: ``<phase>-serving.jsonl`` lines, ``results_schema.serving.ServingRun``):

* validation (``validate_serving``): every line parses; each planned serving case has one line
  per configured rate and no failure record; every per-request file exists, has the recorded
  SHA-256, and reproduces the record (completed count, token totals, mean TTFT, mean TPOT,
  mean ITL, recomputed with ``request_tpot_s`` / ``pooled_itl_s``: vLLM's definitions);
  warning when requests received their whole output in the first read (TPOT ~0 by definition);
  server-side token counts equal the requested lengths; the offload evidence is non-empty
  for offload cases and empty for the baseline. Warnings: failed requests; a concurrency cap
  that was reached (the achieved rate is then not the configured one).
* per (phase, label, rate) medians over repeats (``rate_table``): achieved rate, output tok/s,
  P50/P90/P99 TTFT, TPOT, ITL, E2E (ms), goodput, SLO attainment, and the evidence.
* ``slo_rates``: per label the highest configured rate that it *and every lower rate* meet
  in every repeat; a rate meets the SLO when no request failed and the attainment (good /
  completed, vLLM's goodput rule: TTFT <= limit and TPOT <= limit) reaches the SLO's target.
* the front of (released bytes from evidence, SLO rate), both maximised (``analysis.pareto``).
* verdicts current vs official per (G, N, prefetch, params) and rate on P99 TPOT, one value per
  repeat and side, with the project's verdict rule (``analysis.compare.decide``, lower is
  better: "faster" = lower P99 TPOT).
* outputs in ``summary/``: ``serving-summary.{json,md}``, ``serving-latency.png`` (curves),
  ``serving-front.png`` (released MiB vs SLO rate).

What is deliberately not modelled: a load sweep finer than the configured rates (the SLO
rate is a configured rate, not an interpolation), multiple-comparison correction.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.pareto import pareto_mask  # noqa: E402
from results_schema.io import RecordError, StrictJSONError, read_json, scan_jsonl, write_json  # noqa: E402
from results_schema.models import CaseFailure  # noqa: E402
from results_schema.serving import (  # noqa: E402
    PROMPT_LEN_TOLERANCE,
    SERVING_SUFFIX,
    ServingRateRow,
    ServingRequests,
    ServingRun,
    ServingSLO,
    ServingSummary,
    SLORateRow,
    VerdictRow,
)

REL_TOL = 1e-6
ONE_READ_S = 1e-4
"""E2E - TTFT below this (s): every chunk of the request arrived with the first one (one network read)."""
INF_RATE = float("inf")

# ----------------------------------------------------------------------------- definitions (vLLM's)


def request_tpot_s(ttft_s: float, latency_s: float, output_tokens: int) -> float | None:
    """TPOT of one request: ``(E2E - TTFT) / (output_tokens - 1)``; None for <= 1 token.

    Source: ``vllm/benchmarks/serve.py`` ``calculate_metrics``. TTFT 0.2 s, E2E 1.2 s,
    11 tokens -> 0.1 s.
    """
    if output_tokens <= 1:
        return None
    return (latency_s - ttft_s) / (output_tokens - 1)


def pooled_itl_s(itls: Sequence[Sequence[float]]) -> list[float]:
    """Every inter-chunk gap of every request, pooled (vLLM's ITL sample)."""
    return [float(x) for gaps in itls for x in gaps]


# ----------------------------------------------------------------------------- loading


@dataclass
class ServingData:
    """Serving lines of a run: validated models, a flat frame, and lines that failed to parse."""

    run_dir: Path
    runs: list[ServingRun] = field(default_factory=list)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    line_errors: list[str] = field(default_factory=list)


def _rate_key(r: float | None) -> float:
    return INF_RATE if r is None else float(r)


def load_serving(run_dir: Path | str) -> ServingData:
    """Read every ``*-serving.jsonl`` of ``run_dir`` strictly (bad lines are kept as errors)."""
    run_dir = Path(run_dir)
    data = ServingData(run_dir=run_dir)
    rows = []
    for path in sorted(run_dir.glob(f"*{SERVING_SUFFIX}")):
        good, errs = scan_jsonl(path, ServingRun)
        data.line_errors += [str(e) for e in errs]
        for _lineno, r in good:
            data.runs.append(r)
            q, e = r.rate, r.evidence
            rows.append({
                "phase": r.phase, "label": r.label, "implementation": r.implementation, "repeat": r.repeat,
                "runtime": r.runtime, "group_size": r.offload.offload_group_size,
                "num_in_group": r.offload.offload_num_in_group, "prefetch_step": r.offload.offload_prefetch_step,
                "offload_params": ",".join(r.offload.offload_params), "rate_index": q.index,
                "rate_rps": _rate_key(q.request_rate_rps), "achieved_req_s": q.request_throughput_req_s,
                "output_tok_s": q.output_throughput_tok_s, "completed": q.completed, "failed": q.failed,
                "duration_s": q.duration_s,
                **{f"{m}_{p}_ms": getattr(getattr(q, m), f"{p}_ms") for m in ("ttft", "tpot", "itl", "e2el")
                   for p in ("p50", "p90", "p99")},
                "goodput_req_s": q.goodput_req_s, "slo_attainment": q.slo_attainment,
                "slo_ttft_ms": r.slo.ttft_ms, "slo_tpot_ms": r.slo.tpot_ms, "slo_target": r.slo.attainment,
                "meets_slo": q.failed == 0 and q.completed > 0 and q.slo_attainment >= r.slo.attainment,
                "offloader_class": e.offloader_class, "wrapped_layers": ",".join(map(str, e.wrapped_layers)),
                "offloaded_bytes": e.offloaded_bytes, "released_bytes": e.released_bytes,
                "kv_cache_tokens": r.kv_cache.kv_cache_tokens, "max_concurrency": q.max_concurrency,
                "peak_concurrent": q.peak_concurrent_requests, "distinct_prompts": q.distinct_prompts,
                "num_prompts": q.num_prompts, "prefix_caching": r.engine.enable_prefix_caching,
            })
    data.frame = pd.DataFrame(rows)
    return data


# ----------------------------------------------------------------------------- validation


def _planned(run_dir: Path) -> dict[tuple[str, str], tuple[int, int]] | None:
    """``{(phase, label): (repeats, rates)}`` of the serving phases in ``plan.json`` (None: no plan)."""
    from analysis.validate import expand_saved_plan

    try:
        saved = expand_saved_plan(run_dir)
    except ValueError:  # a plan.json that does not validate means "no plan" here
        return None
    if saved is None:
        return None
    return {(ph.name, c.label): (c.repeats, len(c.request_rates_rps or ()))
            for ph in saved.phases if ph.kind == "serving" for c in ph.cases}


def _close(a: float, b: float, rel: float = 1e-6, abs_tol: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol)


def _check_requests(run_dir: Path, r: ServingRun, errors: list[str], warnings: list[str] | None = None) -> None:
    q = r.rate
    where = f"{r.phase}/{r.label}-r{r.repeat} rate {q.index}"
    path = run_dir / q.requests_path
    if not path.is_file():
        errors.append(f"{where}: per-request file {q.requests_path} is missing")
        return
    if hashlib.sha256(path.read_bytes()).hexdigest() != q.requests_sha256:
        errors.append(f"{where}: per-request file {q.requests_path} does not match its recorded SHA-256")
        return
    try:
        reqs = read_json(path, ServingRequests)
    except (RecordError, StrictJSONError) as exc:
        errors.append(f"{where}: {exc}")
        return
    ok = [x for x in reqs.requests if x.success]
    one_chunk = sum(1 for x in ok if x.output_tokens > 1 and x.latency_s - x.ttft_s < ONE_READ_S)
    if one_chunk and warnings is not None:
        warnings.append(f"{where}: {one_chunk} of {len(ok)} requests received their whole output in the first "
                        f"network read (E2E - TTFT < {ONE_READ_S * 1000:g} ms: TPOT and ITL ~0 by vLLM's "
                        "definitions, the decode time is inside TTFT)")
    checks = []
    checks.append(("completed", len(ok), q.completed))
    checks.append(("total output tokens", sum(x.output_tokens for x in ok), q.total_output_tokens))
    checks.append(("total input tokens", sum(x.prompt_tokens for x in ok), q.total_input_tokens))
    if ok:
        checks.append(("mean TTFT ms", float(np.mean([x.ttft_s for x in ok])) * 1000, q.ttft.mean_ms))
        tpots = [t for t in (request_tpot_s(x.ttft_s, x.latency_s, x.output_tokens) for x in ok) if t is not None]
        if tpots:
            checks.append(("mean TPOT ms", float(np.mean(tpots)) * 1000, q.tpot.mean_ms))
            checks.append(("P99 TPOT ms", float(np.percentile(tpots, 99)) * 1000, q.tpot.p99_ms))
        itl = pooled_itl_s([x.itl_s for x in ok])
        if itl:
            checks.append(("mean ITL ms", float(np.mean(itl)) * 1000, q.itl.mean_ms))
    for name, got, rec in checks:
        if not _close(float(got), float(rec)):
            errors.append(f"{where}: {name} recomputed from {q.requests_path} is {got}, the record says {rec}")
    tol = r.load.input_len * PROMPT_LEN_TOLERANCE
    bad_out = sorted({x.output_tokens for x in ok} - {r.load.output_len})
    bad_in = sorted({x.prompt_tokens for x in ok
                     if x.prompt_tokens != x.dataset_prompt_tokens or abs(x.prompt_tokens - r.load.input_len) > tol})
    if bad_out or bad_in:
        errors.append(f"{where}: server token counts differ from the request: output {bad_out} (requested "
                      f"{r.load.output_len}), prompt {bad_in} (requested {r.load.input_len}, dataset's own count "
                      f"must match, tolerance {PROMPT_LEN_TOLERANCE:.0%})")


@dataclass
class ServingValidation:
    """Errors make the serving results invalid; warnings do not."""

    errors: list[str]
    warnings: list[str]

    @property
    def valid(self) -> bool:
        return not self.errors


def validate_serving(data: ServingData) -> ServingValidation:
    """Every serving check (see the module docstring)."""
    errors = [f"invalid serving line: {e}" for e in data.line_errors]
    warnings: list[str] = []
    plan = _planned(data.run_dir)
    got: dict[tuple[str, str], list[ServingRun]] = {}
    for r in data.runs:
        got.setdefault((r.phase, r.label), []).append(r)
    keys = {}
    for r in data.runs:
        k = (r.phase, r.label, r.repeat, r.rate.index)
        if k in keys:
            errors.append(f"{r.phase}/{r.label}-r{r.repeat} rate {r.rate.index}: duplicate serving line")
        keys[k] = r
    if plan is None:
        warnings.append("no expandable config.yaml: expected serving counts unknown")
    else:
        for (phase, label), (repeats, n_rates) in plan.items():
            n = len(got.get((phase, label), []))
            if n != repeats * n_rates:
                errors.append(f"{phase}/{label}: expected {repeats} repeat(s) x {n_rates} rate(s) = "
                              f"{repeats * n_rates} serving line(s), got {n}")
        for key in sorted(set(got) - set(plan)):
            errors.append(f"{key[0]}/{key[1]}: serving lines for a case not in the plan")
        for phase in sorted({p for p, _l in plan}):
            path = data.run_dir / f"{phase}-failures.jsonl"
            if path.is_file():
                good, errs = scan_jsonl(path, CaseFailure)
                errors += [f"invalid failure line: {e}" for e in errs]
                for _n, f in good:
                    errors.append(f"{f.phase}/{f.label}-r{f.repeat}: serving case failed [{f.failure_type}] "
                                  f"{f.error_message}")
    for r in data.runs:
        _check_requests(data.run_dir, r, errors, warnings)
        where = f"{r.phase}/{r.label}-r{r.repeat} rate {r.rate.index}"
        e = r.evidence
        if r.offload.enabled and (e.wrapped_count == 0 or e.offloaded_bytes == 0):
            errors.append(f"{where}: offload requested but the server's evidence shows {e.wrapped_count} wrapped "
                          f"modules / {e.offloaded_bytes} bytes")
        if not r.offload.enabled and (e.wrapped_count or e.offloaded_bytes):
            errors.append(f"{where}: baseline server offloaded {e.wrapped_count} modules / {e.offloaded_bytes} bytes")
        if r.rate.distinct_prompts < r.rate.num_prompts and r.engine.enable_prefix_caching:
            warnings.append(f"{where}: {r.rate.num_prompts - r.rate.distinct_prompts} repeated prompt(s) with "
                            "prefix caching on: a repeat can be a cache hit (low TTFT)")
        if r.rate.failed:
            warnings.append(f"{where}: {r.rate.failed} of {r.rate.num_prompts} requests failed")
        if r.rate.max_concurrency is not None and r.rate.peak_concurrent_requests >= r.rate.max_concurrency:
            warnings.append(f"{where}: max_concurrency {r.rate.max_concurrency} was reached: the achieved rate "
                            f"({r.rate.request_throughput_req_s:.2f} req/s) is limited by the cap, not the "
                            "configured rate")
    return ServingValidation(errors=errors, warnings=warnings)


# ----------------------------------------------------------------------------- tables

GROUP = ["phase", "label", "implementation", "group_size", "num_in_group", "prefetch_step", "offload_params"]
_MEDIAN_COLS = ["achieved_req_s", "output_tok_s", "goodput_req_s", "slo_attainment", "duration_s"] + [
    f"{m}_{p}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in ("p50", "p90", "p99")]


def rate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (phase, label, rate): medians over repeats; ``meets_slo`` only when every repeat met it."""
    if frame.empty:
        return pd.DataFrame()
    agg = {c: "median" for c in _MEDIAN_COLS}
    agg.update(repeats=("repeat", "nunique"), failed=("failed", "sum"), meets_slo=("meets_slo", "all"),
               released_bytes=("released_bytes", "median"), offloaded_bytes=("offloaded_bytes", "median"),
               offloader_class=("offloader_class", "first"), wrapped_layers=("wrapped_layers", "first"),
               prefix_caching=("prefix_caching", "first"), distinct_prompts=("distinct_prompts", "min"),
               num_prompts=("num_prompts", "max"))
    spec = {k: (v if isinstance(v, tuple) else (k, v)) for k, v in agg.items()}
    out = frame.groupby(GROUP + ["rate_index", "rate_rps"], sort=False, dropna=False).agg(**spec).reset_index()
    return out.sort_values(["phase", "label", "rate_rps"], kind="stable").reset_index(drop=True)


def slo_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Per label: highest configured rate met by it and every lower rate (NaN = none), and the front flag."""
    rows = []
    if table.empty:
        return pd.DataFrame()
    for key, g in table.groupby(GROUP, sort=False, dropna=False):
        g = g.sort_values("rate_rps")
        best, achieved = float("nan"), float("nan")
        for _i, row in g.iterrows():
            if not row["meets_slo"]:
                break
            best, achieved = float(row["rate_rps"]), float(row["achieved_req_s"])
        rows.append(dict(zip(GROUP, key), released_bytes=float(g["released_bytes"].iloc[0]),
                         slo_rate_rps=best, slo_achieved_req_s=achieved))
    out = pd.DataFrame(rows)
    out["on_front"] = False
    for _phase, g in out.groupby("phase", sort=False):
        cap = g["released_bytes"].tolist()
        # a label meeting no rate has SLO rate 0 for dominance; inf ranks above every finite rate
        rate = [0.0 if math.isnan(x) else (1e300 if math.isinf(x) else x) for x in g["slo_rate_rps"]]
        for idx, m in zip(g.index, pareto_mask(cap, rate)):
            out.loc[idx, "on_front"] = bool(m)
    return out


def _decide(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """``analysis.compare.decide`` (lower is better) as a row; the rule lives there."""
    from analysis import compare

    if hasattr(compare, "decide"):
        d = compare.decide(list(a), list(b), higher_is_better=False)
        return {"verdict": d.verdict, "delta_pct": d.delta_pct, "ci_low_pct": d.ci_low_pct,
                "ci_high_pct": d.ci_high_pct, "verdict_text": d.text}
    # Before the equivalence-margin rule lands in analysis.compare: its interval rule on the delta.
    delta, lo, hi, lo_p, hi_p = compare.bootstrap_delta(list(a), list(b))
    v = compare.verdict(-hi, -lo)
    mb = float(np.median(b))
    return {"verdict": v, "delta_pct": delta / mb * 100.0 if mb else float("nan"), "ci_low_pct": lo_p,
            "ci_high_pct": hi_p, "verdict_text": f"{v} (interval rule of analysis.compare.verdict)"}


def verdicts(frame: pd.DataFrame, a: str = "current", b: str = "official") -> pd.DataFrame:
    """``a`` vs ``b`` on P99 TPOT per (phase, G, N, prefetch, params, rate): one value per repeat and side."""
    rows = []
    if frame.empty:
        return pd.DataFrame()
    key = ["phase", "group_size", "num_in_group", "prefetch_step", "offload_params", "rate_rps"]
    for k, g in frame.groupby(key, sort=False, dropna=False):
        sa = g[g["implementation"] == a]["tpot_p99_ms"].tolist()
        sb = g[g["implementation"] == b]["tpot_p99_ms"].tolist()
        if not sa or not sb:
            continue
        row = dict(zip(key, k), a=a, b=b, a_repeats=len(sa), b_repeats=len(sb),
                   a_p99_tpot_ms=float(np.median(sa)), b_p99_tpot_ms=float(np.median(sb)))
        row.update(_decide(sa, sb))
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- outputs


def _rate_txt(r: float) -> str:
    return "inf" if math.isinf(r) else f"{r:g}"


def _f(v: Any, d: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{v:,.{d}f}"
    return str(v)


def render_markdown(table: pd.DataFrame, slo: pd.DataFrame, verd: pd.DataFrame, val: ServingValidation,
                    slo_def: dict[str, float] | None, *, cpu: bool = False) -> str:
    """The serving Markdown: validity line, per-rate table, SLO-rate front, verdicts (``cpu``: add the CPU note)."""
    lines = [f"serving: {'VALID' if val.valid else 'INVALID'} ({len(val.errors)} error(s), "
             f"{len(val.warnings)} warning(s))"]
    lines += [f"  error: {e}" for e in val.errors[:20]]
    lines += [f"  warning: {w}" for w in val.warnings[:20]]
    if slo_def:
        lines += ["", f"SLO: TTFT <= {slo_def['ttft_ms']:g} ms and TPOT <= {slo_def['tpot_ms']:g} ms per request; a rate "
                  f"meets it when no request failed and >= {slo_def['attainment']:.0%} of requests are good. TPOT = "
                  "(E2E - TTFT) / (output tokens - 1) per request; ITL = every chunk gap pooled over requests "
                  "(vLLM's definitions). Medians over repeats."]
    if not table.empty and int(table["repeats"].min()) < 2:
        lines += ["Fewer than 2 repeats for some label: its numbers are single measurements; a difference between "
                  "labels is not a verdict (verdicts need >= 2 processes per side)."]
    if not table.empty and cpu:
        from analysis.report import CPU_NOTE

        lines += [CPU_NOTE]
    if not table.empty and "prefix_caching" in table:
        pc = sorted(set(table["prefix_caching"]))
        lines += [f"Prefix caching: {'on' if pc == [True] else 'off' if pc == [False] else 'mixed'}; distinct "
                  f"prompts per rate: {int(table['distinct_prompts'].min())}-{int(table['distinct_prompts'].max())} "
                  f"of {int(table['num_prompts'].max())} (vLLM's random dataset; warm-up requests reuse the first "
                  "prompt and are excluded)."]
    if not table.empty:
        lines += ["", "| label | rate req/s | achieved req/s | out tok/s | TTFT P50/P99 ms | TPOT P50/P99 ms | "
                  "ITL P50/P99 ms | E2E P99 ms | goodput req/s | SLO | offloader | wrapped layers | offloaded B |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _i, r in table.iterrows():
            lines.append(
                f"| {r['label']} | {_rate_txt(r['rate_rps'])} | {_f(r['achieved_req_s'], 2)} | {_f(r['output_tok_s'])} | "
                f"{_f(r['ttft_p50_ms'])} / {_f(r['ttft_p99_ms'])} | {_f(r['tpot_p50_ms'])} / {_f(r['tpot_p99_ms'])} | "
                f"{_f(r['itl_p50_ms'])} / {_f(r['itl_p99_ms'])} | {_f(r['e2el_p99_ms'])} | "
                f"{_f(r['goodput_req_s'], 2)} | {'met' if r['meets_slo'] else 'missed'} | "
                f"{str(r['offloader_class']).rsplit('.', 1)[-1]} | {r['wrapped_layers'] or '–'} | "
                f"{int(r['offloaded_bytes']):,} |")
    if not slo.empty:
        lines += ["", "| label | released B | highest rate meeting the SLO (req/s) | achieved req/s there | front |",
                  "|---|---|---|---|---|"]
        for _i, r in slo.iterrows():
            rate = "none" if math.isnan(r["slo_rate_rps"]) else _rate_txt(r["slo_rate_rps"])
            lines.append(f"| {r['label']} | {int(r['released_bytes']):,} | {rate} | "
                         f"{_f(r['slo_achieved_req_s'], 2)} | {'yes' if r['on_front'] else ''} |")
    if not verd.empty:
        lines += ["", "| G | N | rate req/s | current P99 TPOT ms | official P99 TPOT ms | verdict |",
                  "|---|---|---|---|---|---|"]
        for _i, r in verd.iterrows():
            lines.append(f"| {r['group_size']} | {r['num_in_group']} | {_rate_txt(r['rate_rps'])} | "
                         f"{_f(r['a_p99_tpot_ms'])} ({r['a_repeats']}) | {_f(r['b_p99_tpot_ms'])} ({r['b_repeats']}) | "
                         f"{r['verdict_text']} |")
    elif not table.empty:
        lines += ["", "current vs official on P99 TPOT: no pair (the phase has no official cases)."]
    return "\n".join(lines) + "\n"


def plot_latency(table: pd.DataFrame):
    """P50 (dashed) and P99 (solid) TTFT, TPOT and ITL vs achieved request rate, one line per label."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, m, name in zip(axes, ("ttft", "tpot", "itl"), ("TTFT", "TPOT", "ITL")):
        for i, ((_ph, label), g) in enumerate(table.groupby(["phase", "label"], sort=False)):
            g = g.sort_values("rate_rps")
            color = f"C{i % 10}"
            ax.plot(g["achieved_req_s"], g[f"{m}_p99_ms"], "o-", color=color, label=f"{label} P99")
            ax.plot(g["achieved_req_s"], g[f"{m}_p50_ms"], "x--", color=color, alpha=0.6, label=f"{label} P50")
        ax.set_xlabel("achieved request rate (req/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} vs load")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_front(slo: pd.DataFrame):
    """Released MiB (evidence) vs highest rate meeting the SLO; front points highlighted."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    finite = slo[[not (math.isnan(x) or math.isinf(x)) for x in slo["slo_rate_rps"]]]
    rate = [0.0 if math.isnan(x) else x for x in slo["slo_rate_rps"]]
    ax.scatter(slo["released_bytes"] / 2**20, rate, color="grey", label="label (meeting no rate: drawn at 0)")
    f = slo[slo["on_front"]]
    ax.scatter(f["released_bytes"] / 2**20, [0.0 if math.isnan(x) else x for x in f["slo_rate_rps"]],
               color="C3", s=80, facecolors="none", label="front")
    for (_i, r), y in zip(slo.iterrows(), rate):
        ax.annotate(r["label"], (r["released_bytes"] / 2**20, y), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel("released MiB (evidence)")
    ax.set_ylabel("highest request rate meeting the SLO (req/s)")
    ax.set_title("released capacity vs SLO rate" + ("" if len(finite) == len(slo) else " (inf/none shown at 0)"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _rows(df: pd.DataFrame, model: type, *, inf_to_none: Sequence[str] = ()) -> tuple[Any, ...]:
    """Frame -> validated models (NaN -> None; ``inf`` rates -> None, the records' convention)."""
    fields = set(model.model_fields)
    out = []
    for row in df.astype(object).to_dict(orient="records"):
        clean = {}
        for k, v in row.items():
            if k not in fields:
                continue
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and (math.isnan(v) or (k in inf_to_none and math.isinf(v))):
                v = None
            clean[k] = v
        out.append(model(**clean))
    return tuple(out)


def write_serving_summary(run_dir: Path | str, out_dir: Path | str | None = None) -> str:
    """Analyse the serving lines of a run; write ``summary/serving-*``; return the Markdown.

    Raises:
        OSError: the summary directory cannot be written.
    """
    run_dir = Path(run_dir).resolve()
    out = run_dir / "summary" if out_dir is None else Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load_serving(run_dir)
    val = validate_serving(data)
    table = rate_table(data.frame)
    slo = slo_rates(table)
    verd = verdicts(data.frame)
    slo_def = data.runs[0].slo.model_dump() if data.runs else None
    cpu = bool(not data.frame.empty and (data.frame["runtime"] == "cpu").any())
    md = render_markdown(table, slo, verd, val, slo_def, cpu=cpu)
    slo_rows = slo.copy()
    if not slo_rows.empty:
        slo_rows["slo_rate_is_inf"] = [bool(math.isinf(x)) for x in slo_rows["slo_rate_rps"]]
    summary = ServingSummary(
        valid=val.valid, errors=tuple(val.errors), warnings=tuple(val.warnings),
        slo=ServingSLO(**slo_def) if slo_def else None,
        rates=_rows(table, ServingRateRow, inf_to_none=("rate_rps",)),
        slo_rates=_rows(slo_rows, SLORateRow, inf_to_none=("slo_rate_rps",)),
        verdicts=_rows(verd, VerdictRow, inf_to_none=("rate_rps",)))
    write_json(out / "serving-summary.json", summary)
    (out / "serving-summary.md").write_text(md)
    if not table.empty:
        fig = plot_latency(table)
        fig.savefig(out / "serving-latency.png", dpi=110)
        plt.close(fig)
        fig = plot_front(slo)
        fig.savefig(out / "serving-front.png", dpi=110)
        plt.close(fig)
    return md
