"""Validation: cases of one phase that ran different CPU GEMM kernels make the run INVALID."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from analysis.validation.validate import validate_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run"


def _with_kernels(tmp_path: Path, packed_label: str | None) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    (run / "SHA256SUMS").unlink()
    lines = []
    for line in (run / "same_runtime-runs.jsonl").read_text().splitlines():
        d = json.loads(line)
        packed = d["record"]["label"] == packed_label
        d["cpu_kernels"] = {"path": "packed" if packed else "plain", "layers": 32,
                            "kernels": {"onednn": 32} if packed else {"torch_linear": 32}}
        lines.append(json.dumps(d, separators=(",", ":")))
    (run / "same_runtime-runs.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_same_kernels_in_every_case_pass(tmp_path: Path) -> None:
    rep = validate_run(_with_kernels(tmp_path, None))
    assert not [i for i in rep.issues if i.code == "cpu_kernels_differ"]
    assert next(c for c in rep.checks if c.name == "cpu_kernels").passed


def test_one_case_on_packed_kernels_is_an_error_naming_it(tmp_path: Path) -> None:
    rep = validate_run(_with_kernels(tmp_path, "baseline"))
    (issue,) = [i for i in rep.issues if i.code == "cpu_kernels_differ"]
    assert issue.severity == "error" and "baseline-r0" in issue.message and not rep.valid
    assert "cpu_kernels (1)" in rep.verdict()
