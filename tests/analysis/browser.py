"""Render a report page in headless Chromium (Debian's ``chromium`` package) through playwright-core.

No browser is downloaded: playwright drives the system executable (``CHROMIUM``). ``skip_reason()``
says why the browser tests cannot run on this machine (then they are skipped, saying so).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
"""Flags besides --headless and --user-data-dir (playwright passes those): no sandbox as root, no GPU,
and no background traffic of the browser itself (so every request seen comes from the page)."""

COUNT_POINTS_JS = """(id) => {
  const gd = document.getElementById(id);
  if (!gd || !gd._fullData) return -1;
  const traces = gd.querySelectorAll('.scatterlayer .trace');
  let n = 0;
  gd._fullData.forEach((t, i) => {
    if (t.meta === 'case' && traces[i]) n += traces[i].querySelectorAll('path.point').length;
  });
  return n;
}"""
"""Points drawn (SVG ``path.point``) in the ``meta="case"`` traces of a plotly div."""


def chromium_path() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        p = shutil.which(name)
        if p:
            return p
    return None


def skip_reason() -> str | None:
    """None when the browser test can run; else why not (missing package or executable)."""
    if chromium_path() is None:
        return ("headless Chromium not installed (Debian package 'chromium': apt-get install -y chromium; "
                ".ci/run installs it)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python package 'playwright' not installed (project dependency; pip install playwright)"
    return None


@dataclass
class Rendered:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    points: int = -1
    text: str = ""
    first_heading: str = ""
    verdict_top: float = 0.0
    provenance_top: float = 0.0
    svg_count: int = 0
    hovers: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def render(page_path: Path, *, expected_points: int, screenshot: Path, timeout_ms: int = 60_000) -> Rendered:
    """Open ``page_path`` (file://), wait until the Pareto plot drew ``expected_points`` points, screenshot it.

    Every request whose URL is not ``file:``, ``data:``, ``blob:`` or ``about:`` is recorded and aborted.
    """
    from playwright.sync_api import sync_playwright

    out = Rendered()
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=chromium_path(), headless=True,
                                                   args=FLAGS, viewport={"width": 1300, "height": 900})
        try:
            def route(r):
                url = r.request.url
                if url.split(":", 1)[0] in ("file", "data", "blob", "about"):
                    r.continue_()
                else:
                    out.outside_requests.append(url)
                    r.abort()

            ctx.route("**/*", route)
            page = ctx.new_page()
            page.on("console", lambda m: out.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: out.page_errors.append(str(e)))
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            try:
                page.wait_for_function(f"({COUNT_POINTS_JS})('pareto') === {int(expected_points)}",
                                       timeout=timeout_ms)
            finally:
                out.points = page.evaluate(f"({COUNT_POINTS_JS})('pareto')")
            out.hovers = _hover_case_points(page)
            out.text = page.inner_text("body")
            out.first_heading = page.inner_text("h1")
            out.verdict_top = page.evaluate("document.getElementById('verdict').getBoundingClientRect().top")
            out.provenance_top = page.evaluate("document.getElementById('provenance').getBoundingClientRect().top")
            out.svg_count = page.evaluate("document.querySelectorAll('#pareto svg.main-svg').length")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
            out.screenshot = screenshot
        finally:
            ctx.close()
    return out


def _hover_case_points(page) -> list[str]:
    """Hover every drawn case point of ``#pareto`` through plotly's own hover (``Plotly.Fx.hover`` by trace and
    point index, as a mouse over that point alone would); the hover label text of each.

    By index, not by mouse position: two settings that release the same bytes at nearly the same tok/s (G=4 N=2
    and G=2 N=1 on 8 layers) are drawn within a pixel of each other, and a mouse there hovers whichever plotly
    finds first; each point's own label is what is being checked.
    """
    idx = page.evaluate("""() => { const gd = document.getElementById('pareto');
        return gd._fullData.map((t, i) => t.meta === 'case' ? [i, t.x.length] : null).filter(v => v); }""")
    texts = []
    for i, n in idx:
        for j in range(n):
            page.evaluate("([i, j]) => Plotly.Fx.hover('pareto', [{curveNumber: i, pointNumber: j}])", [i, j])
            page.wait_for_timeout(100)
            texts.append(page.evaluate("document.querySelector('#pareto .hoverlayer').textContent"))
    page.evaluate("Plotly.Fx.unhover('pareto')")
    return texts


def screenshot_dir() -> Path:
    """``$OFFLOAD_REPORT_SCREENSHOTS`` or ``<tmp>/offload-report-screenshots`` (kept after the test)."""
    return Path(os.environ.get("OFFLOAD_REPORT_SCREENSHOTS")
                or Path(tempfile.gettempdir()) / "offload-report-screenshots")
