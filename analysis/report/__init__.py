"""The report of a run: ``summary/`` tables, Markdown, HTML, PNG plots and the console table.

Modules: ``summary`` (``write_summary``), ``tables`` (every frame of the report), ``markdown``,
``html`` / ``html_figures``, ``plots``, ``console``, ``provenance``, ``host_memory``, ``released``.
"""
