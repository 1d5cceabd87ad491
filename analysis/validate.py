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
    offloader_class     wrong_offloader_class (``EXPECTED_OFFLOADER_CLASS`` per implementation)
    evidence_agreement  evidence_mismatch (evidence vs requested G/N/prefetch/params/implementation),
                        selection_mismatch (selected layers vs ``offload.selection``),
                        num_layers_mismatch (evidence vs ``config.json``),
                        evidence_inconsistent (repeats of one label disagree),
                        runtime_mismatch (record runtime / evidence device vs the plan's runtime)
    non_empty_evidence  empty_offload_evidence (offload requested, nothing wrapped or 0 bytes),
                        unexpected_offload_evidence (baseline that offloaded something)
    layer_bytes         layer_bytes_mismatch (evidence bytes vs config.json arithmetic and vs
                        safetensors headers over the wrapped layers); layer_bytes_unverified
                        (warning) when the model directory cannot be found
    token_digest        token_digest_differs (greedy case whose digest differs from the phase
                        baseline; a warning for sampled workloads), baseline_digest_unstable
    kv_capacity         missing_kv_capacity (warning), identical_kv_capacity (warning)
    measurement_window  short_measurement_window (warning, one per label): a process measured for less
                        than ``MIN_WINDOW_S`` seconds or less than the minimum its workload asked
                        (``BenchRecord.window``; records without one were written before the rule)
    manifest            missing_manifest (warning), invalid_manifest (fails its model),
                        checksum_mismatch (a file listed in ``SHA256SUMS`` outside ``summary/`` changed or vanished)

``valid`` is true only when no check raised an error.

What is deliberately not modelled: statistics (``analysis.aggregate``) and whether a
difference is significant (``analysis.compare``).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from analysis.layer_bytes import (
    layer_bytes_from_config,
    layer_bytes_from_safetensors,
    load_config,
    safetensors_files,
)
from analysis.load import RunData, load_run
from offload.selection import select_offload_layers
from results_schema.io import RecordError, parse_line, read_json
from results_schema.plan import PLAN_FILE, RunPlan
from results_schema.models import (
    BenchRecord,
    CaseCount,
    CaseRun,
    CheckResult,
    RuntimeEvidence,
    ValidationIssue,
    ValidationReport,
)

EXPECTED_OFFLOADER_CLASS: dict[str, re.Pattern[str]] = {
    "baseline": re.compile(r"^vllm\.model_executor\.offloader\.base\.NoopOffloader$"),
    "current": re.compile(r"^offload\.[\w.]*CurrentPrefetchOffloader$"),
    "sync": re.compile(r"^offload\.[\w.]*SyncOffloader$"),
    "official": re.compile(
        r"^(vllm\.model_executor\.offloader\.prefetch\.PrefetchOffloader"
        r"|vllm\.model_executor\.offloader\.uva\.UVAOffloader"
        r"|vllm_ascend\.[\w.]*NPUPrefetchOffloader)$"
    ),
}
"""Offloader class each implementation must show in its evidence (fully qualified name)."""

BENCH_RE = re.compile(r"(?:^|[\s)\]])BENCH_RESULT (\{.*\})\s*$")
EVIDENCE_RE = re.compile(r"(?:^|[\s)\]])OFFLOAD_EVIDENCE (\{.*\})\s*$")
TRACEBACK = "Traceback (most recent call last):"

CHECKS = (
    "schema", "counts", "failures", "logs", "evidence_files", "offloader_class", "evidence_agreement",
    "non_empty_evidence", "layer_bytes", "token_digest", "kv_capacity", "measurement_window", "manifest",
    "cpu_kernels", "placement",
)

MIN_WINDOW_S = 3.0
"""Shortest measured window (seconds of measured rounds per process) analysis accepts without a
warning; equal to the runner's default minimum (``conf.schema.DEFAULT_MIN_MEASURED_S``). The seed
design measured 3 rounds x 64 tokens, about 0.4 s against ~20 s of engine load, and nothing flagged it."""


@dataclass
class _Collector:
    issues: list[tuple[str, ValidationIssue]] = field(default_factory=list)

    def add(self, check: str, code: str, message: str, *, severity: str = "error", phase=None, label=None,
            repeat=None, path=None) -> None:
        self.issues.append((check, ValidationIssue(code=code, severity=severity, message=message, phase=phase,
                                                   label=label, repeat=repeat,
                                                   path=None if path is None else str(path))))


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


def expand_saved_plan(run_dir: Path) -> RunPlan | None:
    """The run's ``plan.json`` (``results_schema.plan.RunPlan``, written by the runner).

    Returns None when the run directory has no ``plan.json`` (runs from before the runner
    wrote it, or not written by ``runners.matrix``): expected counts are then unknown.

    Raises:
        RecordError, StrictJSONError: ``plan.json`` exists but does not validate (a ``ValueError``).
    """
    path = run_dir / PLAN_FILE
    if not path.is_file():
        return None
    return read_json(path, RunPlan)


def expected_cases(run_dir: Path) -> dict[tuple[str, str], dict] | None:
    """Plan from ``plan.json``: ``{(phase, label): {runs, failures, expect_error, device, runtime}}``.

    Returns None when there is no ``plan.json`` or it does not validate (the caller warns).
    Accuracy and serving phases are excluded (they write their own files, not runs;
    ``analysis.serving`` checks the serving counts).
    """
    try:
        saved = expand_saved_plan(run_dir)
    except ValueError:
        return None
    if saved is None:
        return None
    out = {}
    for phase in saved.phases:
        if phase.kind in ("accuracy", "serving"):  # accuracy / serving files; serving: analysis.serving
            continue
        for c in phase.cases:
            out[(phase.name, c.label)] = {"runs": c.expected_runs, "failures": c.expected_failures,
                                          "expect_error": c.expect_error, "device": c.device, "runtime": c.runtime}
    return out


def _scan_log(text: str):
    bench, ev = [], []
    tb = False
    for line in text.splitlines():
        if "BENCH_RESULT" in line:
            m = BENCH_RE.search(line)
            if m:
                bench.append(m.group(1))
        if "OFFLOAD_EVIDENCE" in line:
            m = EVIDENCE_RE.search(line)
            if m:
                ev.append(m.group(1))
        if TRACEBACK in line:
            tb = True
    return bench, ev, tb


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
    col = _Collector()
    _check_schema(data, col)
    counts = _check_counts(data, col)
    _check_runtime(data, col)
    _check_logs_and_files(data, col)
    mdir = find_model_dir(data, model_dir)
    _check_evidence(data, col, mdir)
    _check_layer_bytes(data, col, mdir)
    _check_tokens(data, col)
    _check_cpu_kernels(data, col)
    _check_kv(data, col)
    _check_window(data, col)
    _check_manifest(run_dir, col)
    _check_placement(run_dir, col)
    checks = []
    for name in CHECKS:
        errs = sum(1 for c, i in col.issues if c == name and i.severity == "error")
        warns = sum(1 for c, i in col.issues if c == name and i.severity == "warning")
        checks.append(CheckResult(name=name, passed=errs == 0, errors=errs, warnings=warns))
    issues = tuple(i for _c, i in col.issues)
    return ValidationReport(run_dir=str(run_dir), valid=not any(i.severity == "error" for i in issues),
                            checks=tuple(checks), counts=tuple(counts), issues=issues)


def _rel(data: RunData, p) -> str:
    try:
        return str(Path(p).resolve().relative_to(data.run_dir.resolve()))
    except ValueError:
        return str(p)


def _check_schema(data: RunData, col: _Collector) -> None:
    for e in data.line_errors:
        col.add("schema", "invalid_record", f"{_rel(data, e.path)}:{e.line}: {e.field + ': ' if e.field else ''}"
                f"{e.message}", path=_rel(data, e.path))


def _check_counts(data: RunData, col: _Collector) -> list[CaseCount]:
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
        exp = plan.get((f.phase, f.label))
        where = f"{f.phase}/{f.label}-r{f.repeat}"
        if exp is None or exp["expect_error"] is None:
            col.add("failures", "case_failed", f"{where}: {f.failure_type}: {f.error_message}", phase=f.phase,
                    label=f.label, repeat=f.repeat, path=f.log_path)
        else:
            text = " ".join(filter(None, [f.error_type, f.error_message, *f.log_tail]))
            if not re.search(exp["expect_error"], text):
                col.add("failures", "unexpected_error",
                        f"{where}: expected an error matching {exp['expect_error']!r}, got {f.error_type}: "
                        f"{f.error_message}", phase=f.phase, label=f.label, repeat=f.repeat, path=f.log_path)
    return counts


def _check_logs_and_files(data: RunData, col: _Collector) -> None:
    for _p, _l, cr in data.case_runs:
        r = cr.record
        kw = dict(phase=r.phase, label=r.label, repeat=r.repeat)
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        log = data.run_dir / cr.log_path
        if not log.is_file():
            col.add("logs", "missing_log", f"{where}: log {cr.log_path} does not exist", path=cr.log_path, **kw)
        else:
            bench, ev, tb = _scan_log(log.read_text(errors="replace"))
            if not bench:
                col.add("logs", "missing_bench_result", f"{where}: no BENCH_RESULT line in {cr.log_path}",
                        path=cr.log_path, **kw)
            elif len(bench) > 1:
                col.add("logs", "duplicate_bench_result",
                        f"{where}: {len(bench)} BENCH_RESULT lines in {cr.log_path} (exactly one expected)",
                        path=cr.log_path, **kw)
            else:
                try:
                    logged = parse_line(bench[0], BenchRecord, path=cr.log_path)
                    if logged != r:
                        col.add("logs", "bench_result_mismatch",
                                f"{where}: BENCH_RESULT line differs from the runs.jsonl record", path=cr.log_path, **kw)
                except RecordError as exc:
                    col.add("logs", "bench_result_mismatch", f"{where}: BENCH_RESULT line invalid: {exc}",
                            path=cr.log_path, **kw)
            if tb:
                col.add("logs", "traceback_in_log", f"{where}: a Python traceback appears in {cr.log_path}",
                        path=cr.log_path, **kw)
            if not ev:
                col.add("logs", "missing_evidence_line", f"{where}: no OFFLOAD_EVIDENCE line in {cr.log_path}",
                        path=cr.log_path, **kw)
            elif len(ev) > 1:
                col.add("logs", "duplicate_evidence_line",
                        f"{where}: {len(ev)} OFFLOAD_EVIDENCE lines in {cr.log_path} (exactly one expected)",
                        path=cr.log_path, **kw)
            else:
                try:
                    logged_ev = parse_line(ev[0], RuntimeEvidence, path=cr.log_path)
                    if logged_ev != cr.evidence:
                        col.add("evidence_files", "evidence_mismatch",
                                f"{where}: OFFLOAD_EVIDENCE log line differs from the run's evidence",
                                path=cr.log_path, **kw)
                except RecordError as exc:
                    col.add("evidence_files", "evidence_mismatch", f"{where}: OFFLOAD_EVIDENCE line invalid: {exc}",
                            path=cr.log_path, **kw)
        side = data.run_dir / cr.evidence_path
        if not side.is_file():
            col.add("evidence_files", "missing_evidence", f"{where}: evidence sidecar {cr.evidence_path} missing",
                    path=cr.evidence_path, **kw)
        else:
            try:
                if read_json(side, RuntimeEvidence) != cr.evidence:
                    col.add("evidence_files", "evidence_mismatch",
                            f"{where}: evidence sidecar {cr.evidence_path} differs from the run's evidence",
                            path=cr.evidence_path, **kw)
            except RecordError as exc:
                col.add("evidence_files", "evidence_mismatch", f"{where}: evidence sidecar invalid: {exc}",
                        path=cr.evidence_path, **kw)
        rec = data.run_dir / "records" / r.phase / f"{r.label}-r{r.repeat}.json"
        if rec.is_file():
            try:
                if read_json(rec, BenchRecord) != r:
                    col.add("evidence_files", "record_mismatch", f"{where}: {_rel(data, rec)} differs from runs.jsonl",
                            path=_rel(data, rec), **kw)
            except RecordError as exc:
                col.add("evidence_files", "record_mismatch", f"{where}: record file invalid: {exc}",
                        path=_rel(data, rec), **kw)


def _check_evidence(data: RunData, col: _Collector, model_dir: Path | None) -> None:
    cfg_layers = None
    if model_dir is not None:
        cfg_layers = load_config(model_dir).get("num_hidden_layers")
    by_label: dict[tuple[str, str], list[CaseRun]] = defaultdict(list)
    for _p, _l, cr in data.case_runs:
        r, e, off = cr.record, cr.evidence, cr.record.offload
        by_label[(r.phase, r.label)].append(cr)
        kw = dict(phase=r.phase, label=r.label, repeat=r.repeat, path=cr.evidence_path)
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        pat = EXPECTED_OFFLOADER_CLASS.get(r.implementation)
        if pat is not None and not pat.match(e.offloader_class):
            col.add("offloader_class", "wrong_offloader_class",
                    f"{where}: implementation {r.implementation!r} ran offloader {e.offloader_class!r}, "
                    f"expected one matching {pat.pattern!r}", **kw)
        pairs = [("implementation", r.implementation, e.implementation),
                 ("offload_group_size", off.offload_group_size, e.offload_group_size),
                 ("offload_num_in_group", off.offload_num_in_group, e.offload_num_in_group),
                 ("offload_params", tuple(sorted(off.offload_params)), tuple(sorted(e.offload_params)))]
        if off.enabled and r.implementation != "baseline":
            pairs.append(("offload_prefetch_step", off.offload_prefetch_step, e.offload_prefetch_step))
        for name, want, got in pairs:
            if want != got:
                col.add("evidence_agreement", "evidence_mismatch",
                        f"{where}: {name} requested {want!r}, evidence shows {got!r}", **kw)
        if r.implementation != "baseline":
            expect = select_offload_layers(e.num_layers, off.offload_group_size, off.offload_num_in_group)
            if tuple(e.selected_layers) != expect:
                col.add("evidence_agreement", "selection_mismatch",
                        f"{where}: evidence selected layers {list(e.selected_layers)}, the selection rule gives "
                        f"{list(expect)} for {e.num_layers} layers, G={off.offload_group_size}, "
                        f"N={off.offload_num_in_group}", **kw)
            if cfg_layers is not None and e.num_layers != cfg_layers:
                col.add("evidence_agreement", "num_layers_mismatch",
                        f"{where}: evidence saw {e.num_layers} layers, config.json has {cfg_layers}", **kw)
        if off.enabled and r.implementation != "baseline":
            if e.wrapped_count == 0 or e.offloaded_bytes == 0:
                col.add("non_empty_evidence", "empty_offload_evidence",
                        f"{where}: offload requested (G={off.offload_group_size}, N={off.offload_num_in_group}) but "
                        f"evidence shows {e.wrapped_count} wrapped module(s) and {e.offloaded_bytes} bytes", **kw)
        elif e.wrapped_count or e.offloaded_bytes:
            col.add("non_empty_evidence", "unexpected_offload_evidence",
                    f"{where}: no offload requested but evidence shows {e.wrapped_count} wrapped module(s), "
                    f"{e.offloaded_bytes} bytes", **kw)
    for (phase, label), crs in by_label.items():
        sig = {(c.evidence.offloader_class, c.evidence.selected_layers, c.evidence.wrapped_layers,
                c.evidence.offloaded_bytes, c.evidence.static_buffer_bytes) for c in crs}
        if len(sig) > 1:
            col.add("evidence_agreement", "evidence_inconsistent",
                    f"{phase}/{label}: repeats disagree on evidence (class/layers/bytes): {sorted(map(str, sig))}",
                    phase=phase, label=label)


def _check_layer_bytes(data: RunData, col: _Collector, model_dir: Path | None) -> None:
    if not any(cr.evidence.wrapped_count for _p, _l, cr in data.case_runs):
        return
    if model_dir is None:
        col.add("layer_bytes", "layer_bytes_unverified",
                "no model directory (run_dir/model or the records' model path) with config.json: "
                "offloaded bytes not cross-checked", severity="warning")
        return
    config = load_config(model_dir)
    files = safetensors_files(model_dir)
    cache: dict = {}
    for _p, _l, cr in data.case_runs:
        e, r = cr.evidence, cr.record
        if not e.wrapped_layers:
            continue
        key = (r.workload.dtype, tuple(e.offload_params))
        if key not in cache:
            per_cfg = layer_bytes_from_config(config, r.workload.dtype, e.offload_params)
            per_st = layer_bytes_from_safetensors(files, r.workload.dtype, e.offload_params) if files else None
            cache[key] = (per_cfg, per_st)
        per_cfg, per_st = cache[key]
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        kw = dict(phase=r.phase, label=r.label, repeat=r.repeat, path=cr.evidence_path)
        want_cfg = per_cfg * len(e.wrapped_layers)
        if e.offloaded_bytes != want_cfg:
            col.add("layer_bytes", "layer_bytes_mismatch",
                    f"{where}: evidence offloaded_bytes {e.offloaded_bytes:,} != {len(e.wrapped_layers)} wrapped "
                    f"layer(s) x {per_cfg:,} bytes from config.json = {want_cfg:,}", **kw)
        if per_st is not None:
            want_st = sum(per_st.get(i, 0) for i in e.wrapped_layers)
            if e.offloaded_bytes != want_st:
                col.add("layer_bytes", "layer_bytes_mismatch",
                        f"{where}: evidence offloaded_bytes {e.offloaded_bytes:,} != {want_st:,} bytes of layers "
                        f"{list(e.wrapped_layers)} in the safetensors headers", **kw)


def point_exclusions(report: ValidationReport, data: RunData) -> dict[tuple[str, str], str]:
    """``{(phase, label): reason}`` for every label an error of ``report`` concerns.

    An error naming a label excludes that label; an error naming only a phase (e.g.
    ``baseline_digest_unstable``) excludes every label of the phase; an error naming neither
    (e.g. ``checksum_mismatch``, ``invalid_record``) excludes every label of the run. Such
    points never enter a Pareto front, a knee or a recommendation (``analysis.aggregate``,
    ``analysis.model.recommend``); the reason lists the error codes.
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


def token_digest_status(data: RunData) -> dict[tuple[str, str, int], str]:
    """``identical`` / ``differs`` / ``no_baseline`` per (phase, label, repeat) vs the phase baseline digest."""
    base: dict[str, Counter] = defaultdict(Counter)
    for _p, _l, cr in data.case_runs:
        if cr.record.implementation == "baseline":
            base[cr.record.phase][cr.record.token_digest] += 1
    out = {}
    for _p, _l, cr in data.case_runs:
        r = cr.record
        ref = base.get(r.phase)
        if not ref:
            out[(r.phase, r.label, r.repeat)] = "no_baseline"
        else:
            out[(r.phase, r.label, r.repeat)] = "identical" if r.token_digest == ref.most_common(1)[0][0] else "differs"
    return out


def _check_tokens(data: RunData, col: _Collector) -> None:
    base: dict[str, set] = defaultdict(set)
    for _p, _l, cr in data.case_runs:
        if cr.record.implementation == "baseline":
            base[cr.record.phase].add(cr.record.token_digest)
    for phase, digests in base.items():
        if len(digests) > 1:
            col.add("token_digest", "baseline_digest_unstable",
                    f"{phase}: baseline processes generated {len(digests)} different token digests", phase=phase)
    status = token_digest_status(data)
    for _p, _l, cr in data.case_runs:
        r = cr.record
        if status[(r.phase, r.label, r.repeat)] == "differs" and r.implementation != "baseline":
            greedy = r.workload.temperature == 0.0
            col.add("token_digest", "token_digest_differs",
                    f"{r.phase}/{r.label}-r{r.repeat}: generated tokens differ from the phase baseline"
                    f"{' (greedy decoding: must be identical)' if greedy else ' (sampled workload)'}",
                    severity="error" if greedy else "warning", phase=r.phase, label=r.label, repeat=r.repeat)


def _check_cpu_kernels(data: RunData, col: _Collector) -> None:
    """Within a phase every CPU case ran the same GEMM kernels (``cpu_kernels``), baseline included.

    A comparison whose cases differ in kernel (plain vs packed) measures a kernel change, not
    weight residency. Runs recorded before ``cpu_kernels`` existed (no case has it) are not checked.
    """
    by_phase: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for _p, _l, cr in data.case_runs:
        k = cr.cpu_kernels
        key = None if k is None else (k.path, tuple(sorted(k.kernels.items())))
        by_phase[cr.record.phase][key].append(f"{cr.record.label}-r{cr.record.repeat}")
    for phase, groups in by_phase.items():
        if len(groups) > 1:
            desc = "; ".join(f"{'none' if k is None else k[0] + ' ' + str(dict(k[1]))}: {', '.join(v[:6])}"
                             for k, v in groups.items())
            col.add("cpu_kernels", "cpu_kernels_differ",
                    f"{phase}: cases ran different CPU GEMM kernels, so their difference is not only weight "
                    f"residency ({desc})", phase=phase)


def _check_kv(data: RunData, col: _Collector) -> None:
    per_label: dict[tuple[str, str], list] = defaultdict(list)
    released: dict[tuple[str, str], int] = {}
    for _p, _l, cr in data.case_runs:
        r, kv = cr.record, cr.kv_cache
        if kv.kv_cache_tokens is None and kv.kv_cache_gib is None:
            col.add("kv_capacity", "missing_kv_capacity",
                    f"{r.phase}/{r.label}-r{r.repeat}: no KV cache capacity line in {cr.log_path}",
                    severity="warning", phase=r.phase, label=r.label, repeat=r.repeat, path=cr.log_path)
            continue
        per_label[(r.phase, r.label)].append((kv.kv_cache_tokens, kv.kv_cache_gib))
        released[(r.phase, r.label)] = cr.evidence.released_bytes
    by_phase: dict[str, dict] = defaultdict(lambda: defaultdict(set))
    for (phase, label), vals in per_label.items():
        toks = [t for t, _g in vals if t is not None]
        gibs = [g for _t, g in vals if g is not None]
        value = (statistics.median(toks) if toks else None, statistics.median(gibs) if gibs else None)
        by_phase[phase][value].add(label)
    for phase, groups in by_phase.items():
        for value, labels in groups.items():
            rel = {released[(phase, lb)] for lb in labels}
            if len(rel) > 1:
                col.add("kv_capacity", "identical_kv_capacity",
                        f"{phase}: labels {sorted(labels)} release different bytes ({sorted(rel)}) but report the same "
                        f"KV cache capacity {value} (tokens, GiB): the KV pool may not see the released memory",
                        severity="warning", phase=phase)


def _check_window(data: RunData, col: _Collector, min_window_s: float = MIN_WINDOW_S) -> None:
    short: dict[tuple[str, str], list[str]] = defaultdict(list)
    for _p, _l, cr in data.case_runs:
        r = cr.record
        asked = r.workload.min_measured_s
        floor = max(min_window_s, asked or 0.0)
        if r.elapsed_s < floor or (r.window is not None and not r.window.reached):
            short[(r.phase, r.label)].append(
                f"r{r.repeat} {r.elapsed_s:.2f} s / {len(r.rounds)} rounds"
                + ("" if asked is not None else " (no minimum recorded)"))
    for (phase, label), items in short.items():
        col.add("measurement_window", "short_measurement_window",
                f"{phase}/{label}: measured window {', '.join(items)} is shorter than {min_window_s:g} s (or the "
                f"workload's min_measured_s): its throughput is inconclusive noise-wise; raise "
                f"workload.min_measured_s", severity="warning", phase=phase, label=label)


def _check_manifest(run_dir: Path, col: _Collector) -> None:
    path = run_dir / "environment-manifest.json"
    if not path.is_file():
        col.add("manifest", "missing_manifest", f"{run_dir}: no environment-manifest.json", severity="warning")
    else:
        from results_schema.dispatch import kind_for

        kind = kind_for(path)
        try:
            read_json(path, kind.load_model())
        except LookupError as exc:
            col.add("manifest", "missing_manifest", f"environment-manifest.json not checked: {exc}",
                    severity="warning")
        except RecordError as exc:
            col.add("manifest", "invalid_manifest", f"environment-manifest.json: {exc}", path="environment-manifest.json")
    sums = run_dir / "SHA256SUMS"
    if sums.is_file():
        import hashlib

        for line in sums.read_text().splitlines():
            if not line.strip():
                continue
            digest, _, name = line.partition("  ")
            name = name.strip().removeprefix("*")
            if name.startswith("summary/") or not name:
                continue
            target = run_dir / name
            if not target.is_file():
                col.add("manifest", "checksum_mismatch", f"SHA256SUMS lists {name}, which does not exist", path=name)
                continue
            h = hashlib.sha256(target.read_bytes()).hexdigest()
            if h != digest.strip():
                col.add("manifest", "checksum_mismatch", f"{name}: SHA-256 differs from SHA256SUMS", path=name)


def _check_runtime(data: RunData, col: _Collector) -> None:
    plan = expected_cases(data.run_dir)
    if plan is None:
        return
    for _p, _l, cr in data.case_runs:
        r = cr.record
        exp = plan.get((r.phase, r.label))
        if exp is None:
            continue
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        kw = dict(phase=r.phase, label=r.label, repeat=r.repeat)
        if exp.get("runtime") and r.runtime != exp["runtime"]:
            col.add("evidence_agreement", "runtime_mismatch",
                    f"{where}: record runtime {r.runtime!r}, the plan says {exp['runtime']!r}", **kw)
        if exp.get("device") and cr.evidence.device != exp["device"]:
            col.add("evidence_agreement", "runtime_mismatch",
                    f"{where}: evidence device {cr.evidence.device!r}, the plan's runtime runs on {exp['device']!r}",
                    **kw)


def _check_placement(run_dir: Path, col: _Collector) -> None:
    """Two cases of one phase on one node at the same time (``analysis.placement``)."""
    from analysis.placement import check_placements, load_placements

    placements, errors = load_placements(run_dir)
    for e in errors:
        col.add("placement", "invalid_record", e)
    for f in check_placements(placements):
        col.add("placement", f.code, f.message, severity=f.severity, phase=f.phase, label=f.label, repeat=f.repeat)
