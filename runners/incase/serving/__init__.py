"""Serving phase: a real vLLM OpenAI-compatible API server per case, driven by vLLM's own serving benchmark.

Modules: ``server`` (launch in a fresh process group, readiness, whole-tree teardown),
``driver`` (the case process ``python -m runners.incase.serving``: rate sweep with
``vllm.benchmarks.serve``). The matrix side (config -> ``ServingCaseSpec``, finalize -> ``ServingRun``
lines or a ``CaseFailure``) is ``runners.planning.serving_spec``. Records: ``results_schema.records.serving``.
"""
