"""Validation of a run directory: every check that decides whether its numbers can be trusted.

What is modelled (check name -> issue codes; severity error unless noted):
    schema              invalid_record (a runs/failures line that fails strict parsing or the model)
    counts              count_mismatch, unexpected_case, duplicate_case; no_plan (warning) when
                        ``plan.json`` (written by the runner) is missing or does not validate
    failures            case_failed (an unexpected failure record), unexpected_error (an expected
                        failure whose error does not match ``expect_error``)
    logs                missing_log, missing_bench_result, duplicate_bench_result,
                        bench_result_mismatch, traceback_in_log, missing_evidence_line,
                        duplicate_evidence_line
    evidence_files      missing_evidence, evidence_mismatch (sidecar / log line / CaseRun disagree),
                        record_mismatch (``records/`` file disagrees)
    offloader_class     wrong_offloader_class (``results_schema.rules.evidence_rule.EXPECTED_OFFLOADER_CLASS`` per
                        implementation; ``overlay``: the
                        ``overlay_class`` its ``plan.json`` case names)
    evidence_agreement  evidence_mismatch (evidence vs requested G/N/prefetch/params/implementation),
                        selection_mismatch (selected layers vs ``offload.selection``),
                        num_layers_mismatch (evidence vs ``config.json``),
                        evidence_inconsistent (repeats of one label disagree),
                        runtime_mismatch (record runtime / evidence device vs the plan's runtime)
    non_empty_evidence  empty_offload_evidence (offload requested, nothing wrapped or 0 bytes),
                        no_post_init (offload requested, the offloader never ran ``post_init``),
                        unexpected_offload_evidence (baseline that offloaded something)
                        (offloader_class, evidence_agreement and non_empty_evidence are one rule with the
                        runner's live check: ``results_schema.rules.evidence_rule``)
    layer_bytes         layer_bytes_mismatch (evidence bytes vs config.json arithmetic and vs
                        safetensors headers over the wrapped layers); layer_bytes_unverified
                        (warning) when the model directory cannot be found
    token_digest        token_digest_differs (greedy case whose digest differs from the phase
                        baseline; a warning for sampled workloads; where the baseline processes
                        disagree, a case whose rounds leave every baseline process on more rounds
                        than the baselines disagree on), baseline_not_deterministic (warning:
                        baseline processes generated different tokens; ``results_schema.rules.token_rule``)
    kv_capacity         missing_kv_capacity (warning), identical_kv_capacity (warning)
    device_memory       missing_device_memory (warning): an accelerator case without device memory before /
                        peak / after load (``BenchRecord.device_memory_error`` names why)
    measurement_window  short_measurement_window (warning, one per label): a process measured for less
                        than ``DEFAULT_MIN_MEASURED_S`` seconds (``results_schema.records.models``) or less than the
                        minimum its workload asked
                        (``BenchRecord.window``; records without one were written before the rule)
    host_load           contended_case (warning, one per process): foreign CPU work on the host or steal above
                        its limit while the process measured (``BenchRecord.host_load``); verdicts resting on
                        it are withheld (``analysis.comparison.soundness``), the run's last line counts them
    stability           unstable_case (warning, one per process): no warmup round, or a measured window that
                        drifted more than the phase's noise floor; the point is kept off the front
    manifest            missing_manifest (warning), invalid_manifest (fails its model, e.g. no saved config),
                        config_hash_mismatch (the saved config does not hash to its ``config_sha256``:
                        ``results_schema.rules.config_rule``), checksum_mismatch (a file listed in ``SHA256SUMS``
                        outside ``summary/`` changed or vanished)
    sequential          sequential_record (a look line that fails its model), sequential_recompute (a look its
                        processes do not give, or a sequence that does not follow its design), sequential_design (a
                        look whose design, baseline or first labels are not what the run declared in its saved
                        config and plan, or declarations that cannot be read: ``analysis.comparison.sequential_check``)

``valid`` is true only when no check raised an error.

What is deliberately not modelled: statistics (``analysis.aggregate``) and whether a
difference is significant (``analysis.comparison.compare``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from analysis.load import RunData, load_run
from analysis.validation.checks import (
    check_cpu_kernels,
    check_device_memory,
    check_host_load,
    check_kv,
    check_manifest,
    check_placement,
    check_tokens,
    check_window,
)
from analysis.validation.common import CaseRef, Collector
from analysis.validation.records import (
    check_evidence,
    check_layer_bytes,
    check_logs_and_files,
    check_schema,
)
from results_schema.codec.io import read_json
from results_schema.records.plan import PLAN_FILE, RunPlan
from results_schema.records.choice import read_decisions
from results_schema.records.manifest import FILE_NAME as MANIFEST_FILE, EnvironmentManifest
from results_schema.records.sequential import FILE_NAME as LOOKS_FILE, LookDecision, read_looks
from results_schema.reading.saved_plan import expand_saved_plan
from analysis.comparison.sequential_check import recheck_declarations, recheck_looks, recheck_unlooked
from results_schema.records.validation import CaseCount, CheckResult, ValidationReport

CHECKS = (
    "schema", "counts", "failures", "logs", "evidence_files", "offloader_class", "evidence_agreement",
    "non_empty_evidence", "layer_bytes", "token_digest", "kv_capacity", "device_memory", "measurement_window",
    "host_load", "stability", "manifest", "cpu_kernels", "placement", "choice", "sequential",
)

def find_model_dir(data: RunData, override: Path | str | None = None) -> Path | None:
    """The model directory for byte cross-checks: ``override``, ``<run_dir>/model`` or the records' ``model`` path."""
    if override is not None:
        if not (Path(override) / "config.json").is_file():
            raise FileNotFoundError(f"model directory {override} has no config.json")
        return Path(override)
    cand = [data.run_dir / "model"]
    for _p, _l, cr in data.case_runs[:1]:
        m = Path(cr.record.model)
        cand.append(m if m.is_absolute() else data.run_dir / m)
    for c in cand:
        if (c / "config.json").is_file():
            return c
    return None


def expected_cases(run_dir: Path) -> dict[tuple[str, str], dict] | None:
    """Plan from ``plan.json``: ``{(phase, label): {runs, failures, expect_error, device, runtime, overlay_class}}``.

    Returns None when there is no ``plan.json`` or it does not validate (the caller warns).
    Accuracy and serving phases are excluded (they write their own files, not runs;
    ``analysis.serving.summary`` checks the serving counts).
    """
    try:
        saved = expand_saved_plan(run_dir)
    except ValueError:
        return None
    if saved is None:
        return None
    out = {}
    for phase in saved.phases:
        if phase.kind in ("accuracy", "serving"):  # accuracy / serving files; serving: analysis.serving.summary
            continue
        for c in phase.cases:
            out[(phase.name, c.label)] = {"runs": c.expected_runs, "failures": c.expected_failures,
                                          "expect_error": c.expect_error, "device": c.device, "runtime": c.runtime,
                                          "overlay_class": c.overlay_class}
    return out


def validate_run(run_dir: Path | str, data: RunData | None = None, *,
                 model_dir: Path | str | None = None) -> ValidationReport:
    """Run every check over a run directory.

    Args:
        run_dir: the run directory.
        data: an already loaded ``RunData`` (loaded here when None).
        model_dir: model directory (``config.json`` + safetensors) for the layer-byte checks;
            default: ``<run_dir>/model`` or the records' ``model`` path when it exists.

    Returns:
        The ``ValidationReport`` (``valid`` iff no error).
    """
    run_dir = Path(run_dir)
    data = data if data is not None else load_run(run_dir)
    col = Collector()
    check_schema(data, col)
    counts = _check_counts(data, col)
    _check_runtime(data, col)
    check_logs_and_files(data, col)
    mdir = find_model_dir(data, model_dir)
    plan = expected_cases(run_dir) or {}
    check_evidence(data, col, mdir, {k: v["overlay_class"] for k, v in plan.items() if v["overlay_class"]})
    check_layer_bytes(data, col, mdir)
    check_tokens(data, col)
    check_cpu_kernels(data, col)
    check_kv(data, col)
    check_device_memory(data, col)
    check_window(data, col)
    check_host_load(data, col)
    check_manifest(run_dir, col)
    check_placement(run_dir, col)
    check_choice(run_dir, col)
    check_sequential(run_dir, data, col)
    checks = []
    for name in CHECKS:
        errs = sum(1 for c, i in col.issues if c == name and i.severity == "error")
        warns = sum(1 for c, i in col.issues if c == name and i.severity == "warning")
        checks.append(CheckResult(name=name, passed=errs == 0, errors=errs, warnings=warns))
    issues = tuple(i for _c, i in col.issues)
    return ValidationReport(run_dir=str(run_dir), valid=not any(i.severity == "error" for i in issues),
                            checks=tuple(checks), counts=tuple(counts), issues=issues)


def check_sequential(run_dir: Path, data: RunData, col: Collector) -> None:
    """A sequential phase: every recorded look recomputed from the recorded processes
    (``analysis.comparison.sequential_check.recheck_looks``, per look series, under each line's recorded pairing); a
    line that differs, or a sequence that does not follow its design (a label looked at after it stopped, blocks that
    do not match the looks), is an error (``sequential_recompute``). So is a line whose design, baseline or first
    look's labels are not what the run declared for its phase (``sequential_design``:
    ``analysis.comparison.sequential_check.recheck_declarations`` against the saved config in
    ``environment-manifest.json``, ``plan.json`` and a choose run's decisions), a run with look lines whose
    declarations cannot be read, and a phase declared sequential whose processes have no look line
    (``recheck_unlooked``). A sequential serving phase's looks (``serving-looks.jsonl``) are checked the same way by
    the serving validation (``analysis.serving.summary.validate_serving``: ``analysis.serving`` imports this package
    through ``analysis.report``, so this module leaves its records to it)."""
    try:
        lines = read_looks(run_dir)
    except ValueError as exc:
        col.add("sequential", "sequential_record", f"{LOOKS_FILE}: {exc}".splitlines()[0])
        return
    values: dict[tuple[str, str], dict[int, float]] = {}
    for _p, _l, cr in data.case_runs:
        values.setdefault((cr.record.phase, cr.record.label), {})[cr.record.repeat] = cr.record.throughput_tok_s
    for phase in dict.fromkeys(line.phase for line in lines):
        for diff in recheck_looks([line for line in lines if line.phase == phase], values):
            col.add("sequential", "sequential_recompute", f"{phase}: the recorded look is not what its processes "
                                                          f"give: {diff}")
    try:
        config, unread = read_json(run_dir / MANIFEST_FILE, EnvironmentManifest).config, ""
    except (OSError, ValueError) as exc:
        config, unread = None, str(exc)
    if lines:
        _check_declared(run_dir, lines, config, unread, col)
    if config is not None:  # no readable saved config: check manifest names it
        processes: Counter[str] = Counter()
        for (phase, _label), by_repeat in values.items():
            processes[phase] += len(by_repeat)
        for phase, diff in recheck_unlooked(lines, config, processes):
            col.add("sequential", "sequential_design", f"{phase}: {diff}", phase=phase)


def _check_declared(run_dir: Path, lines: list[LookDecision], config: dict[str, Any] | None, unread: str,
                    col: Collector) -> None:
    """``check_sequential``'s comparison of the look lines with what the run declared (``config``: the saved config;
    None when it could not be read, ``unread`` saying why)."""
    try:
        if config is None:
            raise ValueError(unread)
        plan = read_json(run_dir / PLAN_FILE, RunPlan)
        decisions = read_decisions(run_dir)
    except (OSError, ValueError) as exc:
        col.add("sequential", "sequential_design", f"the recorded look designs cannot be held to what the run "
                                                   f"declared: {exc}".splitlines()[0])
        return
    for phase, diff in recheck_declarations(lines, config, plan, decisions):
        col.add("sequential", "sequential_design",
                f"{phase}: the recorded design is not what the run declared: {diff}", phase=phase)


def check_choice(run_dir: Path, col: Collector) -> None:
    """A choose run: every decision recomputed from its recorded inputs (``analysis.model.choice.recompute``), a
    sequential verify phase's looks held to the designs the decisions declared (``recheck_verify_series``); a choice
    that stopped before predicting (its probe stayed contended: stage ``stopped``) is an error naming why."""
    from analysis.model.choice import read_decisions, recheck_verify_series, recompute

    try:
        decisions = read_decisions(run_dir)
    except ValueError as exc:
        col.add("choice", "choice_record", f"choose-decisions.jsonl: {exc}".splitlines()[0])
        return
    try:
        looks = read_looks(run_dir)
    except ValueError:
        looks = []  # check_sequential names the file
    for diff in recheck_verify_series(decisions, looks):
        col.add("choice", "choice_verify_design", f"the verify looks did not run as declared: {diff}")
    for d in decisions:
        for diff in recompute(d):
            col.add("choice", "choice_recompute", f"the recorded choice is not what its inputs give: {diff}")
        if d.stage == "stopped":  # the run does not answer its question: nothing was predicted or recommended
            col.add("choice", "choice_stopped", d.note)


def _check_counts(data: RunData, col: Collector) -> list[CaseCount]:
    runs = Counter((cr.record.phase, cr.record.label) for _p, _l, cr in data.case_runs)
    fails = Counter((f.phase, f.label) for _p, _l, f in data.case_failures)
    keys = Counter((cr.record.phase, cr.record.label, cr.record.repeat) for _p, _l, cr in data.case_runs)
    for (phase, label, rep), n in keys.items():
        if n > 1:
            col.add("counts", "duplicate_case", f"{phase}/{label}-r{rep}: {n} run records for one process",
                    phase=phase, label=label, repeat=rep)
    plan = expected_cases(data.run_dir)
    counts: list[CaseCount] = []
    if plan is None:
        col.add("counts", "no_plan", f"{data.run_dir}: no valid plan.json; expected counts unknown",
                severity="warning")
        for key in sorted(set(runs) | set(fails)):
            counts.append(CaseCount(phase=key[0], label=key[1], expected=None, runs=runs[key], failures=fails[key]))
        return counts
    for key, exp in plan.items():
        phase, label = key
        counts.append(CaseCount(phase=phase, label=label, expected=exp["runs"] + exp["failures"], runs=runs[key],
                                failures=fails[key]))
        if runs[key] != exp["runs"] or fails[key] != exp["failures"]:
            col.add("counts", "count_mismatch",
                    f"{phase}/{label}: expected {exp['runs']} run(s) and {exp['failures']} expected failure(s), "
                    f"got {runs[key]} run(s) and {fails[key]} failure(s)", phase=phase, label=label)
    for key in sorted((set(runs) | set(fails)) - set(plan)):
        col.add("counts", "unexpected_case", f"{key[0]}/{key[1]}: not in the run's plan.json",
                phase=key[0], label=key[1])
        counts.append(CaseCount(phase=key[0], label=key[1], expected=0, runs=runs[key], failures=fails[key]))
    for _p, _l, f in data.case_failures:
        planned = plan.get((f.phase, f.label))
        where = f"{f.phase}/{f.label}-r{f.repeat}"
        if planned is None or planned["expect_error"] is None:
            col.add("failures", "case_failed", f"{where}: {f.failure_type}: {f.error_message}", phase=f.phase,
                    label=f.label, repeat=f.repeat, path=f.log_path)
        else:
            text = " ".join(filter(None, [f.error_type, f.error_message, *f.log_tail]))
            if not re.search(planned["expect_error"], text):
                col.add("failures", "unexpected_error",
                        f"{where}: expected an error matching {planned['expect_error']!r}, got {f.error_type}: "
                        f"{f.error_message}", phase=f.phase, label=f.label, repeat=f.repeat, path=f.log_path)
    return counts


def point_exclusions(report: ValidationReport, data: RunData) -> dict[tuple[str, str], str]:
    """``{(phase, label): reason}`` for every label an error of ``report`` concerns.

    An error naming a label excludes that label; an error naming only a phase (e.g.
    a phase-level code) excludes every label of the phase; an error naming neither
    (e.g. ``checksum_mismatch``, ``invalid_record``) excludes every label of the run. Such
    points never enter a Pareto front, a knee or a recommendation (``analysis.aggregate``,
    ``analysis.model.fit.recommend``); the reason lists the error codes.
    """
    labels = sorted({(cr.record.phase, cr.record.label) for _p, _l, cr in data.case_runs})
    codes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for i in report.errors:
        if i.phase is not None and i.label is not None:
            targets = [(i.phase, i.label)]
            tag = i.code
        elif i.phase is not None:
            targets = [k for k in labels if k[0] == i.phase]
            tag = f"{i.code} (phase {i.phase})"
        else:
            targets, tag = labels, f"{i.code} (run)"
        for k in targets:
            if tag not in codes[k]:
                codes[k].append(tag)
    return {k: "validation error: " + ", ".join(v) for k, v in codes.items()}


def _check_runtime(data: RunData, col: Collector) -> None:
    plan = expected_cases(data.run_dir)
    if plan is None:
        return
    for _p, _l, cr in data.case_runs:
        r = cr.record
        exp = plan.get((r.phase, r.label))
        if exp is None:
            continue
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        kw: CaseRef = {"phase": r.phase, "label": r.label, "repeat": r.repeat}
        if exp.get("runtime") and r.runtime != exp["runtime"]:
            col.add("evidence_agreement", "runtime_mismatch",
                    f"{where}: record runtime {r.runtime!r}, the plan says {exp['runtime']!r}", **kw)
        if exp.get("device") and cr.evidence.device != exp["device"]:
            col.add("evidence_agreement", "runtime_mismatch",
                    f"{where}: evidence device {cr.evidence.device!r}, the plan's runtime runs on {exp['device']!r}",
                    **kw)


