"""DuckDB schema of the run catalog: explicit tables (natural keys) and views.

Every column is declared (no type inference from a sample: DuckDB's ``read_json`` can collapse a
sparse key or a field mixing ``"inf"`` and numbers into JSON). Undefined metrics are NULL, never NaN
(in DuckDB NaN sorts above +inf, so ``MAX`` / ``ORDER BY ... DESC`` would pick it). Every table
carries ``run_id``; the primary keys are natural keys (run, phase, label, repeat, round / task /
rate), so re-loading a run replaces its rows instead of adding new ones. ``docs/catalog.md`` is
the reader's version of this file (``test_catalog`` checks both name the same tables).
"""

from __future__ import annotations

SCHEMA_VERSION = 1

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
        valid BOOLEAN NOT NULL,              -- analysis.validate: no error-severity issue
        errors INTEGER NOT NULL, warnings INTEGER NOT NULL""",
    "plan_counts": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL,
        expected INTEGER,                    -- processes the plan asked for (NULL: no plan found)
        runs INTEGER NOT NULL, failures INTEGER NOT NULL,
        PRIMARY KEY (run_id, phase, label)""",
    "cases": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        implementation VARCHAR NOT NULL, runtime VARCHAR NOT NULL, model VARCHAR NOT NULL,
        group_size INTEGER NOT NULL, num_in_group INTEGER NOT NULL, prefetch_step INTEGER NOT NULL,
        offload_params VARCHAR NOT NULL, offload_backend VARCHAR NOT NULL,
        num_prompts INTEGER NOT NULL, input_len INTEGER NOT NULL, max_tokens INTEGER NOT NULL,
        max_model_len INTEGER NOT NULL, dtype VARCHAR NOT NULL, enforce_eager BOOLEAN NOT NULL,
        gpu_memory_utilization DOUBLE NOT NULL, warmup_rounds INTEGER NOT NULL, measured_rounds INTEGER NOT NULL,
        temperature DOUBLE NOT NULL,
        throughput_tok_s DOUBLE NOT NULL,    -- output tokens / measured seconds of this process
        output_tokens BIGINT NOT NULL, elapsed_s DOUBLE NOT NULL, load_seconds DOUBLE NOT NULL,
        peak_rss_bytes BIGINT NOT NULL, device_memory_bytes BIGINT,
        kv_cache_tokens BIGINT, kv_cache_gib DOUBLE, max_concurrency DOUBLE,
        process_wall_s DOUBLE NOT NULL, token_digest VARCHAR NOT NULL,
        vllm_version VARCHAR NOT NULL, torch_version VARCHAR NOT NULL, log_path VARCHAR NOT NULL,
        PRIMARY KEY (run_id, phase, label, repeat)""",
    "rounds": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        round INTEGER NOT NULL, elapsed_s DOUBLE NOT NULL, prompt_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL, throughput_tok_s DOUBLE NOT NULL, token_digest VARCHAR NOT NULL,
        PRIMARY KEY (run_id, phase, label, repeat, round)""",
    "evidence": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        offloader_class VARCHAR NOT NULL, implementation VARCHAR NOT NULL,
        group_size INTEGER NOT NULL, num_in_group INTEGER NOT NULL, prefetch_step INTEGER NOT NULL,
        offload_params VARCHAR NOT NULL, num_layers INTEGER NOT NULL,
        selected_layers INTEGER[] NOT NULL, wrapped_layers INTEGER[] NOT NULL, wrapped_count INTEGER NOT NULL,
        offloaded_bytes BIGINT NOT NULL, static_buffer_bytes BIGINT NOT NULL, released_bytes BIGINT NOT NULL,
        post_init_called BOOLEAN NOT NULL, device VARCHAR NOT NULL,
        PRIMARY KEY (run_id, phase, label, repeat)""",
    "failures": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        line INTEGER NOT NULL,               -- line in <phase>-failures.jsonl (a resumed case may fail twice)
        implementation VARCHAR NOT NULL, failure_type VARCHAR NOT NULL, exit_code INTEGER, signal INTEGER,
        error_type VARCHAR, error_message VARCHAR NOT NULL, log_path VARCHAR NOT NULL, duration_s DOUBLE NOT NULL,
        PRIMARY KEY (run_id, phase, label, repeat, line)""",
    "validation_checks": """
        run_id VARCHAR NOT NULL, name VARCHAR NOT NULL, passed BOOLEAN NOT NULL,
        errors INTEGER NOT NULL, warnings INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)""",
    "validation_issues": """
        run_id VARCHAR NOT NULL, seq INTEGER NOT NULL, code VARCHAR NOT NULL, severity VARCHAR NOT NULL,
        message VARCHAR NOT NULL, phase VARCHAR, label VARCHAR, repeat INTEGER, path VARCHAR,
        PRIMARY KEY (run_id, seq)""",
    "accuracy_cases": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        task VARCHAR NOT NULL, implementation VARCHAR NOT NULL, group_size INTEGER NOT NULL,
        num_in_group INTEGER NOT NULL, mode VARCHAR NOT NULL, "limit" INTEGER,
        num_examples INTEGER NOT NULL, correct INTEGER NOT NULL, unparsable INTEGER NOT NULL,
        accuracy DOUBLE NOT NULL,
        PRIMARY KEY (run_id, phase, label, repeat, task)""",
    "accuracy_verdicts": """
        run_id VARCHAR NOT NULL, report VARCHAR NOT NULL,  -- accuracy-verification.json, relative to the run
        mode VARCHAR NOT NULL, passed BOOLEAN NOT NULL, cases INTEGER NOT NULL, failed_checks INTEGER NOT NULL,
        PRIMARY KEY (run_id, report)""",
    "serving_results": """
        run_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, label VARCHAR NOT NULL, repeat INTEGER NOT NULL,
        request_rate VARCHAR NOT NULL,       -- configured rate as written ('inf' = all at t=0), part of the key
        max_concurrency INTEGER, completed INTEGER, failed INTEGER, duration_s DOUBLE,
        achieved_request_rate DOUBLE,        -- completed / duration (not the configured rate)
        output_throughput_tok_s DOUBLE,
        ttft_ms_mean DOUBLE, ttft_ms_median DOUBLE, ttft_ms_p99 DOUBLE,
        tpot_ms_mean DOUBLE, tpot_ms_median DOUBLE, tpot_ms_p99 DOUBLE,   -- per request (E2E-TTFT)/(tokens-1)
        itl_ms_mean DOUBLE, itl_ms_median DOUBLE, itl_ms_p99 DOUBLE,      -- pooled gaps between chunks
        e2el_ms_mean DOUBLE, e2el_ms_median DOUBLE, e2el_ms_p99 DOUBLE,
        PRIMARY KEY (run_id, phase, label, repeat, request_rate)""",
    "load_notes": """
        run_id VARCHAR NOT NULL, seq INTEGER NOT NULL, note VARCHAR NOT NULL,
        PRIMARY KEY (run_id, seq)""",
}
"""Table name -> column definitions (DuckDB DDL). Order = creation order."""

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
                   median(c.kv_cache_tokens) AS kv_cache_tokens_median
            FROM cases c LEFT JOIN evidence e USING (run_id, phase, label, repeat)
            GROUP BY c.run_id, c.phase, c.label),
        base AS (
            SELECT run_id, phase, throughput_median_tok_s AS baseline_tok_s,
                   kv_cache_tokens_median AS baseline_kv_tokens
            FROM per_label WHERE implementation = 'baseline')
        SELECT p.*, b.baseline_tok_s, p.throughput_median_tok_s / b.baseline_tok_s AS retention,
               p.kv_cache_tokens_median - b.baseline_kv_tokens AS kv_gain_tokens
        FROM per_label p LEFT JOIN base b USING (run_id, phase)""",
    "run_overview": """
        SELECT r.run_id, r.experiment, r.created_utc, r.hostname, r.device_name, r.vllm_version, r.model_name,
               r.valid, r.errors, r.warnings,
               (SELECT count(*) FROM cases c WHERE c.run_id = r.run_id) AS processes,
               (SELECT count(*) FROM failures f WHERE f.run_id = r.run_id) AS failures,
               r.run_dir
        FROM runs r""",
    "invalid_labels": """
        SELECT DISTINCT l.run_id, l.phase, l.label, i.code
        FROM label_summary l JOIN validation_issues i
          ON i.run_id = l.run_id AND i.severity = 'error'
         AND (i.label = l.label OR i.label IS NULL) AND (i.phase = l.phase OR i.phase IS NULL)""",
}
"""View name -> SELECT. ``label_summary`` filters non-finite throughputs before the median."""


def ddl() -> list[str]:
    """Statements creating every table and view (idempotent)."""
    out = [f"CREATE TABLE IF NOT EXISTS {name} ({cols}\n)" for name, cols in TABLES.items()]
    out += [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]
    return out
