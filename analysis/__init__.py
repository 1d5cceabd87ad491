"""Analysis of run directories written by ``runners.matrix`` (pandas; no torch, no vLLM, no processes).

Modules:
    load        ``load_run(run_dir)``: strict, validated frames (runs, rounds, failures)
    validate    ``validate_run(run_dir)``: every trust check -> ``ValidationReport`` (``valid`` iff no error)
    aggregate   per-label statistics, evidence bytes, retention, KV gain, measured window, Pareto flag
                and knee over valid token-identical points
    compare     the verdict rule (``verdict`` / ``decide``: equivalence margin, CI); current vs official,
                per label vs baseline, long-window, confirmation, spaced-vs-adjacent, cross-stack tables
    pareto      Pareto front and the planner's knee; ``python -m analysis pareto FILE.csv``
    model       transfer-bound throughput model and the recommender
    tables      ``build(run_dir)``: every table of the report (frames; no files written)
    markdown    the report's Markdown tables and verdict rule in words
    plots       the report's PNG plots (Pareto front, retention)
    report      ``write_summary(run_dir)`` -> summary/ (JSON, CSV, Markdown, PNG); returns the table
    verify      independent stdlib recomputation of the summary
    layer_bytes layer bytes from config.json arithmetic and safetensors headers
    cli         ``python -m analysis report|validate|verify|recommend|pareto``

Test support (synthetic run directories, the load/aggregate benchmark) lives in ``tests/support``.
"""
