"""Claims about how released bytes and the ISA row are printed in every report."""

from __future__ import annotations

import json
import shutil

from analysis.report.provenance import provenance
from analysis.report.released import released_cell

from .conftest import FIXTURES


def test_released_bytes_are_never_a_negative_zero():
    assert released_cell(18_882_560) == "0.01759"
    assert released_cell(0) == "0"
    cell = released_cell(-512)
    assert cell == "none (static buffer +512 B over offloaded)"
    assert "-0" not in released_cell(-512, 6) and "e-0" not in cell


def test_isa_row_comes_from_the_manifest_numerics(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "real_tiny_run", run)
    m = json.loads((run / "environment-manifest.json").read_text())
    m["numerics"] = [{"device": "cpu", "cpu_model": "AMD EPYC", "cpu_isa_flags": ["avx2", "avx512_bf16", "avx512f"],
                      "machine": "x86_64", "torch_version": "2.13.0+cpu", "onednn_version": "3.12.0",
                      "aten_cpu_capability": "AVX512", "torch_num_threads": 2, "thread_env": {"OMP_NUM_THREADS": "2"},
                      "cpu_kernel_path": "plain"}]
    (run / "environment-manifest.json").write_text(json.dumps(m))
    assert provenance(run).isa == "cpu: AMD EPYC: avx2, avx512_bf16, avx512f (ATen AVX512)"
    m["numerics"] = []
    (run / "environment-manifest.json").write_text(json.dumps(m))
    assert provenance(run).isa is None
