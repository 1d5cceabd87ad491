"""Analysis of run directories written by ``runners.matrix`` (pandas; no torch, no vLLM, no processes).

Modules:
    load        ``load_run(run_dir)``: strict, validated frames (runs, rounds, failures)
    validate    ``validate_run(run_dir)``: every trust check -> ``ValidationReport`` (``valid`` iff no error)
    aggregate   per-label statistics, evidence bytes, retention, KV gain, Pareto flag and knee
    compare     current vs official with bootstrap CIs and verdicts; long-window, confirmation,
                spaced-vs-adjacent and cross-stack tables
    model       transfer-bound throughput model and the recommender
    report      ``write_summary(run_dir)`` -> summary/ (JSON, CSV, Markdown, PNG); returns the table
    verify      independent stdlib recomputation of the summary
    layer_bytes layer bytes from config.json arithmetic and safetensors headers
    synthetic   schema-valid synthetic run directories (tests, fixtures, benchmark)
    bench       ``python -m analysis.bench``: validate+aggregate vs ``pandas.read_json``
    cli         ``python -m analysis report|validate|verify|recommend``
"""
