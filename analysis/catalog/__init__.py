"""A DuckDB catalog across run directories (``python -m analysis catalog``; ``docs/catalog.md``).

Modules: ``store`` (build and query), ``schema`` (tables and views), ``columns`` (columns from the
``results_schema`` models), ``compare`` / ``compare_metrics`` (two catalogued runs compared),
``cli``.
"""
