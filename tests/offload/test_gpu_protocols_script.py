"""``scripts/gpu_protocols.sh`` end to end on CPU (its plumbing run): every part runs, three files come back.

Claims: with the CPU arguments the script documents (small stack, ``--device cpu``, limits scaled), it
leaves exactly ``gpu_protocols.json``, ``logs.tar.gz`` and ``README.md`` (a lent device returns at
most 8 files), no ``parts/`` directory; the merged JSON holds every part, the environment, the steps
and the summary; the main check ran all 10 points with interleaved baselines, per-step times and both
ratios (ceiling first, "n/a" where nothing is copied); the negative control failed as it must; the
summary is ``ok: false`` on CPU (no graphs, no crossing protocol, nothing for the transfer check) and
the exit status says so; a bad time scale exits 2 before anything runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_protocols.sh"
CPU_ARGS = "--device cpu --layers 4 --width-divisor 32 --steps 1 --tokens 8 --compile-backend eager"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, **extra}


@pytest.mark.heavy(seconds=28)  # six processes that import torch, not vLLM (the check keeps it out): 21-23 CPU-s
def test_plumbing_run_on_cpu_leaves_three_files_with_every_part(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env=_env(GPU_PROTOCOLS_EXTRA_ARGS=CPU_ARGS, GPU_PROTOCOLS_TIME_SCALE="4"))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "gpu_protocols.json", "logs.tar.gz"]
    summary = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("GPU_PROTOCOLS_SUMMARY "))
    merged = json.loads((out / "gpu_protocols.json").read_text())
    assert merged["summary"] == summary and summary["ok"] is False and summary["within_limit"] is True
    parts = merged["parts"]
    assert set(parts) == {"gpu_check_torch", "compile", "negative", "skip_refill", "step_sync_device",
                          "transfer_check", "transfer_check_device"}
    main = parts["gpu_check_torch"]
    for name in ("gpu_check_torch", "compile", "negative", "skip_refill", "step_sync_device"):  # torch only, as on
        assert parts[name]["offloader_base"] == "offload.base.BaseOffloader"  # the device: vLLM's class not loaded
    assert main["complete"] is True and summary["not_run"] == [] and summary["points_run"] == 10
    for p in main["points"]:
        assert p["order"][0] == p["order"][-1] == "baseline" and len(p["baseline"]["eager"]["step_times_s"]) == 2
        for m in (p["protocols"]["current"]["modes"]["eager"], p["protocols"]["upstream"]["modes"]["eager"]):
            assert m["bitwise_equal"] is True and len(m["step_times_s"]) == 1
            assert (m["ceiling_ratio"] is None) == (m["ceiling_note"] == "ceiling n/a: nothing copied")
            assert m["bound_ratio"] > 0 and "faster_than_baseline" in m
    assert parts["compile"]["all_bitwise_equal"] is True and summary["compile_ok"] is True
    assert summary["negative_failed_as_it_must"] is True
    assert summary["exit"]["gpu_check_torch"] == 0 and summary["exit"]["transfer_check"] == 1  # no graph points
    assert [line.split(":")[0] for line in merged["steps"]] == [
        "gpu_check_torch", "compile", "negative", "skip_refill", "transfer_check", "step_sync_device",
        "transfer_check_device"]
    assert summary["parts_not_run"] == {}
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert {"gpu_check_torch.log", "negative.log", "steps.txt", "env.txt"} <= set(tar.getnames())
    readme = (out / "README.md").read_text()
    assert "eager: ceiling ratio" in readme and "n/a: nothing copied" in readme
    assert "GPU_CHECK_POINT (4,1) current eager: step" in proc.stdout


def test_a_bad_time_scale_exits_2_before_anything_runs(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "x")], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=_env(GPU_PROTOCOLS_TIME_SCALE="0"))
    assert proc.returncode == 2 and "GPU_PROTOCOLS_TIME_SCALE (0) must be an integer from 1 to 99" in proc.stderr
    assert not (tmp_path / "x").exists()
