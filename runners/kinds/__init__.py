"""Case kinds: each phase kind (``results_schema.records.value_sets.PhaseKind``) as one registered object.

Modules: ``base`` (``CaseKind``: what a kind supplies: plan fields, spec and argv, files, its end as one
``runners.outcome.finalized.Outcome``, its live output check and its progress line), one module per family of
kinds (``bench``: throughput, ttft, stability; ``accuracy``; ``serving``) and ``registry`` (the table of
kinds by name, and the dispatch every other runner module goes through: ``kind_of``, ``case_argv``). No
runner module outside this package compares a phase kind's name. Adding a kind: runners/README.md
("Adding a case kind").
"""
