"""Case outcome checks: does what a case process wrote agree with itself and with its plan?

Modules: one per case kind, each the whole end of that kind's case (its output read, checked,
turned into its line): ``bench`` (throughput, ttft, stability -> ``CaseRun`` / ``CaseFailure``),
``accuracy`` (-> ``AccuracyCaseRun`` / ``CaseFailure``), ``serving`` (-> ``ServingRun`` per rate /
``CaseFailure``); the checks they share: ``case_checks`` (record, ``BENCH_RESULT`` line, evidence
sidecar and ``OFFLOAD_EVIDENCE`` line agree), ``finalized`` (``Finalized``: a case's line and whether it was expected), ``case_log`` (what a case log says: KV capacity, root cause, signals).
"""
