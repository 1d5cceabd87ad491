"""Serving phase: a real vLLM OpenAI-compatible API server per case, driven by vLLM's own serving benchmark.

Modules: ``server`` (launch in a fresh process group, readiness, whole-tree teardown),
``driver`` (the case process ``python -m runners.incase.serving``: rate sweep with
``vllm.benchmarks.serve``). The matrix side is the serving kind, ``runners.kinds.serving`` (config checked,
``ServingCaseSpec`` from ``runners.launching.serving_case``, finalize -> ``ServingRun`` lines or a ``CaseFailure``
in ``runners.outcome.serving``). Records: ``results_schema.records.serving``.
"""
