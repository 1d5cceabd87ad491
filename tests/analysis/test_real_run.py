"""Claims about the committed real tiny-model run (tests/fixtures/real_tiny_run, see its README)."""

from __future__ import annotations

import shutil

import pytest

from analysis.aggregate import aggregate
from offload_tools.layer_bytes import layer_bytes_from_config, load_config
from analysis.load import load_run
from analysis.report.summary import write_summary
from analysis.validation.validate import validate_run
from analysis.verify import verify
from offload.selection import select_offload_layers

from .conftest import FIXTURES, model_dir_for

REAL = FIXTURES / "real_tiny_run"
SMOKE = FIXTURES / "real_smoke_run"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="no real run fixture")


@pytest.mark.parametrize("run", [REAL, SMOKE], ids=lambda p: p.name)
def test_real_runs_are_valid(run, request):
    rep = validate_run(run, model_dir=model_dir_for(run, request))
    assert rep.valid, [i.message for i in rep.errors]
    assert not [i for i in rep.warnings if i.code == "layer_bytes_unverified"]
    assert {c.name for c in rep.checks if not c.passed} == set()


def test_real_smoke_run_counts_the_expected_failure_and_sync_class(request):
    rep = validate_run(SMOKE, model_dir=model_dir_for(SMOKE, request))
    counts = {(c.label): (c.expected, c.runs, c.failures) for c in rep.counts}
    assert counts["invalid_g2_n3"] == (1, 0, 1)
    assert counts["sync_g4_n1"] == (1, 1, 0)
    data = load_run(SMOKE)
    classes = dict(zip(data.runs["label"], data.runs["ev_offloader_class"], strict=True))
    assert classes["sync_g4_n1"].endswith("SyncOffloader")
    assert classes["baseline"] == "vllm.model_executor.offloader.base.NoopOffloader"


def test_real_run_evidence_follows_the_rule_and_config_bytes(request):
    data = load_run(REAL)
    mdir = model_dir_for(REAL, request) or data.runs["model"].iloc[0]
    per_layer = layer_bytes_from_config(load_config(mdir), "bfloat16")
    assert per_layer == 295_936
    for _, r in data.runs.iterrows():
        assert r["ev_selected_layers"] == select_offload_layers(8, r["group_size"], r["num_in_group"])
        assert r["ev_offloaded_bytes"] == per_layer * len(r["ev_wrapped_layers"])
    s = aggregate(data)
    assert set(s["label"]) == {"baseline", "current_g8_n1", "current_g4_n1", "current_g4_n2", "current_g2_n1"}


@pytest.mark.parametrize("run", [REAL, SMOKE], ids=lambda p: p.name)
def test_runner_written_summary_verifies_exactly(run):
    res = verify(run)
    assert res.ok, res.mismatches
    assert res.max_abs_diff_printed == 0.0


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_summary_regenerates_identically(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REAL, run, ignore=shutil.ignore_patterns("summary"))
    table = write_summary(run)
    assert "| same_runtime | current_g4_n1 | current | 4 | 1 | 3,7 | 2 | 591,872 |" in table
    import json

    fresh = json.loads((run / "summary" / "comparison-summary.json").read_text())
    committed = json.loads((REAL / "summary" / "comparison-summary.json").read_text())
    # the committed summary predates the verdict margin, window and front-eligibility columns and
    # used the old (distance-to-chord) knee: every column it has, except the knee, regenerates equal
    old_cols = set(committed["rows"][0]) - {"knee"}
    assert [{k: r[k] for k in old_cols} for r in fresh["rows"]] == \
        [{k: r[k] for k in old_cols} for r in committed["rows"]]
    assert fresh["valid"] is committed["valid"] is True


def test_moved_model_path_falls_back_to_the_rebuilt_tiny_model(tmp_path, request):
    from .conftest import make_fixtures

    run = tmp_path / "run"
    shutil.copytree(REAL, run, ignore=shutil.ignore_patterns("summary", "SHA256SUMS"))
    for _, r in load_run(run).runs.iterrows():
        make_fixtures.rewrite_case(run, (r["phase"], r["label"], r["repeat"]),
                                   record={"model": "/nonexistent/tiny-qwen2-l8-h128-s0"})
    unverified = validate_run(run)
    assert unverified.valid and "layer_bytes_unverified" in {i.code for i in unverified.warnings}
    mdir = model_dir_for(run, request)
    assert mdir is not None and (mdir / "model.safetensors").is_file()
    rep = validate_run(run, model_dir=mdir)
    assert rep.valid and "layer_bytes_unverified" not in {i.code for i in rep.warnings}
