"""Claim: the frames ``load_run`` builds a column at a time from the decoded lines equal the frames built row
by row from the validated ``CaseRun`` models, and ``case_runs`` holds exactly the models the strict reader gives.

The oracle's column types come from the schema, not from the loader: a column whose ``CaseRun`` field (or a
parent of it) may be null and holds ints, floats or bools has pandas' nullable dtype (``NULLABLE_DTYPES``)."""

from __future__ import annotations

import random
import typing
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.aggregate import aggregate
from analysis.load import HOST_LOAD_FIELDS, PROCESS_STATE_FIELDS, ROUND_COLUMNS, RUN_COLUMNS, RUN_FIELDS, load_run, window_drift_pct
from analysis.validation.checks import token_digest_status, token_statuses
from results_schema.codec.io import append_jsonl, read_jsonl
from results_schema.records.models import CaseRun
from tests.support.synthetic import default_cases, host_load, make_case_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _row_by_row(items: list[tuple[Path, int, CaseRun]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frames as the loader built them before (one tuple per model)."""
    rows, rrows = [], []
    for _path, lineno, cr in items:
        r, e, kv, off, wl = cr.record, cr.evidence, cr.kv_cache, cr.record.offload, cr.record.workload
        rows.append((
            r.phase, r.label, r.implementation, r.repeat, r.runtime, r.model, off.offload_group_size,
            off.offload_num_in_group, off.offload_prefetch_step, off.offload_params, off.offload_backend,
            r.throughput_tok_s, r.output_tokens, r.elapsed_s, r.load_seconds, r.peak_rss_bytes,
            r.device_memory_bytes, r.token_digest, wl.temperature, wl.dtype, wl.measured_rounds, wl.num_prompts,
            wl.max_tokens, kv.kv_cache_tokens, kv.kv_cache_gib, kv.max_concurrency, cr.process_wall_s, cr.log_path,
            cr.evidence_path, e.offloader_class, e.implementation, e.offload_group_size, e.offload_num_in_group,
            e.offload_prefetch_step, e.offload_params, e.num_layers, e.selected_layers, e.wrapped_layers,
            e.wrapped_count, e.offloaded_bytes, e.static_buffer_bytes, e.released_bytes, e.device, wl.warmup_rounds,
            *(None if r.host_load is None else getattr(r.host_load, n) for n in HOST_LOAD_FIELDS), r.step_delay_ms,
            None if r.in_process is None else r.in_process.design,
            *(None if r.process_state is None else getattr(r.process_state, n) for n in PROCESS_STATE_FIELDS),
            window_drift_pct([rd.elapsed_s for rd in r.rounds], [rd.output_tokens for rd in r.rounds]), lineno,
        ))
        rrows += [(r.phase, r.label, r.implementation, r.repeat, rd.index, rd.elapsed_s, rd.output_tokens,
                   rd.throughput_tok_s) for rd in r.rounds]
    runs = pd.DataFrame.from_records(rows, columns=RUN_COLUMNS)
    rounds = pd.DataFrame.from_records(rrows, columns=ROUND_COLUMNS)
    types = {col: _schema_type(CaseRun, path) for col, path in RUN_FIELDS.items()}
    types["rounds_drift_pct"] = _nullable(typing.get_type_hints(window_drift_pct)["return"])
    for col, (nullable, tp) in types.items():
        if nullable and tp in NULLABLE_DTYPES:
            runs[col] = runs[col].astype(NULLABLE_DTYPES[tp])
    return runs, rounds


NULLABLE_DTYPES = {int: "Int64", float: "Float64", bool: "boolean"}
"""pandas' nullable dtype of a field of this Python type that may be null (pandas ``Int64`` / ``Float64`` / ``boolean``
extension types keep a null as ``<NA>`` beside the numbers; a plain column would turn ints into floats or objects)."""


def _bare(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _nullable(tp: Any) -> tuple[bool, Any]:
    """``(may be None, the type without None)`` of an annotation."""
    tp = _bare(tp)
    args = typing.get_args(tp)
    if type(None) in args:
        return True, _bare(next(a for a in args if a is not type(None)))
    return False, tp


def _schema_type(model: Any, path: str) -> tuple[bool, Any]:
    """``(nullable, type)`` of the dotted field ``path`` of ``model`` as the schema declares it: nullable when the
    field or any parent on the path admits None (a record without ``host_load`` has no ``host_load.contended``)."""
    nullable = False
    for part in path.split("."):
        maybe, model = _nullable(model.model_fields[part].annotation)
        nullable = nullable or maybe
    return nullable, model


def _mixed_run(tmp_path: Path) -> Path:
    """Two phases; lines with and without optional fields (device memory, KV figures, prefetch step)."""
    rng = random.Random(3)
    for phase in ("a", "b"):
        for k, case in enumerate(default_cases(implementations=("current",))):
            cr = make_case_run(phase, case, k, rng)
            if k % 2:
                rec = cr.record.model_copy(update={"device_memory_bytes": 123 + k, "host_load": host_load(0.1 * k)})
                cr = cr.model_copy(update={"record": rec, "kv_cache": cr.kv_cache.model_copy(
                    update={"kv_cache_tokens": None, "kv_cache_gib": 1.5, "max_concurrency": 2.0})})
            append_jsonl(tmp_path / f"{phase}-runs.jsonl", cr)
    return tmp_path


@pytest.mark.parametrize("run", ["synthetic_run", "real_tiny_run", "real_smoke_run", "mixed"])
def test_column_frames_equal_row_by_row_frames_and_models_equal_the_strict_readers(run, tmp_path):
    run_dir = _mixed_run(tmp_path) if run == "mixed" else FIXTURES / run
    data = load_run(run_dir)
    assert data.line_errors == [] and len(data.run_table) > 0
    want = [(p, ln, m) for p in sorted(run_dir.glob("*-runs.jsonl"))
            for ln, m in enumerate(read_jsonl(p, CaseRun), start=1)]
    assert data.case_runs == want
    assert [m.model_fields_set for _p, _l, m in data.case_runs] == [m.model_fields_set for _p, _l, m in want]
    runs, rounds = _row_by_row(want)
    pd.testing.assert_frame_equal(data.runs, runs)
    pd.testing.assert_frame_equal(data.rounds, rounds)
    assert token_statuses(data.record_views) == token_digest_status(data)


def test_aggregate_reads_no_model(tmp_path, monkeypatch):
    """Aggregation works from the frames and the decoded records; the models are built only when asked for."""
    data = load_run(_mixed_run(tmp_path))
    summary = aggregate(data)
    assert "case_runs" not in vars(data) and len(summary) > 0
    assert len(data.case_runs) == len(data.run_table)
