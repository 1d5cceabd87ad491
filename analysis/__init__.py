"""Analysis of run directories written by ``runners.matrix`` (pandas; no torch, no vLLM, no processes).

Subpackages (each ``__init__`` lists its modules):
    validation  ``validate_run(run_dir)``: every trust check -> ``ValidationReport`` (``valid`` iff no error)
    comparison  the verdict rule (t interval over processes, equivalence margin), the noise floor, Pareto front and
                knee, the decision table; current vs official, per label vs baseline, cross-stack tables
    model       the transfer-bound throughput model: fit, predictions, when to trust it, the recommender,
                a choose run's decision and ``transfer-check``
    report      ``write_summary(run_dir)`` -> summary/ (JSON, CSV, Markdown, HTML, PNG) and the console table
    accuracy    the accuracy-equivalence verifier (``python -m analysis.accuracy.verifier``)
    serving     serving latency-vs-load curves, the highest rate meeting the SLO, verdicts
    catalog     a DuckDB catalog across run directories (``python -m analysis catalog``)

Modules:
    load        ``load_run(run_dir)``: strict, validated frames (runs, rounds, failures)
    aggregate   per-label statistics, evidence bytes, retention, KV gain, measured window, Pareto flag
                and knee over valid token-identical points
    published   the published analyzer's view: three capacity axes, selectable Pareto axis
    verify      independent stdlib recomputation of the summary
    cli         ``python -m analysis report|validate|verify|recommend|transfer-check|pareto|accuracy-verify|catalog``

Not here: layer bytes from ``config.json`` and safetensors headers (``offload_tools.layer_bytes``); test
support (synthetic run directories, the load/aggregate benchmark) lives in ``tests/support``.
"""
