"""The decision of a choose-then-confirm run, from its measurements, and the recomputation of its choices.

What is modelled:

* ``decide``: the recommended setting among the *measured* settings of the verify phase that are valid
  (``front_excluded`` empty: evidence and tokens as the baseline's) and release at least the need (evidence
  bytes), the fastest by median throughput; its retention interval (the verdict rule's 95% t interval over
  processes against the phase's baselines, ``analysis.comparison.verdict_rule.decide``), its margin
  over the runner-up (the same rule), prediction beside measurement for every verified setting, and the process
  counts (run, and what measuring every candidate with the same design would take). A need of 0 recommends the
  baseline ("offload unnecessary"). Nothing is recommended from a prediction: with no valid measured setting
  meeting the need, the decision says so.
* ``recompute``: each recorded decision's noise term (``analysis.model.probe_noise`` of its recorded probe
  arms), fits, form, predictions, chosen settings and (a sequential verify phase) its verify target recomputed from
  its recorded inputs with the runner's own rule (``offload_tools.choice``); a difference is reported;
* ``recheck_verify_series``: a sequential verify phase's look lines ran under the designs the decisions declared.

What is deliberately not modelled: the choice while the run goes (``runners.orchestration.choose``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from analysis.comparison.compare import FIXED_CI_NAME
from analysis.model.probe_noise import noise_text, probe_noise
from results_schema.records.choice import PROBE_STAGES, ChoiceDecision, read_decisions, verify_phase
from results_schema.records.sequential import DEFAULT_PAIRING
from results_schema.units import GIB


@dataclass
class ChoiceResult:
    """What ``decide`` found; ``lines`` is the printed reasoning (console, Markdown, HTML)."""

    recommended: dict | None
    verified: list[dict]
    processes_run: int
    processes_every_candidate: int
    trusted: bool
    lines: list[str] = field(default_factory=list)


def _verified(decisions: Sequence[ChoiceDecision], summary: pd.DataFrame, phase: str) -> list[dict]:
    """Every decided setting: the prediction it was chosen under beside its measurement."""
    rows = []
    for d in decisions:
        preds = {(p.group_size, p.num_in_group, p.prefetch_step): p for p in d.predictions}
        for c in d.chosen:
            p = preds[(c.group_size, c.num_in_group, c.prefetch_step)]
            m = summary[(summary["phase"] == phase) & (summary["label"] == c.label)]
            meas = float(m["retention"].iloc[0]) if not m.empty else math.nan
            inside = p.retention_low <= meas <= p.retention_high if not math.isnan(meas) else None
            rows.append({"label": c.label, "stage": d.stage, "predicted_retention": p.retention,
                         "retention_low": p.retention_low, "retention_high": p.retention_high,
                         "measured_retention": meas, "within_interval": inside,
                         "error_pct": (p.retention - meas) / meas * 100.0 if not math.isnan(meas) else math.nan})
    return rows


def _noise_words(d: ChoiceDecision) -> str:
    """The decision line's noise: the pooled SD and its df (``analysis.model.probe_noise``); a record written before
    the probe arms were recorded keeps its words (the range of its baselines)."""
    if d.noise_arms:
        return noise_text(probe_noise({a.label: a.tok_s for a in d.noise_arms}))
    n = len(d.baseline_tok_s)
    return f"noise {d.noise_pct:.1f}% from {n} baseline process{'es' if n != 1 else ''}" + (
        ": the range of two, not a bound on the noise" if n <= 2 else "")


def decide(decisions: Sequence[ChoiceDecision], summary: pd.DataFrame, runs: pd.DataFrame, *, verify_phase: str,
           processes_run: int, margin_pct: float) -> ChoiceResult:
    """The run's recommendation from its measurements (module docstring).

    Args:
        decisions: the run's decision lines (at least one).
        summary: ``analysis.aggregate.aggregate`` output with ``front_excluded`` (validation exclusions).
        runs: per-process runs (``RunData.runs``: throughput per process for the intervals).
        verify_phase: the phase the decided settings were measured in.
        processes_run: case processes the run recorded (runs and failures).
        margin_pct: equivalence margin of the verdicts.
    """
    from analysis.comparison.verdict_rule import decide as verdict

    first, last = decisions[0], decisions[-1]
    every = next((d.processes_every_candidate for d in decisions if d.stage not in PROBE_STAGES), 0)
    res = ChoiceResult(None, _verified(decisions, summary, verify_phase), processes_run, every,
                       all(d.trusted for d in decisions))
    res.lines.append(f"choose: need {first.need_source} = {first.need_bytes / GIB:.4g} GiB; layer bytes from "
                     f"{first.layer_bytes_source}")
    for d in decisions:
        if d.form is not None:
            fits = "; ".join(f"{f.form} {f.bandwidth_bytes_s / 1e9:.4g} GB/s ({f.bandwidth_source}, worst point "
                             f"{f.max_point_error_pct:.1f}%)" for f in d.fits)
            noise = _noise_words(d)
            used = f"; fitted on uncontended processes {', '.join(d.fitted_processes)}" if d.fitted_processes else ""
            res.lines.append(f"choose ({d.stage}): model form {d.form}: {d.form_reason}; fits: {fits}; "
                             f"interval +-{d.half_width_pct:.1f}% ({noise}){used}")
        res.lines.append(d.note if d.stage == "stopped" else f"choose ({d.stage}): {d.note}")
    for v in res.verified:
        res.lines.append(f"verified {v['label']} ({v['stage']}): predicted retention {v['predicted_retention']:.3f} "
                         f"[{v['retention_low']:.3f}-{v['retention_high']:.3f}], measured "
                         f"{v['measured_retention']:.3f}" + ("" if v["within_interval"] else "  MISSED"))
    if last.stage == "unnecessary":
        res.recommended = {"label": "baseline", "group_size": 0, "num_in_group": 0, "prefetch_step": 1,
                           "reason": "offload unnecessary"}
        res.lines.append("recommended: baseline (offload unnecessary: the need is 0 bytes)")
    elif last.stage == "stopped":
        res.lines.append("recommended: NONE: the choice stopped before predicting (its probe stayed contended); "
                         "nothing is recommended")
    else:
        _recommend(res, summary, runs, verify_phase, last, margin_pct, verdict)
    if not res.trusted:
        res.lines.append("model: NOT TRUSTED on this host (a verified point still missed after the refit); the "
                         "recommendation comes from the measured front only")
    res.lines.append(f"processes run: {processes_run} (measuring every candidate: {res.processes_every_candidate})"
                     if last.stage != "stopped" else
                     f"processes run: {processes_run} (the probe and its re-measures; nothing predicted, so no candidate "
                     f"counted)")
    return res


def _recommend(res: ChoiceResult, summary: pd.DataFrame, runs: pd.DataFrame, phase: str, last: ChoiceDecision,
               margin_pct: float, verdict: Any) -> None:
    ph = summary[summary["phase"] == phase]
    excluded = ph["front_excluded"].fillna("") if "front_excluded" in ph else pd.Series("", index=ph.index)
    ok = ph[(ph["implementation"] == last.implementation) & (excluded == "")
            & (ph["released_bytes"].astype(float) >= last.need_bytes)]
    if ok.empty:
        res.lines.append("recommended: NONE: no valid measured setting meets the need (nothing is recommended "
                         "from predictions)")
        return
    ranked = ok.sort_values(["throughput_median_tok_s", "released_bytes"], ascending=[False, False])
    b = ranked.iloc[0]
    pr = runs[runs["phase"] == phase]
    thr = {lb: pr.loc[pr["label"] == lb, "throughput_tok_s"].tolist() for lb in ph["label"]}
    d = verdict(thr[b["label"]], thr["baseline"], margin_pct=margin_pct)
    lo, hi, text, used = d.ci_low_pct, d.ci_high_pct, d.text, f"{d.n_a} vs {d.n_b} processes"
    looked = last.verify_design is not None and str(b.get("vs_baseline_ci_name") or FIXED_CI_NAME) != FIXED_CI_NAME
    if looked:  # a sequential verify phase: the verdict of record is the stopping look's (docs/sequential.md)
        lo, hi = float(b["vs_baseline_ci_low_pct"]), float(b["vs_baseline_ci_high_pct"])
        text = (f"{b['vs_baseline_verdict']} ({b['vs_baseline_ci_name']} {lo:+.1f}%..{hi:+.1f}%, target "
                f"±{float(b['vs_baseline_margin_pct']):g}%)")
        used = "its sequential looks"
    res.recommended = {"label": str(b["label"]), "group_size": int(b["group_size"]),
                       "num_in_group": int(b["num_in_group"]), "prefetch_step": int(b["prefetch_step"]),
                       "released_gib": float(b["released_bytes"]) / GIB, "retention": float(b["retention"]),
                       "retention_low": 1 + lo / 100, "retention_high": 1 + hi / 100, "vs_baseline": text}
    r = res.recommended
    res.lines.append(f"recommended: {r['label']} (G={r['group_size']}, N={r['num_in_group']}, prefetch_step="
                     f"{r['prefetch_step']}): releases {r['released_gib']:.4g} GiB (evidence), measured retention "
                     f"{r['retention']:.3f} [{r['retention_low']:.3f}-{r['retention_high']:.3f}] "
                     f"({used}; vs baseline: {text})")
    if len(ranked) > 1:
        r2 = ranked.iloc[1]
        m = verdict(thr[b["label"]], thr[r2["label"]], margin_pct=margin_pct)
        r["runner_up"] = str(r2["label"])
        r["vs_runner_up"] = m.text
        res.lines.append(f"margin over the runner-up {r2['label']}: {m.text}"
                         + ("" if m.verdict == "faster" else " (the data do not separate them)")
                         + ("; descriptive: a fixed 95% comparison the looks never made" if looked else ""))


def recompute(d: ChoiceDecision) -> list[str]:
    """Differences between decision ``d`` and the runner's rule rerun on its recorded inputs (empty: none)."""
    from offload_tools.choice import ChoiceInputs, Setting, compute_choice, front
    from offload_tools.transfer_model import MeasuredPoint

    if d.stage == "unnecessary":
        return [] if d.need_bytes == 0 and not d.chosen else [f"{d.stage}: need {d.need_bytes} B is not 0"]
    if d.stage in PROBE_STAGES:  # nothing predicted: no setting chosen (the record's own validator)
        return []
    exclude = tuple(Setting(p.group_size, p.num_in_group, p.prefetch_step) for p in d.points) \
        if d.stage != "predict" else ()
    inp = ChoiceInputs(num_layers=d.num_layers, num_prompts=d.num_prompts, layer_bytes=dict(enumerate(d.layer_bytes)),
                       slot=d.slot_bytes, baseline_tok_s=statistics.median(d.baseline_tok_s),
                       noise_pct=d.noise_pct, points=[MeasuredPoint(p.group_size, p.num_in_group, p.prefetch_step,
                                                                    p.throughput_tok_s) for p in d.points],
                       need_bytes=d.need_bytes, budget=d.budget, exclude=exclude,
                       bench_bandwidth_bytes_s=d.copy_bench_bandwidth_bytes_s)
    ch = compute_choice(inp)
    diffs = []
    if d.noise_arms:
        noise = probe_noise({a.label: a.tok_s for a in d.noise_arms}).half_width_pct
        if not math.isclose(noise, d.noise_pct, rel_tol=1e-9, abs_tol=1e-12):
            diffs.append(f"{d.stage}: noise {d.noise_pct:.6g}% recorded, {noise:.6g}% recomputed from its probe arms")
    chosen = ch.chosen if d.stage != "front" else front(ch.predictions, d.need_bytes, exclude)[:d.budget]
    if ch.form != d.form:
        diffs.append(f"{d.stage}: form {d.form} recorded, {ch.form} recomputed")
    diffs += _recheck_target(d, ch.predictions, exclude)
    want = [(c.group_size, c.num_in_group, c.prefetch_step) for c in d.chosen]
    got = [(p.setting.group_size, p.setting.num_in_group, p.setting.prefetch_step) for p in chosen]
    if want != got:
        diffs.append(f"{d.stage}: chosen {want} recorded, {got} recomputed")
    rec = {(p.group_size, p.num_in_group, p.prefetch_step): p for p in d.predictions}
    for p in ch.predictions:
        r = rec.get((p.setting.group_size, p.setting.num_in_group, p.setting.prefetch_step))
        if r is None or not math.isclose(r.predicted_tok_s, p.tok_s, rel_tol=1e-9) or r.released_bytes != p.released_bytes:
            diffs.append(f"{d.stage}: prediction of {p.setting} differs ({r} recorded)")
            break
    return diffs


def _recheck_target(d: ChoiceDecision, preds: Sequence[Any], exclude: Sequence[Any]) -> list[str]:
    """A sequential verify series' target against ``offload_tools.choice.verify_target`` on the decision's own
    predictions (the target comes from the prediction alone, never from verify data)."""
    from offload_tools.choice import verify_target

    vd = d.verify_design
    if vd is None:
        return []
    t = verify_target(preds, d.need_bytes, exclude, vd.floor_pct)
    label = {s: s.label(d.implementation) for s in (t.best, t.runner_up) if s is not None}
    got = (t.target_pct, t.gap_pct, label.get(t.best) if t.best else None,
           label.get(t.runner_up) if t.runner_up else None)
    want = (vd.target_pct, vd.predicted_gap_pct, vd.best, vd.runner_up)
    same = math.isclose(got[0], want[0], rel_tol=1e-9) and got[2:] == want[2:] and (
        (got[1] is None and want[1] is None) or (got[1] is not None and want[1] is not None
                                                  and math.isclose(got[1], want[1], rel_tol=1e-9, abs_tol=1e-12)))
    return [] if same else [f"{d.stage}: verify target {want} recorded, {got} recomputed from its predictions"]


def recheck_verify_series(decisions: Sequence[ChoiceDecision], lines: Sequence[Any]) -> list[str]:
    """A sequential verify phase: each decision's look series ran under the design it declared before its first block
    (``ChoiceDecision.verify_design``): every look line of the verify phase belongs to one declared series
    (``first_block``) and carries its looks, target, alpha and spending, unpaired (a ``VerifyDesign`` declares no
    pairing, so its series run the default, ``results_schema.records.sequential.DEFAULT_PAIRING``:
    ``runners.orchestration.choose_verify.series_design``); each series starts where the one before it ended. The
    looks themselves are recomputed by ``analysis.comparison.sequential_check``.

    Args:
        decisions: the run's decision lines, in file order.
        lines: the run's look lines (``results_schema.records.sequential.LookDecision``), in file order.
    """
    series = [d.verify_design for d in decisions if d.verify_design is not None]
    phase = verify_phase(decisions)
    if not series or phase is None:
        return []
    mine = [x for x in lines if x.phase == phase]
    out: list[str] = []
    by_first = {vd.first_block: vd for vd in series}
    end = 0
    for vd in series:
        ran = [x for x in mine if x.first_block == vd.first_block]
        if vd.first_block != end:
            out.append(f"verify series from block {vd.first_block + 1}: the series before it ended after block {end}")
        end = vd.first_block + (ran[-1].blocks if ran else 0)
    for x in mine:
        declared = by_first.get(x.first_block)
        if declared is None:
            out.append(f"verify look {x.look} after block {x.first_block + x.blocks}: no decision declared a series "
                       f"from block {x.first_block + 1}")
        elif (tuple(x.looks), x.target_pct, x.alpha, x.spending, x.pairing) != (
                tuple(declared.looks), declared.target_pct, declared.alpha, declared.spending, DEFAULT_PAIRING):
            out.append(f"verify look {x.look} from block {x.first_block + 1}: design {x.looks} target "
                       f"{x.target_pct}% alpha {x.alpha} {x.spending} pairing {x.pairing}, declared {declared.looks} "
                       f"target {declared.target_pct}% alpha {declared.alpha} {declared.spending} pairing "
                       f"{DEFAULT_PAIRING}")
    return out


def write_choice(run_dir: Path, tables: dict, out: Path) -> list[str]:
    """``out/choice.json`` (``results_schema.records.choice.ChoiceSummary``) of a choose run; returns its lines (none:
    not a choose run)."""
    from results_schema.records.choice import SUMMARY_FILE, ChoiceSummary, Recommended, VerifiedPoint
    from results_schema.codec.io import write_json

    decisions = read_decisions(run_dir)
    if not decisions:
        return []
    data = tables["data"]
    phase = verify_phase(decisions) or ""
    n = len(data.case_runs) + len(data.case_failures)
    res = decide(decisions, tables["summary"], data.runs, verify_phase=phase, processes_run=n,
                 margin_pct=tables["margin_pct"])
    r = res.recommended
    rec = None if r is None else Recommended(
        label=r["label"], group_size=r["group_size"], num_in_group=r["num_in_group"], prefetch_step=r["prefetch_step"],
        reason=r.get("reason") or next(x for x in res.lines if x.startswith("recommended:")))
    doc = ChoiceSummary(recommended=rec, verified=tuple(VerifiedPoint(
        label=v["label"], stage=v["stage"], predicted_retention=v["predicted_retention"],
        retention_low=v["retention_low"], retention_high=v["retention_high"],
        measured_retention=None if math.isnan(v["measured_retention"]) else v["measured_retention"],
        within_interval=v["within_interval"]) for v in res.verified), processes_run=n,
        processes_every_candidate=res.processes_every_candidate, trusted=res.trusted, lines=tuple(res.lines))
    write_json(out / SUMMARY_FILE, doc)
    return res.lines
