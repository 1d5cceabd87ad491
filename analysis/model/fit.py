"""The transfer-bound model fitted to a finished run's summary, and the recommender built on it.

What is modelled: the model itself, its two forms and its bandwidth fit are ``offload_tools.transfer_model``
(the runner's choose-then-confirm phase uses the same code while a run goes). Here: which summary rows
are fitted (valid offloaded points of one phase and implementation; bytes per layer = evidence bytes /
wrapped count; the form: ``serial`` on the CPU runtime and for the sync offloader, else ``overlapped``)
and the per-label table of predicted vs measured throughput.

The recommender returns the highest-throughput *measured* point whose capacity
(released bytes from evidence, or KV-cache gain) meets the need, among
candidates that are valid (no validation error concerns them) and generated
the baseline's tokens (``front_excluded`` empty), of the requested
implementation (or the baseline); it states the chosen point's verdict against
the baseline and against the runner-up (``analysis.comparison.verdict_rule.decide``, with the
margin). Model predictions (of measured and unmeasured settings) are shown only
for a trusted model (``analysis.model.trust``: real fit, every point within 10%,
within 2x of the run's own copy bench).

What is deliberately not modelled: prefill cost separately from decode,
bandwidth contention between the copy and compute, KV growth as a function of
released bytes beyond the 1:1 assumption stated in the recommender output.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.comparison.variance import reference_mask
from offload_tools.transfer_model import MeasuredPoint, TransferModel, fit, with_errors
from results_schema.units import GIB

MAX_FIT_ERROR_PCT = 10.0
"""Largest RMS relative throughput error (percent) of a trusted model (``analysis.model.trust``)."""


class ChoiceError(ValueError):
    """A phase or implementation name the run does not have; the message lists the choices."""


def _points(summary: pd.DataFrame, phase: str) -> pd.DataFrame:
    s = summary[(summary["phase"] == phase) & (summary["implementation"] != "baseline")]
    s = s[s["wrapped_count"] > 0]
    if "front_excluded" in s:
        s = s[s["front_excluded"].fillna("") == ""]
    return s


def fit_model(summary: pd.DataFrame, runs: pd.DataFrame, phase: str, *, implementation: str = "current",
              bandwidth_bytes_s: float | None = None, mode: str | None = None,
              bench_bandwidth_bytes_s: float | None = None) -> TransferModel | None:
    """Build (and fit unless ``bandwidth_bytes_s`` is given) the model for one phase.

    Returns None when the phase has no baseline or no offloaded point with evidence. Points that
    ``front_excluded`` names (validation errors, tokens differing) are not fitted. The model carries
    its RMS relative error over the fitted points and whether the bandwidth was given, fitted, or
    landed on an edge of ``BANDWIDTH_GRID``.
    """
    ph = summary[summary["phase"] == phase]
    base = ph[ph["label"].isin(set(runs.loc[reference_mask(runs) & (runs["phase"] == phase), "label"]))]
    pts = _points(summary, phase)
    pts = pts[pts["implementation"] == implementation] if (pts["implementation"] == implementation).any() else pts
    if base.empty or pts.empty:
        return None
    pr = runs[runs["phase"] == phase]
    num_layers = int(pr["ev_num_layers"].max())
    bpl = float((pts["offloaded_bytes"] / pts["wrapped_count"]).median())
    runtime = str(base["runtime"].iloc[0])
    if mode is None:
        mode = "serial" if runtime == "cpu" or implementation == "sync" else "overlapped"
    num_prompts = _num_prompts(runs, phase)
    t_base = float(base["throughput_median_tok_s"].iloc[0])
    if bandwidth_bytes_s is not None:
        m = TransferModel(t_base, num_prompts, num_layers, bpl, bandwidth_bytes_s, mode)
        return with_errors(m, _measured(pts), bench_bandwidth_bytes_s)
    return fit(_measured(pts), baseline_tok_s=t_base, num_prompts=num_prompts, num_layers=num_layers,
               bytes_per_layer=bpl, mode=mode, bench_bandwidth_bytes_s=bench_bandwidth_bytes_s)


def _measured(pts: pd.DataFrame) -> list[MeasuredPoint]:
    return [MeasuredPoint(int(r["group_size"]), int(r["num_in_group"]), int(r["prefetch_step"]),
                          float(r["throughput_median_tok_s"])) for _, r in pts.iterrows()]


def _num_prompts(runs: pd.DataFrame, phase: str) -> int:
    """Prompts per round of the phase's workload (tokens gained per decode step)."""
    return int(runs.loc[runs["phase"] == phase, "num_prompts"].iloc[0])


def model_table(summary: pd.DataFrame, model: TransferModel, phase: str) -> pd.DataFrame:
    """Predicted vs measured throughput for every label of ``phase`` (baseline included)."""
    rows = []
    for _, r in summary[summary["phase"] == phase].iterrows():
        pred = model.predict(int(r["group_size"]), int(r["num_in_group"]), int(r["prefetch_step"]))
        meas = float(r["throughput_median_tok_s"])
        rows.append({"phase": phase, "label": r["label"], "group_size": int(r["group_size"]),
                     "num_in_group": int(r["num_in_group"]), "prefetch_step": int(r["prefetch_step"]),
                     "measured_tok_s": meas, "predicted_tok_s": pred, "error_pct": (pred - meas) / meas * 100.0})
    return pd.DataFrame(rows)


@dataclass
class Recommendation:
    """What ``recommend`` found; ``lines`` is the printed reasoning."""

    need_bytes: float | None
    need_kv_gib: float | None
    best: dict | None
    predictions: list[dict]
    lines: list[str]
    verdict: str = ""  # the chosen point vs the baseline, with interval and margin (``verdict_text``)


def recommend(summary: pd.DataFrame, runs: pd.DataFrame, *, need_gib: float | None = None,
              need_kv_gib: float | None = None, phase: str | None = None, implementation: str = "current",
              bandwidth_bytes_s: float | None = None, valid: bool = True, top: int = 3,
              kv_bytes_per_token: int | None = None, margin_pct: float | None = None,
              bench_bandwidth_bytes_s: float | None = None) -> Recommendation:
    """Highest-throughput valid measured point meeting the capacity need, plus model predictions.

    Args:
        summary: ``analysis.aggregate.aggregate`` output (``analysis.report.tables.build`` passes the
            validation's exclusions, so ``front_excluded`` names every point with an error).
        runs: ``RunData.runs`` (workload prompt count; per-process throughput for verdicts).
        need_gib: device memory to release (GiB = 2**30 bytes), compared with evidence released bytes.
        need_kv_gib: KV-cache gain needed (GiB), compared with the measured KV gain; predicted
            settings assume released bytes become KV cache 1:1.
        phase: phase to use (default: the phase with the most labels).
        implementation: offload implementation whose measured points are candidates (the baseline
            is always one) and whose unmeasured settings are predicted.
        bandwidth_bytes_s: model bandwidth (default: fitted).
        valid: whether the run validated (stated in the reasoning).
        top: how many unmeasured predictions to return.
        kv_bytes_per_token: KV-cache bytes per token (``offload_tools.layer_bytes.kv_bytes_per_token``);
            converts token-only KV logs (the CPU runtime) to GiB for ``need_kv_gib``.
        margin_pct: equivalence margin of the verdicts printed (default ``DEFAULT_MARGIN_PCT``).
        bench_bandwidth_bytes_s: the run's in-run copy bench (bytes/s), checked against the fit.

    Raises:
        ValueError: neither or both needs given, or a negative need.
        ChoiceError: ``phase`` or ``implementation`` not in the run (the message lists the choices).
    """
    from analysis.comparison.verdict_rule import DEFAULT_MARGIN_PCT

    margin_pct = DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct
    if need_gib is not None and need_kv_gib is None:
        need = need_gib
    elif need_kv_gib is not None and need_gib is None:
        need = need_kv_gib
    else:
        raise ValueError("give exactly one of need_gib or need_kv_gib")
    if need < 0:
        raise ValueError(f"capacity need ({need}) must be >= 0")
    phase, ph = _phase_of(summary, phase, implementation)
    lines = [f"phase {phase!r}; run {'valid' if valid else 'INVALID (see summary/validation.json)'}; "
             f"candidates: valid {implementation} points and the baseline whose tokens match the baseline's"]
    cap = _capacity(ph, need_gib, need_kv_gib, kv_bytes_per_token, lines)
    best, vs_base = _best_point(ph, cap, need, runs[runs["phase"] == phase], implementation, margin_pct, lines)
    model = fit_model(summary, runs, phase, implementation=implementation, bandwidth_bytes_s=bandwidth_bytes_s,
                      bench_bandwidth_bytes_s=bench_bandwidth_bytes_s)
    preds = _model_lines(model, summary, ph, implementation, need, lines,
                         top=top, kv_note=need_kv_gib is not None)
    return Recommendation(need_bytes=None if need_gib is None else need_gib * GIB, need_kv_gib=need_kv_gib,
                          best=best, predictions=preds, lines=lines, verdict=vs_base)


def _model_lines(model: TransferModel | None, summary: pd.DataFrame, ph: pd.DataFrame, implementation: str,
                 need: float, lines: list[str], *, top: int, kv_note: bool) -> list[dict]:
    """Append the model's fit and its ``top`` predictions for unmeasured settings to ``lines``; return those."""
    from analysis.model.predict import predict_unmeasured
    from analysis.model.trust import untrusted_reason

    preds: list[dict] = []
    phase = str(ph["phase"].iloc[0])
    if model is None:
        lines.append("model: not enough valid measured points (baseline + one offloaded point with evidence) to fit")
    else:
        lines.append(f"model ({model.mode}): baseline {model.baseline_tok_s:.2f} tok/s, {model.bytes_per_layer:,.0f} "
                     f"bytes/layer, {model.fit_note()}")
        mt = model_table(summary, model, phase)
        fitted = set(_points(summary, phase).query("implementation == @implementation")["label"])
        ok = untrusted_reason(model) is None
        for _, r in mt[mt["label"].isin(fitted)].iterrows():
            lines.append(f"model fit {r['label']}: measured {r['measured_tok_s']:.2f} tok/s, " + (
                f"predicted {r['predicted_tok_s']:.2f} tok/s, error {r['error_pct']:+.1f}%" if ok else "no prediction"))
        if not ok:
            lines.append(f"model: UNTRUSTED ({untrusted_reason(model)}); no predictions for unmeasured settings")
        else:
            preds = predict_unmeasured(model, ph, implementation, need)[:top]
            for p in preds:
                lines.append(f"unmeasured {implementation} G={p['group_size']} N={p['num_in_group']} "
                             f"prefetch_step={p['prefetch_step']}: predicted {p['predicted_tok_s']:.2f} tok/s, "
                             f"~{p['predicted_released_gib']:.4g} GiB released"
                             + (" (KV gain assumed 1:1 with released bytes)" if kv_note else ""))
            if not preds:
                lines.append("model: no unmeasured setting meets the need")
    return preds


def _phase_of(summary: pd.DataFrame, phase: str | None, implementation: str) -> tuple[str, pd.DataFrame]:
    """``(phase, its summary rows)``: the given phase (default: the one with the most labels).

    Raises:
        ChoiceError: ``phase`` not in the run, or ``implementation`` without a measured point in it.
    """
    phases = list(dict.fromkeys(summary["phase"]))
    if phase is None:
        phase = str(summary.groupby("phase")["label"].count().idxmax())
    elif phase not in phases:
        raise ChoiceError(f"--phase {phase!r} is not a phase of this run; choices: {', '.join(phases)}")
    ph = summary[(summary["phase"] == phase)]
    impls = [i for i in dict.fromkeys(ph["implementation"]) if i != "baseline"]
    if implementation not in impls:
        raise ChoiceError(f"--implementation {implementation!r} has no measured point in phase {phase!r}; "
                          f"choices: {', '.join(impls) or '(none: baseline only)'}")
    return phase, ph


def _capacity(ph: pd.DataFrame, need_gib: float | None, need_kv_gib: float | None,
              kv_bytes_per_token: int | None, lines: list[str]) -> pd.Series:
    """Capacity (GiB) of every row of ``ph`` on the axis of the need; appends the need's line to ``lines``."""
    if need_gib is not None:
        lines.append(f"need: release >= {need_gib:g} GiB (released bytes accounted by evidence = offloaded - static buffers; not a memory measurement)")
        return ph["released_bytes"].astype(float) / GIB
    cap = ph["kv_gain_gib"].astype("Float64").astype(float)
    source = "'Available KV cache memory' lines"
    if cap.isna().all() and kv_bytes_per_token and ph["kv_gain_tokens"].notna().any():
        cap = ph["kv_gain_tokens"].astype("Float64").astype(float) * kv_bytes_per_token / GIB
        source = f"'KV cache size: N tokens' lines x {kv_bytes_per_token:,} bytes/token from config.json"
    lines.append(f"need: KV cache gain >= {need_kv_gib:g} GiB vs the phase baseline (measured: {source})")
    return cap


def _best_point(ph: pd.DataFrame, cap: pd.Series, need: float, pr: pd.DataFrame, implementation: str,
                margin_pct: float, lines: list[str]) -> tuple[dict | None, str]:
    """The highest-throughput valid measured point of ``ph`` meeting ``need`` and its verdict vs the baseline.

    ``pr`` holds the phase's per-process runs (throughput for the verdicts). Appends the reasoning to ``lines``.
    """
    meets = cap >= need - 1e-12
    excluded = ph["front_excluded"].fillna("") if "front_excluded" in ph else pd.Series("", index=ph.index)
    of_impl = ph["implementation"].isin([implementation, "baseline"])
    for i in ph.index[meets & of_impl & (excluded != "")]:
        lines.append(f"not a candidate: {ph.loc[i, 'label']} ({excluded[i]})")
    ok = ph[meets & of_impl & (excluded == "")].copy()
    ok["capacity_gib"] = cap[ok.index]
    if ok.empty:
        lines.append("no valid measured point meets the need")
        return None, ""
    ranked = ok.sort_values(["throughput_median_tok_s", "capacity_gib"], ascending=[False, True])
    b = ranked.iloc[0]
    best = {"label": b["label"], "implementation": b["implementation"], "group_size": int(b["group_size"]),
            "num_in_group": int(b["num_in_group"]), "prefetch_step": int(b["prefetch_step"]),
            "throughput_median_tok_s": float(b["throughput_median_tok_s"]),
            "retention": float(b["retention"]), "capacity_gib": float(b["capacity_gib"])}
    lines.append(f"{len(ok)} valid measured point(s) meet it; highest median throughput: {b['label']} "
                 f"(G={best['group_size']}, N={best['num_in_group']}, prefetch_step={best['prefetch_step']}) "
                 f"{best['throughput_median_tok_s']:.2f} tok/s, retention {best['retention']:.3f}, "
                 f"capacity {best['capacity_gib']:.4g} GiB")
    thr = {lb: pr.loc[pr["label"] == lb, "throughput_tok_s"].tolist() for lb in ph["label"]}
    return best, _verdict_lines(ph, ranked, best, thr, margin_pct, lines)


def _verdict_lines(ph: pd.DataFrame, ranked: pd.DataFrame, best: dict, thr: dict[str, list],
                   margin_pct: float, lines: list[str]) -> str:
    """Append the best point's verdict vs the baseline and vs the runner-up; return the former ('' if none)."""
    from analysis.comparison.compare import FIXED_CI_NAME, vs_baseline_text
    from analysis.comparison.verdict_rule import decide, verdict_text

    vs_base = ""
    base = ph.loc[ph["implementation"] == "baseline", "label"].tolist()
    row = ph[ph["label"] == best["label"]]
    if best["implementation"] != "baseline" and not row.empty and isinstance(
            row["vs_baseline_verdict"].iloc[0] if "vs_baseline_verdict" in row else None, str):
        r = row.iloc[0]  # the verdict of record (the summary's: a sequential phase's is its stopping look's)
        vs_base = "vs baseline: " + vs_baseline_text(str(r["vs_baseline_verdict"]), r["vs_baseline_ci_low_pct"],
                                                     r["vs_baseline_ci_high_pct"], float(r["vs_baseline_margin_pct"]),
                                                     r.get("vs_baseline_ci_name"))
        note = r.get("vs_baseline_note")
        lines.append(f"{best['label']} {vs_base}" + (f" ({note})" if isinstance(note, str) and note else ""))
    elif best["implementation"] != "baseline" and base and thr.get(base[0]):
        d = decide(thr[best["label"]], thr[base[0]], margin_pct=margin_pct)
        v = d.verdict
        why = ""
        if best["retention"] > 1.0:
            v, why = "inconclusive", f"; retention {best['retention']:.3f} > 1.0 is noise until repeated"
        vs_base = f"vs baseline: {verdict_text(v, d.ci_low_pct, d.ci_high_pct, margin_pct=margin_pct, method=d.method)}"
        lines.append(f"{best['label']} {vs_base} (n={d.n_a} vs {d.n_b}{why})")
    if len(ranked) > 1:
        r2 = ranked.iloc[1]
        d = decide(thr[best["label"]], thr[r2["label"]], margin_pct=margin_pct)
        seq = not row.empty and str(row.iloc[0].get("vs_baseline_ci_name") or FIXED_CI_NAME) not in (
            FIXED_CI_NAME, "no interval")
        lines.append(f"{best['label']} vs runner-up {r2['label']}: {d.text} (n={d.n_a} vs {d.n_b})"
                     + ("" if d.verdict == "faster" else "; the choice between them is not decided by the data")
                     + ("; descriptive: a sequential phase's looks judge each label against the baseline only, "
                        "and a fixed 95% interval after its stopping does not hold its level" if seq else ""))
    return vs_base
