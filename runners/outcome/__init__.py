"""Case outcome checks: does what a case process wrote agree with itself and with its plan?

Modules: ``case_checks`` (record, ``BENCH_RESULT`` line, evidence sidecar and ``OFFLOAD_EVIDENCE``
line agree), ``finalized`` (``Finalized``: a case's line and whether it was expected), ``case_log`` (what a case log says: KV capacity, root cause, signals).
"""
