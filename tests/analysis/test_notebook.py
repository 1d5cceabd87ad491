"""The notebook renders a run directory end to end (executed with nbclient)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "pareto.ipynb"


def test_pareto_notebook_executes_on_a_run_dir(valid_run, monkeypatch):
    monkeypatch.setenv("PARETO_RUN_DIR", str(valid_run))
    root = str(NOTEBOOK.parents[1])
    monkeypatch.setenv("PYTHONPATH", root + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": root}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "valid: True" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
