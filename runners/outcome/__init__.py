"""Case outcome checks: does what a case process wrote agree with itself and with its plan?

Modules: ``case_checks`` (record, ``BENCH_RESULT`` line, evidence sidecar and ``OFFLOAD_EVIDENCE``
line agree; ``Finalized``), ``case_log`` (what a case log says: KV capacity, root cause, signals).
"""
