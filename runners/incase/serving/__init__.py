"""Serving phase: a real vLLM OpenAI-compatible API server per case, driven by vLLM's own serving benchmark.

Modules: ``server`` (launch in a fresh process group, readiness, whole-tree teardown),
``driver`` (the case process ``python -m runners.incase.serving``: rate sweep with
``vllm.benchmarks.serve``), ``bench_args`` (what the server and the benchmark are given), ``rate_records`` (one rate's
records from the benchmark's result), ``faults`` (what stops a case), ``token_ids`` (output ids from the streams).
The matrix side is the serving kind, ``runners.kinds.serving`` (config checked, ``ServingCaseSpec`` from
``runners.launching.serving_case``, finalize -> ``ServingRun`` lines or a ``CaseFailure`` in
``runners.outcome.serving``). Records: ``results_schema.records.serving``.
"""
