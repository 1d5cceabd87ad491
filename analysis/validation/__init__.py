"""Validation of a run directory: every check that decides whether its numbers can be trusted.

Modules: ``validate`` (``validate_run`` -> ``ValidationReport``), ``checks`` (run-level checks),
``records`` (record-level checks), ``common`` (the issue collector), ``placement`` (did two compared cases share a node).
"""
