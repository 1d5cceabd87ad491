"""Record-level checks of a run (``analysis.validation.validate``): schema, logs, evidence files, evidence, layer bytes.

What is modelled: the checks ``schema``, ``logs``, ``evidence_files``, ``offloader_class``,
``evidence_agreement`` (except ``runtime_mismatch``), ``non_empty_evidence`` and ``layer_bytes``
listed in ``analysis.validation.validate``'s docstring, each adding its issues to a ``Collector``.

What is deliberately not modelled: counts against the plan and run-level checks (``analysis.validation.validate``,
``analysis.validation.checks``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from offload_tools.layer_bytes import (
    layer_bytes_from_config,
    layer_bytes_from_safetensors,
    load_config,
    safetensors_files,
)
from analysis.load import RunData
from analysis.validation.common import CaseRef, Collector, Where, rel_path
from offload.selection import select_offload_layers
from results_schema.rules.evidence_rule import config_num_layers, evidence_problems
from results_schema.codec.io import RecordError, parse_line, read_json
from results_schema.rules.log_rule import BENCH_RESULT, OFFLOAD_EVIDENCE, marked_lines
from results_schema.records.models import BenchRecord, CaseRun, RuntimeEvidence

TRACEBACK = "Traceback (most recent call last):"


def scan_log(text: str) -> tuple[list[str], list[str], bool]:
    """The ``BENCH_RESULT`` payloads, the ``OFFLOAD_EVIDENCE`` payloads (``results_schema.rules.log_rule``, the rule the
    runner applies live) and whether a Python traceback appears in ``text``."""
    return (marked_lines(text, BENCH_RESULT), marked_lines(text, OFFLOAD_EVIDENCE), TRACEBACK in text)


def check_schema(data: RunData, col: Collector) -> None:
    for e in data.line_errors:
        col.add("schema", "invalid_record", f"{rel_path(data, e.path)}:{e.line}: {e.field + ': ' if e.field else ''}"
                f"{e.message}", path=rel_path(data, e.path))


def check_logs_and_files(data: RunData, col: Collector) -> None:
    """Checks ``logs`` and ``evidence_files``: each case's log lines, evidence sidecar and record file."""
    for _p, _l, cr in data.case_runs:
        r = cr.record
        kw: CaseRef = {"phase": r.phase, "label": r.label, "repeat": r.repeat}
        where = f"{r.phase}/{r.label}-r{r.repeat}"
        log = data.run_dir / cr.log_path
        if not log.is_file():
            col.add("logs", "missing_log", f"{where}: log {cr.log_path} does not exist", path=cr.log_path, **kw)
        else:
            _check_log(log.read_text(errors="replace"), cr, col, where, {**kw, "path": cr.log_path})
        _check_sidecar(data, cr, col, where, kw)


def _check_log(text: str, cr: CaseRun, col: Collector, where: str, kw: Where) -> None:
    """One BENCH_RESULT line equal to the record, one OFFLOAD_EVIDENCE line equal to the evidence, no traceback."""
    bench, ev, tb = scan_log(text)
    _check_logged(col, bench, "BENCH_RESULT", BenchRecord, cr.record, where, cr.log_path, kw,
                  ("missing_bench_result", "duplicate_bench_result", "logs", "bench_result_mismatch",
                   "BENCH_RESULT line differs from the runs.jsonl record"))
    if tb:
        col.add("logs", "traceback_in_log", f"{where}: a Python traceback appears in {cr.log_path}", **kw)
    _check_logged(col, ev, "OFFLOAD_EVIDENCE", RuntimeEvidence, cr.evidence, where, cr.log_path, kw,
                  ("missing_evidence_line", "duplicate_evidence_line", "evidence_files", "evidence_mismatch",
                   "OFFLOAD_EVIDENCE log line differs from the run's evidence"))


def _check_logged(col: Collector, lines: list[str], marker: str, model: type[BenchRecord] | type[RuntimeEvidence],
                  want: BenchRecord | RuntimeEvidence, where: str, log_path: str, kw: Where,
                  codes: tuple[str, str, str, str, str]) -> None:
    """Exactly one ``marker`` line in the log, parsing as ``model`` and equal to ``want``.

    ``codes``: (missing code, duplicate code, check of a mismatch, mismatch code, mismatch message).
    """
    missing, duplicate, check, mismatch, differs = codes
    if len(lines) != 1:
        col.add("logs", duplicate if lines else missing,
                f"{where}: {len(lines)} {marker} lines in {log_path} (exactly one expected)" if lines
                else f"{where}: no {marker} line in {log_path}", **kw)
        return
    try:
        if parse_line(lines[0], model, path=log_path) != want:
            col.add(check, mismatch, f"{where}: {differs}", **kw)
    except RecordError as exc:
        col.add(check, mismatch, f"{where}: {marker} line invalid: {exc}", **kw)


def _check_sidecar(data: RunData, cr: CaseRun, col: Collector, where: str, kw: CaseRef) -> None:
    """The evidence sidecar equals the run's evidence; ``records/<phase>/<label>-r<repeat>.json`` its record."""
    r = cr.record
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
                col.add("evidence_files", "record_mismatch", f"{where}: {rel_path(data, rec)} differs from runs.jsonl",
                        path=rel_path(data, rec), **kw)
        except RecordError as exc:
            col.add("evidence_files", "record_mismatch", f"{where}: record file invalid: {exc}",
                    path=rel_path(data, rec), **kw)


def check_evidence(data: RunData, col: Collector, model_dir: Path | None,
                   overlay_classes: Mapping[tuple[str, str], str] | None = None) -> None:
    """Checks ``offloader_class``, ``evidence_agreement`` and ``non_empty_evidence`` of every case.

    The rule is ``results_schema.rules.evidence_rule.evidence_problems`` (the runner applies it live and stops
    at the first problem); here every problem is an issue. Repeats of a label must also agree on
    their evidence (class, layers, bytes). ``overlay_classes``: ``(phase, label) -> overlay_class``
    of the run's ``overlay`` cases (``plan.json``; without it an overlay case's class is not checked).
    """
    cfg_layers = config_num_layers(model_dir)
    by_label: dict[tuple[str, str], list[CaseRun]] = defaultdict(list)
    for _p, _l, cr in data.case_runs:
        r = cr.record
        by_label[(r.phase, r.label)].append(cr)
        kw: Where = {"phase": r.phase, "label": r.label, "repeat": r.repeat, "path": cr.evidence_path}
        for pr in evidence_problems(cr.evidence, implementation=r.implementation, setting=r.offload,
                                    overlay_class=(overlay_classes or {}).get((r.phase, r.label)),
                                    select=select_offload_layers, config_layers=cfg_layers):
            col.add(pr.check, pr.code, f"{r.phase}/{r.label}-r{r.repeat}: {pr.message}", **kw)
    for (phase, label), crs in by_label.items():
        sig = {(c.evidence.offloader_class, c.evidence.selected_layers, c.evidence.wrapped_layers,
                c.evidence.offloaded_bytes, c.evidence.static_buffer_bytes) for c in crs}
        if len(sig) > 1:
            col.add("evidence_agreement", "evidence_inconsistent",
                    f"{phase}/{label}: repeats disagree on evidence (class/layers/bytes): {sorted(map(str, sig))}",
                    phase=phase, label=label)


def check_layer_bytes(data: RunData, col: Collector, model_dir: Path | None) -> None:
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
        kw: Where = {"phase": r.phase, "label": r.label, "repeat": r.repeat, "path": cr.evidence_path}
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


