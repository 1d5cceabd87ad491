"""Run orchestration: the stages of ``runners.matrix`` from an open run directory to the verdict.

Modules: ``stages`` (the pipeline, each stage a small function), ``rundir`` (open or resume the run
directory), ``run_lock`` (one runner per run directory), ``resume`` (what an interrupted run still has
to do), ``execute`` (per phase: gates, each case, one line per case; a case's end is
``runners.outcome``), ``accuracy_phase`` (accuracy phases: inputs, the resume check, the verifier),
``close`` (identity at the end, summary, checksums, verdict), ``progress`` (progress lines, dry-run
table), ``path_checks`` (every path a run needs, before any process), ``copy_bench`` (the host copy
bandwidth beside the fit), ``overhead`` (runner wall minus case walls), ``sequential`` (a sequential phase's
looks and the blocks each decides), ``choose`` (a choose run's loop from its probe to its last decision),
``choose_probe`` (the probe's re-measures and stop), ``choose_decide`` (each decision: fit, predict, choose, check),
``choose_verify`` (the verify phase's schedule), ``choose_lines`` (its printed lines).
"""
