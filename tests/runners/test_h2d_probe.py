"""The probe's host-to-device bench as the runner runs it (``runners.orchestration.copy_bench.run_h2d_bench``):
through a stand-in interpreter that prints what ``python -m offload_tools.h2d_bench`` prints on a device (the device
boundary this machine cannot reach; the bench's own logic is tested through fake device ops in
``tests/offload/test_h2d_bench.py``)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from results_schema.records.copy_bench import H2D_FILE_NAME, H2DBench
from results_schema.codec.io import read_json
from runners.orchestration.copy_bench import run_h2d_bench

LINE = {"schema_version": 1, "device": "cuda", "bytes_per_copy": 466115584, "pinned": True, "repeats": 2,
        "copies": 20, "readings": [{"bandwidth_bytes_s": 5.5e10, "median_copy_s": 466115584 / 5.5e10},
                                   {"bandwidth_bytes_s": 5.6e10, "median_copy_s": 466115584 / 5.6e10}],
        "bandwidth_bytes_s": 5.55e10, "bandwidth_min_bytes_s": 5.5e10, "bandwidth_max_bytes_s": 5.6e10,
        "spread_pct": 0.1 / 5.55 * 100, "torch_version": "2.11.0+cu130", "device_name": "NVIDIA H200"}


def _python(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "python"
    exe.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_the_runner_records_the_bench_line_with_the_command_it_ran(tmp_path: Path) -> None:
    python = _python(tmp_path, f"print('noise'); print('OFFLOAD_H2D_BENCH ' + {json.dumps(json.dumps(LINE))})")
    got = run_h2d_bench(tmp_path, python, "cuda", 466115584, dict(os.environ), tmp_path)
    assert got is not None and got["bandwidth_bytes_s"] == 5.55e10
    rec = read_json(tmp_path / H2D_FILE_NAME, H2DBench)
    assert rec.command == (python, "-m", "offload_tools.h2d_bench", "--bytes", "466115584", "--device", "cuda")


def test_a_bench_that_fails_or_prints_no_valid_line_writes_nothing(tmp_path: Path) -> None:
    for body in ("sys.exit(3)", "print('OFFLOAD_H2D_BENCH {\"device\": \"cuda\"}')"):
        assert run_h2d_bench(tmp_path, _python(tmp_path, body), "cuda", 1, dict(os.environ), tmp_path) is None
        assert not (tmp_path / H2D_FILE_NAME).exists()
