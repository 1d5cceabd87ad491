"""DuckDB schema of the run catalog: explicit tables (natural keys) and views.

The record tables' columns are derived from the ``results_schema`` models (``analysis.catalog.columns``:
one column per field, so a new field is a new column); the run-level tables are declared here.
Every column is declared (no type inference from a sample: DuckDB's ``read_json`` can collapse a
sparse key or a field mixing ``"inf"`` and numbers into JSON). Undefined metrics are NULL, never NaN
(in DuckDB NaN sorts above +inf, so ``MAX`` / ``ORDER BY ... DESC`` would pick it). Every table
carries ``run_id``; the primary keys are natural keys (run, phase, label, repeat, round / task /
rate), so re-loading a run replaces its rows instead of adding new ones. ``docs/catalog.md`` is
the reader's version of this file (``test_catalog`` checks both name the same tables).
"""

from __future__ import annotations

from analysis.catalog.columns import table_columns

SCHEMA_VERSION = 8
"""Bumped when a table's columns change; ``analysis.catalog.store.connect`` rebuilds an older catalog file."""

TABLES: dict[str, str] = {
    "catalog_meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL""",
    "runs": """
        run_id VARCHAR PRIMARY KEY,          -- manifest run_id, else the directory name
        run_dir VARCHAR NOT NULL,            -- absolute path it was loaded from (last load wins)
        fingerprint VARCHAR NOT NULL,        -- SHA-256 over the loaded files; unchanged -> not reloaded
        loaded_utc TIMESTAMP NOT NULL,
        has_manifest BOOLEAN NOT NULL,
        experiment VARCHAR, created_utc VARCHAR, hostname VARCHAR, platform VARCHAR, machine VARCHAR,
        device_kind VARCHAR, device_name VARCHAR, device_count INTEGER,
        python_version VARCHAR, vllm_version VARCHAR, torch_version VARCHAR,
        git_revision VARCHAR, git_dirty BOOLEAN, config_sha256 VARCHAR,
        model_name VARCHAR, model_path VARCHAR, model_num_layers INTEGER, model_sha256sums_sha256 VARCHAR,
        valid BOOLEAN NOT NULL,              -- analysis.validation.validate: no error-severity issue
        errors INTEGER NOT NULL, warnings INTEGER NOT NULL""",
    "plan_counts": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL,
        expected INTEGER,                    -- processes the plan asked for (NULL: no plan found)
        runs INTEGER NOT NULL, failures INTEGER NOT NULL,
        PRIMARY KEY (run_id, phase, label)""",
    "validation_checks": """
        run_id VARCHAR NOT NULL, name VARCHAR NOT NULL, passed BOOLEAN NOT NULL,
        errors INTEGER NOT NULL, warnings INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)""",
    "validation_issues": """
        run_id VARCHAR NOT NULL, seq INTEGER NOT NULL, code VARCHAR NOT NULL, severity VARCHAR NOT NULL,
        message VARCHAR NOT NULL, phase VARCHAR, label VARCHAR, repeat INTEGER, path VARCHAR,
        PRIMARY KEY (run_id, seq)""",
    "load_notes": """
        run_id VARCHAR NOT NULL, seq INTEGER NOT NULL, note VARCHAR NOT NULL,
        PRIMARY KEY (run_id, seq)""",
}


def _derived(table: str, head: str, key: str) -> str:
    """DDL of a table whose columns come from a ``results_schema`` model (``analysis.catalog.columns``)."""
    cols = ",\n        ".join(f'"{c.name}" {c.sql}' for c in table_columns(table))
    return f"\n        {head},\n        {cols},\n        PRIMARY KEY ({key})"


_RATE = ("request_rate VARCHAR NOT NULL  -- rate_rps as text ('inf' = every request at t = 0), part of the "
         "key\n       ")
_CASE_KEY = "run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL"
TABLES.update({
    "cases": _derived("cases", "run_id VARCHAR NOT NULL", "run_id, phase, label, repeat"),
    "rounds": _derived("rounds", _CASE_KEY, "run_id, phase, label, repeat, round"),
    "evidence": _derived("evidence", _CASE_KEY, "run_id, phase, label, repeat"),
    "failures": _derived("failures", "run_id VARCHAR NOT NULL, line INTEGER NOT NULL  -- line in "
                         "<phase>-failures.jsonl (a resumed case may fail twice)\n       ",
                         "run_id, phase, label, repeat, line"),
    "serving_results": _derived(
        "serving_results", "run_id VARCHAR NOT NULL, request_rate VARCHAR NOT NULL  -- configured rate as "
        "written ('inf' = every request at t = 0), part of the key\n       ", "run_id, phase, label, repeat, request_rate"),
    "accuracy_cases": _derived("accuracy_cases", "run_id VARCHAR NOT NULL", "run_id, phase, label, repeat, task"),
    "accuracy_verdicts": _derived(
        "accuracy_verdicts", "run_id VARCHAR NOT NULL, report VARCHAR NOT NULL,  -- accuracy-verification.json, "
        "relative to the run\n        cases INTEGER NOT NULL, failed_checks INTEGER NOT NULL,  -- counts of its rows\n"
        "        baselines_agree BOOLEAN  -- every task's baseline runs agree (NULL: no baseline comparison)\n       ",
        "run_id, report"),
    "choices": _derived(
        "choices", "run_id VARCHAR NOT NULL, line INTEGER NOT NULL,  -- line of choose-decisions.jsonl\n"
        "        chosen_labels VARCHAR[] NOT NULL,  -- chosen[].label, in order\n"
        "        predicted_settings INTEGER NOT NULL  -- its rows in choice_predictions\n       ", "run_id, line"),
    "choice_predictions": _derived(
        "choice_predictions", "run_id VARCHAR NOT NULL, line INTEGER NOT NULL,  -- the decision's line\n"
        "        stage VARCHAR NOT NULL, form VARCHAR,  -- the decision's\n"
        "        meets_need BOOLEAN NOT NULL,  -- released_bytes >= the decision's need_bytes\n"
        "        chosen BOOLEAN NOT NULL  -- decided for measurement by this decision\n       ",
        "run_id, line, group_size, num_in_group, prefetch_step"),
    "serving_baseline_verdicts": _derived(
        "serving_baseline_verdicts", f"run_id VARCHAR NOT NULL, {_RATE}", "run_id, phase, label, request_rate, metric"),
    "serving_outputs": _derived("serving_outputs", f"run_id VARCHAR NOT NULL, {_RATE}",
                                "run_id, phase, label, repeat, request_rate"),
    "serving_percentiles": _derived("serving_percentiles", f"run_id VARCHAR NOT NULL, {_RATE}",
                                    "run_id, phase, label, request_rate, metric, percentile"),
})
"""Table name -> column definitions (DuckDB DDL). ``cases``, ``rounds``, ``evidence``, ``failures``,
``serving_results``, ``accuracy_cases``, ``accuracy_verdicts``, ``choices``, ``choice_predictions``,
``serving_baseline_verdicts``, ``serving_outputs`` and ``serving_percentiles`` are derived from the models (one
column per field); the rest are run-level tables."""

RUN_TABLES = [t for t in TABLES if t != "catalog_meta"]
"""Tables whose rows belong to one run (deleted and re-inserted together when a run is re-loaded)."""

VIEWS: dict[str, str] = {
    "label_summary": """
        WITH per_label AS (
            SELECT c.run_id, c.phase, c.label, any_value(c.implementation) AS implementation,
                   any_value(c.group_size) AS group_size, any_value(c.num_in_group) AS num_in_group,
                   any_value(c.prefetch_step) AS prefetch_step, any_value(c.offload_params) AS offload_params,
                   count(*) AS processes,
                   median(c.throughput_tok_s) FILTER (WHERE isfinite(c.throughput_tok_s)) AS throughput_median_tok_s,
                   min(e.released_bytes) AS released_bytes, max(e.released_bytes) AS released_bytes_max,
                   any_value(e.selected_layers) AS selected_layers,
                   median(c.kv_cache_tokens) AS kv_cache_tokens_median,
                   count(*) FILTER (WHERE c.host_load_contended) AS contended_processes
            FROM cases c LEFT JOIN evidence e USING (run_id, phase, label, repeat)
            GROUP BY c.run_id, c.phase, c.label),
        base AS (
            SELECT run_id, phase, throughput_median_tok_s AS baseline_tok_s,
                   kv_cache_tokens_median AS baseline_kv_tokens
            FROM per_label WHERE implementation = 'baseline')
        SELECT p.*, b.baseline_tok_s, p.throughput_median_tok_s / b.baseline_tok_s AS retention,
               p.kv_cache_tokens_median - b.baseline_kv_tokens AS kv_gain_tokens
        FROM per_label p LEFT JOIN base b USING (run_id, phase)""",
    "host_memory": """
        WITH per_label AS (
            SELECT c.run_id, c.phase, c.label, any_value(c.implementation) AS implementation, count(*) AS processes,
                   bool_and(c.rss_after_load_bytes IS NOT NULL) AS has_after,
                   median(c.rss_after_load_bytes) AS rss_after_median, median(c.peak_rss_bytes) AS peak_rss_median,
                   median(e.offloaded_bytes) AS offloaded_bytes, median(e.released_bytes) AS released_bytes,
                   any_value(e.device) AS device
            FROM cases c JOIN evidence e USING (run_id, phase, label, repeat)
            GROUP BY c.run_id, c.phase, c.label),
        paired AS (
            SELECT p.*, b.has_after AND p.has_after AS use_after,
                   b.rss_after_median AS base_after, b.peak_rss_median AS base_peak
            FROM per_label p LEFT JOIN per_label b
              ON b.run_id = p.run_id AND b.phase = p.phase AND b.implementation = 'baseline'),
        delta AS (
            SELECT *, CASE WHEN use_after THEN 'rss_after_load_bytes (measured)'
                           ELSE 'peak_rss_bytes (measured; load-window RSS not recorded)' END AS host_source,
                   CASE WHEN use_after THEN rss_after_median - base_after
                        ELSE peak_rss_median - base_peak END AS host_delta_bytes,
                   offloaded_bytes + CASE WHEN device = 'cpu' THEN offloaded_bytes - released_bytes ELSE 0 END
                       AS explained_host_bytes
            FROM paired),
        excess AS (
            SELECT *, CASE WHEN offloaded_bytes > 0
                           THEN (host_delta_bytes - explained_host_bytes) / offloaded_bytes END AS excess_per_offloaded
            FROM delta)
        SELECT run_id, phase, label, implementation, processes, host_source, host_delta_bytes,
               offloaded_bytes, released_bytes, 'runtime evidence (accounted)' AS offloaded_source,
               CASE WHEN offloaded_bytes > 0 THEN host_delta_bytes / offloaded_bytes END AS host_per_offloaded,
               CASE WHEN released_bytes > 0 THEN host_delta_bytes / released_bytes END AS host_per_released,
               device, explained_host_bytes, excess_per_offloaded,
               coalesce(excess_per_offloaded > 0.2, false) AS flagged
        FROM excess""",
    "run_overview": """
        SELECT r.run_id, r.experiment, r.created_utc, r.hostname, r.device_name, r.vllm_version, r.model_name,
               r.valid, r.errors, r.warnings,
               (SELECT count(*) FROM cases c WHERE c.run_id = r.run_id) AS processes,
               (SELECT count(*) FROM failures f WHERE f.run_id = r.run_id) AS failures,
               (SELECT count(*) FROM cases c WHERE c.run_id = r.run_id AND c.host_load_contended) AS contended,
               r.run_dir
        FROM runs r""",
    "invalid_labels": """
        SELECT DISTINCT l.run_id, l.phase, l.label, i.code
        FROM label_summary l JOIN validation_issues i
          ON i.run_id = l.run_id AND i.severity = 'error'
         AND (i.label = l.label OR i.label IS NULL) AND (i.phase = l.phase OR i.phase IS NULL)""",
}
"""View name -> SELECT. ``label_summary`` filters non-finite throughputs before the median. ``host_memory``
is ``analysis.report.host_memory`` in SQL: host bytes per offloaded / released byte per label (RSS after load vs the
phase baseline's when both recorded it, else the process peak RSS; evidence bytes), the bytes the offloader's own
storage explains (offloaded; + static slots on a CPU device, where the freed originals stay in the allocator's heap)
and ``flagged`` above 0.2 host bytes per offloaded byte beyond them (on an accelerator: above 1.2 per offloaded
byte), as ``analysis.report.host_memory`` and docs/catalog.md say."""


def ddl() -> list[str]:
    """Statements creating every table and view (idempotent)."""
    out = [f"CREATE TABLE IF NOT EXISTS {name} ({cols}\n)" for name, cols in TABLES.items()]
    out += [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]
    return out
