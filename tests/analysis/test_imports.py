"""results_schema and analysis stay light: no torch, no vLLM, no process launching."""

from __future__ import annotations

import pytest
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy  # measured 1.3 s in the fast tier (its budget is 2 minutes)
def test_packages_import_without_torch_or_vllm():
    mods = [".".join(p.relative_to(ROOT / "analysis").with_suffix("").parts) for p in (ROOT / "analysis").rglob("*.py")
            if p.stem != "__main__"]
    code = (
        "import sys, importlib\n"
        "import results_schema.records.models, results_schema.codec.io, results_schema.records.dispatch, results_schema.cli\n"
        + "".join(f"importlib.import_module('analysis.{m}')\n" for m in mods)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_analysis_never_launches_processes():
    offenders = []
    for p in (ROOT / "analysis").rglob("*.py"):
        text = p.read_text()
        if "subprocess" in text or "Popen" in text or "os.system" in text:
            offenders.append(str(p.relative_to(ROOT)))
    assert offenders == []
