"""Serving analysis: latency-vs-load curves, the highest rate meeting the SLO, its front, verdicts.

What is modelled (input: ``<phase>-serving.jsonl`` lines, ``results_schema.records.serving.ServingRun``):

* validation (``validate_serving``): every line parses; each planned serving case has one line
  per configured rate and no failure record; every per-request file exists, has the recorded
  SHA-256, and reproduces the record (counts, token totals, mean / P50 / P90 / P99 of TTFT,
  TPOT, ITL and E2E, good requests, goodput and SLO attainment, recomputed by
  ``analysis.serving.recompute`` with vLLM's ``calculate_metrics`` rules);
  warning when requests received their whole output in the first read (TPOT ~0 by definition);
  server-side token counts equal the requested lengths; the offload evidence is non-empty
  for offload cases and empty for the baseline. Warnings: failed requests; a concurrency cap
  that was reached (the achieved rate is then not the configured one).
* per (phase, label, rate) medians over repeats (``rate_table``): achieved rate, output tok/s,
  P50/P90/P99 TTFT, TPOT, ITL, E2E (ms), goodput, SLO attainment, and the evidence.
* ``slo_rates``: per label the highest configured rate that it *and every lower rate* meet
  in every repeat; a rate meets the SLO when no request failed and the attainment (good /
  completed, vLLM's goodput rule: TTFT <= limit and TPOT <= limit) reaches the SLO's target.
* the front of (released bytes from evidence, SLO rate), both maximised (``analysis.comparison.pareto``).
* verdicts current vs official per (G, N, prefetch, params) and rate on P99 TPOT, one value per
  repeat and side, with the project's verdict rule (``analysis.comparison.verdict_rule.decide``, lower is
  better: "faster" = lower P99 TPOT).
* a sequential serving phase's looks (``serving-looks.jsonl``): every look recomputed from the serving lines and held
  to the design the saved config declares (``analysis.serving.sequential_check``; errors ``sequential_record``,
  ``sequential_recompute``, ``sequential_design``).
* outputs under load (``analysis.serving.outputs``): each request's output tokens vs the baseline's
  for the same prompt at the same rate; a mismatch beyond the baselines' own floor is an error naming
  the case, the rate and the requests.
* percentiles with their sample, verdicts of every offload label vs the baseline against the
  baselines' floor, rate-order effects (``analysis.serving.stats``); in a sequential serving phase a looked-at
  label's verdicts are those of the look that ended it, at its level (``analysis.serving.sequential``).
* outputs in ``summary/``: ``serving-summary.{json,md}``, ``serving-latency.png`` (curves),
  ``serving-front.png`` (released MiB vs SLO rate); ``report.html`` re-rendered when the report step
  wrote it there (its serving section reads ``serving-summary.json``).

What is deliberately not modelled: a load sweep finer than the configured rates (the SLO
rate is a configured rate, not an interpolation), multiple-comparison correction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from analysis.comparison.pareto import pareto_mask
from analysis.report.html import write_report_html
from analysis.report.plots import save_png
from analysis.serving.report import SummaryFrames, plot_front, plot_latency, render_markdown
from analysis.serving.outputs import check_outputs, output_errors
from analysis.serving.request_checks import ServingValidation, check_requests
from analysis.serving.sequential import sequential_verdicts
from analysis.serving.sequential_check import serving_look_issues
from analysis.serving.stats import (
    control_warnings,
    order_effects,
    percentile_rows,
    process_variance,
    variance_lines,
)
from results_schema.codec.files import write_text_atomic
from results_schema.codec.io import read_json, scan_jsonl, write_json
from results_schema.records.manifest import FILE_NAME as MANIFEST_FILE, EnvironmentManifest
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.serving import SERVING_SUFFIX, ServingRun
from results_schema.reading.saved_plan import expand_saved_plan
from results_schema.records.serving_looks import read_serving_looks
from results_schema.records.serving_summary import (
    BaselineVerdictRow,
    OrderEffectRow,
    OutputCheckRow,
    PercentileRow,
    ServingVarianceRow,
    ServingRateRow,
    ServingSummary,
    SLORateRow,
    VerdictRow,
)
from results_schema.records.serving_spec import ServingSLO

INF_RATE = float("inf")

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
                "step_delay_ms": r.step_delay_ms,
            })
    data.frame = pd.DataFrame(rows)
    return data


# ----------------------------------------------------------------------------- validation


def _planned(run_dir: Path) -> dict[tuple[str, str], tuple[int, int]] | None:
    """``{(phase, label): (repeats, rates)}`` of the serving phases in ``plan.json`` (None: no plan)."""
    try:
        saved = expand_saved_plan(run_dir)
    except ValueError:  # a plan.json that does not validate means "no plan" here
        return None
    if saved is None:
        return None
    return {(ph.name, c.label): (c.repeats, len(c.request_rates_rps or ()))
            for ph in saved.phases if ph.kind == "serving" for c in ph.cases}


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
        errors += _plan_errors(data.run_dir, plan, got)
    for r in data.runs:
        check_requests(data.run_dir, r, errors, warnings)
        _check_run(r, errors, warnings)
    errors += [f"{code}: {message}" for code, _phase, message in serving_look_issues(data.run_dir,
                                                                                       _saved_config(data.run_dir))]
    out_errors, out_warnings = output_errors(check_outputs(data.run_dir, data.runs), data.runs)
    return ServingValidation(errors=errors + out_errors, warnings=warnings + out_warnings)


def _saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's saved config (``EnvironmentManifest.config``; None: no readable manifest, which ``analysis validate``'s
    check ``manifest`` names): what a sequential serving phase declared."""
    try:
        return read_json(run_dir / MANIFEST_FILE, EnvironmentManifest).config
    except (OSError, ValueError):
        return None


def _plan_errors(run_dir: Path, plan: dict[tuple[str, str], tuple[int, int]],
                 got: dict[tuple[str, str], list[ServingRun]]) -> list[str]:
    """Serving lines per planned case (repeats x rates), cases outside the plan, failure records."""
    errors = []
    for (phase, label), (repeats, n_rates) in plan.items():
        n = len(got.get((phase, label), []))
        if n != repeats * n_rates:
            errors.append(f"{phase}/{label}: expected {repeats} repeat(s) x {n_rates} rate(s) = "
                          f"{repeats * n_rates} serving line(s), got {n}")
    for key in sorted(set(got) - set(plan)):
        errors.append(f"{key[0]}/{key[1]}: serving lines for a case not in the plan")
    for phase in sorted({p for p, _l in plan}):
        path = run_dir / f"{phase}-failures.jsonl"
        if path.is_file():
            good, errs = scan_jsonl(path, CaseFailure)
            errors += [f"invalid failure line: {e}" for e in errs]
            for _n, f in good:
                errors.append(f"{f.phase}/{f.label}-r{f.repeat}: serving case failed [{f.failure_type}] "
                              f"{f.error_message}")
    return errors


def _check_run(r: ServingRun, errors: list[str], warnings: list[str]) -> None:
    """Evidence vs the requested offload; prefix-cache hits, failed requests, a contended rate, a reached
    concurrency cap."""
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
    hl = r.rate.host_load
    if hl is not None and hl.contended:
        warnings.append(f"{where}: contended (foreign work on the host while it served: {hl.foreign_cores:.2f} "
                        f"foreign cores, steal {hl.steal_fraction * 100:.1f}%): verdicts resting on it are withheld")
    if r.rate.max_concurrency is not None and r.rate.peak_concurrent_requests >= r.rate.max_concurrency:
        warnings.append(f"{where}: max_concurrency {r.rate.max_concurrency} was reached: the achieved rate "
                        f"({r.rate.request_throughput_req_s:.2f} req/s) is limited by the cap, not the "
                        "configured rate")


# ----------------------------------------------------------------------------- tables

GROUP = ["phase", "label", "implementation", "group_size", "num_in_group", "prefetch_step", "offload_params"]
_MEDIAN_COLS = ["achieved_req_s", "output_tok_s", "goodput_req_s", "slo_attainment", "duration_s"] + [
    f"{m}_{p}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in ("p50", "p90", "p99")]


def rate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (phase, label, configured rate): medians over repeats (whatever position the rate ran at);
    ``meets_slo`` only when every repeat met it and the pooled completed requests support the attainment
    (``slo_supported``: ``n * (1 - attainment) >= 1``); ``rate_index`` is the rate's rank by value."""
    if frame.empty:
        return pd.DataFrame()
    agg: dict[str, str | tuple[str, str]] = {c: "median" for c in _MEDIAN_COLS}
    agg.update(repeats=("repeat", "nunique"), failed=("failed", "sum"), meets_slo=("meets_slo", "all"),
               completed_requests=("completed", "sum"), slo_target=("slo_target", "first"),
               released_bytes=("released_bytes", "median"), offloaded_bytes=("offloaded_bytes", "median"),
               offloader_class=("offloader_class", "first"), wrapped_layers=("wrapped_layers", "first"),
               prefix_caching=("prefix_caching", "first"), distinct_prompts=("distinct_prompts", "min"),
               num_prompts=("num_prompts", "max"), step_delay_ms=("step_delay_ms", "first"))
    spec = {k: (v if isinstance(v, tuple) else (k, v)) for k, v in agg.items()}
    out = frame.groupby(GROUP + ["rate_rps"], sort=False, dropna=False).agg(**spec).reset_index()
    out["slo_supported"] = [n * (1 - t) >= 1 - 1e-9 for n, t in zip(out["completed_requests"], out["slo_target"],
                                                                     strict=True)]
    out["meets_slo"] = out["meets_slo"] & out["slo_supported"]
    out = out.sort_values(["phase", "label", "rate_rps"], kind="stable").reset_index(drop=True)
    out["rate_index"] = out.groupby(["phase", "label"]).cumcount()
    return out


def slo_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Per label: highest configured rate met by it and every lower rate (NaN = none), and the front flag (never
    for a speed control, ``control``, nor for a second undelayed baseline label of the phase: one setting, one
    point)."""
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
        rows.append(dict(zip(GROUP, key, strict=True), released_bytes=float(g["released_bytes"].iloc[0]),
                         slo_rate_rps=best, slo_achieved_req_s=achieved,
                         control=bool(g["step_delay_ms"].iloc[0]) if "step_delay_ms" in g else False))
    out = pd.DataFrame(rows)
    out["on_front"] = False
    # a speed control (offload.controls) is a slowed baseline, not a setting a user picks: never on the front;
    # a second undelayed baseline label (the blocks design's twin) is the same setting measured again: the
    # setting stands on the front once, as the phase's first baseline label
    plain_base = (out["implementation"].astype(str) == "baseline") & ~out["control"]
    first = out[plain_base].groupby("phase", sort=False)["label"].first()
    twin = plain_base & (out["label"] != out["phase"].map(first))
    for _phase, g in out[~out["control"] & ~twin].groupby("phase", sort=False):
        cap = g["released_bytes"].tolist()
        # a label meeting no rate has SLO rate 0 for dominance; inf ranks above every finite rate
        rate = [0.0 if math.isnan(x) else (1e300 if math.isinf(x) else x) for x in g["slo_rate_rps"]]
        for idx, m in zip(g.index, pareto_mask(cap, rate), strict=True):
            out.loc[idx, "on_front"] = bool(m)
    return out


def _decide(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """``analysis.comparison.verdict_rule.decide`` (lower is better) as a row; the rule lives there."""
    from analysis.comparison.verdict_rule import decide

    d = decide(list(a), list(b), higher_is_better=False)
    return {"verdict": d.verdict, "delta_pct": d.delta_pct, "ci_low_pct": d.ci_low_pct,
            "ci_high_pct": d.ci_high_pct, "verdict_text": d.text}


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
        row = dict(zip(key, k, strict=True), a=a, b=b, a_repeats=len(sa), b_repeats=len(sb),
                   a_p99_tpot_ms=float(np.median(sa)), b_p99_tpot_ms=float(np.median(sb)))
        row.update(_decide(sa, sb))
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- outputs


def _rows(df: pd.DataFrame, model: type[BaseModel], *, inf_to_none: Sequence[str] = ()) -> tuple[Any, ...]:
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
    pct = pd.DataFrame(percentile_rows(run_dir, data.runs))
    try:
        looks = read_serving_looks(run_dir)
    except ValueError:
        looks = []  # analysis validate names the file (check sequential)
    bver_rows = sequential_verdicts(data.runs, looks)  # a looked-at label: its stopping look's rows, at its level
    val.warnings.extend(control_warnings(bver_rows, data.runs))
    bver = pd.DataFrame(bver_rows)
    order = pd.DataFrame(order_effects(data.runs))
    outputs = pd.DataFrame([c.__dict__ for c in check_outputs(run_dir, data.runs)])
    pvar_rows = process_variance(data.runs)
    pvar = pd.DataFrame(pvar_rows)
    md = render_markdown(table, slo, verd, val, slo_def, cpu=cpu,
                         extra=SummaryFrames(percentiles=pct, baseline_verdicts=bver, order=order, outputs=outputs))
    if pvar_rows:
        md += ("\n\n## Where the noise lives (between processes; serving has no rounds)\n\n"
               + "\n".join(variance_lines(pvar_rows)) + "\n")
    slo_rows = slo.copy()
    if not slo_rows.empty:
        slo_rows["slo_rate_is_inf"] = [bool(math.isinf(x)) for x in slo_rows["slo_rate_rps"]]
    summary = ServingSummary(
        valid=val.valid, errors=tuple(val.errors), warnings=tuple(val.warnings),
        slo=ServingSLO(**slo_def) if slo_def else None,
        rates=_rows(table, ServingRateRow, inf_to_none=("rate_rps",)),
        slo_rates=_rows(slo_rows, SLORateRow, inf_to_none=("slo_rate_rps",)),
        verdicts=_rows(verd, VerdictRow, inf_to_none=("rate_rps",)),
        percentiles=_rows(pct, PercentileRow, inf_to_none=("rate_rps",)),
        baseline_verdicts=_rows(bver, BaselineVerdictRow, inf_to_none=("rate_rps",)),
        order_effects=_rows(order, OrderEffectRow, inf_to_none=("rate_rps",)),
        outputs=_rows(outputs, OutputCheckRow, inf_to_none=("rate_rps",)),
        process_variance=_rows(pvar, ServingVarianceRow, inf_to_none=("rate_rps",)))
    write_json(out / "serving-summary.json", summary)
    write_text_atomic(out / "serving-summary.md", md)
    if not table.empty:
        save_png(plot_latency(table, pct), out / "serving-latency.png", bbox_inches=None)
        save_png(plot_front(slo), out / "serving-front.png", bbox_inches=None)
    if (out / "comparison-summary.json").is_file() and (out / "validation.json").is_file():
        write_report_html(run_dir, out)  # the page's serving section reads the file just written
    return md
