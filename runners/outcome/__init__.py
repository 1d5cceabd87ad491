"""Case outcome checks: does what a case process wrote agree with itself and with its plan?

Modules: one per family of case kinds, each the whole end of that kind's case (its output read, checked,
turned into its ``Outcome``): ``bench`` (throughput, ttft, stability -> a ``CaseRun`` line / ``CaseFailure``),
``accuracy`` (-> an ``AccuracyCaseRun`` line / ``CaseFailure``), ``serving`` (-> a ``ServingRun`` line per rate /
``CaseFailure``); what they share: ``case_checks`` (record, ``BENCH_RESULT`` line, evidence
sidecar and ``OFFLOAD_EVIDENCE`` line agree), ``finalized`` (``Outcome``: the one result type of every kind's end,
its lines and whether it was expected), ``case_log`` (what a case log says: KV capacity, root cause, signals),
``live_checks`` (each finished case's outputs against its phase's baselines so far). The case kinds
(``runners.kinds``) call them.
"""
