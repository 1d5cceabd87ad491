"""``analysis.report.preload`` loads what the report writers use, so a run's close stage reads no module from disk.

``runners.matrix`` calls it before its first case (``runners.orchestration.stages.import_analysis``), while
the install has left the files in the page cache; the close stage then writes the report minutes later.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run"

PROBE = """
import sys, threading
from pathlib import Path
before = set(sys.modules)
from analysis.report import preload
preload()
loaded = set(sys.modules) - before
threads = threading.active_count()
from analysis.report.summary import write_summary
from analysis.report.console import print_summary
from rich.console import Console
write_summary(Path(sys.argv[1]))
print_summary(Path(sys.argv[1]) / "summary", Console(file=open("/dev/null", "w")))
late = sorted(set(sys.modules) - before - loaded)
print(len(loaded), threads, len(late), " ".join(late))
"""


@pytest.mark.heavy  # measured 7.4 s (a child process that loads the analysis stack and writes a summary); the fast tier has 2 minutes
def test_preload_leaves_the_report_writers_almost_nothing_to_import_and_starts_no_thread(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    out = subprocess.run([sys.executable, "-c", PROBE, str(run)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    loaded, threads, late = int(out[0]), int(out[1]), out[3:]
    assert threads == 1, "preload must start no thread (cases are forked after it)"
    assert loaded > 1000, loaded  # pandas, matplotlib, plotly and the report modules
    # measured: 22 small modules remain (PIL plugins, a few results_schema readers); the plotly trace
    # types, pandas and matplotlib are all loaded by preload
    assert len(late) <= 0.03 * loaded, late
    assert not [m for m in late if m.startswith(("pandas.core.frame", "matplotlib.pyplot", "plotly.graph_objs._"))], late
