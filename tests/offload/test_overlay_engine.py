"""The published ring rule runs modules on stale weights, and the evidence shows it (real vLLM CPU engine).

Two runs of ``python -m runners.matrix`` on the tiny 8-layer model with implementation ``overlay`` loaded
from ``tests/fixtures/overlay_src`` (an EMULATION of the published ring rule, our own code):

* ``StaleRingOffloader`` (slot ``k % step`` <- module ``(k + step) % M``): (8,3) step 2 wraps M = 3
  layers, not a multiple of 2: from the second forward pass layers 5 and 6 run on each other's
  weights, so the greedy token digest differs from the baseline's and the run ends INVALID (exit 6,
  ``token_digest_differs`` naming the case), never ok. (2,1) step 2 wraps M = 4, a multiple of 2: the
  same rule is right there and its digest equals the baseline's.
* ``CorrectRingOffloader`` (``offload/ring.py``'s rule) at (8,3) step 2, in a run without a baseline case: digest
  equal to the first run's baseline, run valid (exit 0).

The buggy case differing is also the check that the swapped slot weights are what the CPU kernels
read (``cpu_kernel_path=plain``): were they ignored, every digest would equal the baseline's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.validation.validate import validate_run
from runners.identity.probe import tree_sha256
from results_schema.codec.io import read_jsonl
from results_schema.records.manifest import EnvironmentManifest
from results_schema.records.models import CaseRun
from tests.runners.helpers import RUNNER, ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD, TINY_DEFAULT

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "tests" / "fixtures" / "overlay_src"
LAYER_BYTES = 295_936  # runners/models/tiny_model.py: one decoder layer of the 8-layer default, bf16


def _run(tmp_path: Path, run_id: str, cls: str, points: str, *extra: str) -> tuple[int, str, dict[str, CaseRun]]:
    proc = subprocess.run(
        [*RUNNER, *TINY_DEFAULT, f"results_root={tmp_path}", f"run_id={run_id}",
         "progress=false", "workload.min_measured_s=0",  # exactly the workload's rounds: no window is asserted
         *extra,
         "phases.same_runtime.implementations=[overlay]", f"phases.same_runtime.points={points}",
         f"runtime.overlay_source_root={ROOT}", f"runtime.overlay_class=overlay_emulation.prefetch:{cls}",
         f"++runtime.pins.source_trees={{{ROOT}:{tree_sha256(ROOT)}}}", ENGINE_IN_CASE_PROCESS, ONE_GEMM_THREAD],
        cwd=REPO, capture_output=True, text=True, timeout=1500)
    runs = {r.record.label: r for r in read_jsonl(tmp_path / "default" / run_id / "same_runtime-runs.jsonl", CaseRun)}
    return proc.returncode, proc.stdout + proc.stderr, runs


@pytest.mark.engine
def test_published_ring_rule_changes_the_token_digest_and_the_run_is_invalid(tmp_path: Path, tiny_model_dir: Path):
    rc, out, runs = _run(tmp_path, "stale", "StaleRingOffloader",
                         "[{g:8,n:3,prefetch_step:2},{g:2,n:1,prefetch_step:2}]")
    assert set(runs) == {"baseline", "overlay_g8_n3_p2", "overlay_g2_n1_p2"}, out[-4000:]
    base, m3, m4 = runs["baseline"].record, runs["overlay_g8_n3_p2"], runs["overlay_g2_n1_p2"]
    print(f"DIGESTS baseline={base.token_digest} stale_m3={m3.record.token_digest} stale_m4={m4.record.token_digest}")
    for r, wrapped in ((m3, (5, 6, 7)), (m4, (1, 3, 5, 7))):
        ev = r.evidence
        assert ev.implementation == "overlay" and ev.offloader_class == "overlay_emulation.prefetch.StaleRingOffloader"
        assert ev.wrapped_layers == wrapped and ev.offloaded_bytes == len(wrapped) * LAYER_BYTES
        assert ev.static_buffer_bytes == 2 * LAYER_BYTES and ev.device == "cpu" and ev.post_init_called
    assert m3.record.token_digest != base.token_digest  # M = 3, step 2: stale weights
    assert m4.record.token_digest == base.token_digest  # M = 4, step 2: the rule is right
    assert rc == 6, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert "INVALID" in last and " ok" not in last.lower(), last
    manifest = EnvironmentManifest.model_validate_json((tmp_path / "default" / "stale" /
                                                        "environment-manifest.json").read_text())
    (pin,) = [c for c in manifest.pins if c.kind == "source_tree"]  # which published code ran
    assert (pin.name, pin.actual, pin.ok) == (str(ROOT), tree_sha256(ROOT), True)
    validation = (tmp_path / "default" / "stale" / "summary" / "validation.json").read_text()
    assert "token_digest_differs" in validation and "overlay_g8_n3_p2" in validation
    # the digest check against the baseline fails exactly the stale case: the (2,1) case, right there, passes it
    differs = [i.label for i in validate_run(tmp_path / "default" / "stale").issues if i.code == "token_digest_differs"]
    assert differs == ["overlay_g8_n3_p2"], differs
    _offline_validation_checks_the_planned_overlay_class(tmp_path / "default" / "stale")

    # the fixed rule at the same setting, in a run of its own without a baseline: its digest is compared with the
    # first run's baseline (greedy decoding on the same model and prompts: equal across runs when the weights are right)
    rc, out, runs = _run(tmp_path, "correct", "CorrectRingOffloader", "[{g:8,n:3,prefetch_step:2}]",
                         "phases.same_runtime.baseline=false")
    assert rc == 0, out[-4000:]
    assert set(runs) == {"overlay_g8_n3_p2"}, out[-4000:]
    fixed = runs["overlay_g8_n3_p2"]
    print(f"DIGESTS baseline(stale run)={base.token_digest} correct_m3={fixed.record.token_digest}")
    assert fixed.record.token_digest == base.token_digest
    assert fixed.evidence.offloader_class == "overlay_emulation.prefetch.CorrectRingOffloader"
    assert fixed.evidence.wrapped_layers == (5, 6, 7) and fixed.evidence.static_buffer_bytes == 2 * LAYER_BYTES


def _offline_validation_checks_the_planned_overlay_class(run_dir: Path) -> None:
    """``analysis validate`` holds each overlay case to its ``plan.json`` ``overlay_class``: a plan naming
    another class makes ``wrong_offloader_class`` errors for exactly the overlay cases."""
    plan = json.loads((run_dir / "plan.json").read_text())
    cases = {c["label"]: c for ph in plan["phases"] for c in ph["cases"]}
    assert cases["overlay_g8_n3_p2"]["overlay_class"] == "overlay_emulation.prefetch:StaleRingOffloader"
    assert "overlay_class" not in cases["baseline"]
    report = validate_run(run_dir)
    assert next(c for c in report.checks if c.name == "offloader_class").passed
    for c in cases.values():
        if c["implementation"] == "overlay":
            c["overlay_class"] = "overlay_emulation.prefetch:CorrectRingOffloader"
    (run_dir / "plan.json").write_text(json.dumps(plan))
    wrong = sorted(i.label for i in validate_run(run_dir).issues if i.code == "wrong_offloader_class")
    assert wrong == ["overlay_g2_n1_p2", "overlay_g8_n3_p2"]
