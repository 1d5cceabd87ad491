"""The report of a run: ``summary/`` tables, Markdown, HTML, PNG plots and the console table.

Modules: ``summary`` (``write_summary``), ``tables`` (every frame of the report), ``markdown``,
``html`` / ``html_figures``, ``plots``, ``console``, ``provenance``, ``host_memory``, ``released``; a choose run's
decision: ``choice_view`` (what every report shows of it) and ``html_choice`` (its HTML section and figure); a
serving run: ``html_serving`` (its HTML section, from ``summary/serving-summary.json``).
"""


def preload() -> None:
    """Import everything the report writers use, without writing anything.

    ``analysis.report.summary``, ``console`` and ``html`` with matplotlib's Agg backend and pandas, the
    PNG writer, and plotly's trace types and figure template (plotly imports them, ~190 modules, when
    a figure first uses them). A caller that writes the report minutes later (``runners.matrix`` at the close of
    a run) calls this first, while those files are still in the page cache. Starts no thread.

    Raises:
        ImportError: the analysis stack (pandas, matplotlib, plotly) is not installed.
    """
    import matplotlib.backends.backend_agg  # noqa: F401
    import PIL.PngImagePlugin  # noqa: F401
    import plotly.graph_objects as go
    import plotly.io as pio

    import analysis.report.console  # noqa: F401
    import analysis.report.summary  # noqa: F401
    from analysis.report.html_figures import style

    # plotly imports a trace type, and its template's trace types, on first use: build and render one
    # small figure of each kind the report draws, styled as the report styles them.
    fig = style(go.Figure([go.Scatter(x=[0.0], y=[1.0]), go.Bar(x=["a"], y=[1.0])]), "preload", "x", "y", "")
    pio.to_html(fig, full_html=False, include_plotlyjs=False)
