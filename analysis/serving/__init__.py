"""Serving analysis: latency-vs-load curves, the highest rate meeting the SLO, verdicts.

Modules: ``summary`` (``summary/serving-summary.{json,md}``), ``request_checks`` (per-request
checks), ``recompute`` (every number of a rate re-derived), ``report`` (tables and plots).
"""
