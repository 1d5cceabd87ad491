"""Claims about the validation report: each broken fixture flips ``valid`` with a named error."""

from __future__ import annotations

import shutil

import pytest

from tests.support.synthetic import SynthCase, SynthPhase, default_cases, write_run_dir
from analysis.validation.validate import validate_run

from .conftest import make_fixtures, model_dir_for


def test_synthetic_run_is_valid_with_expected_counts(valid_run):
    rep = validate_run(valid_run)
    assert rep.valid, [i.message for i in rep.errors]
    assert {c.name for c in rep.checks} >= {"counts", "logs", "offloader_class", "layer_bytes", "token_digest"}
    assert all(c.expected == 3 and c.runs == 3 and c.failures == 0 for c in rep.counts)
    assert len(rep.counts) == 9


@pytest.mark.parametrize("source", ["synthetic", "real"])
@pytest.mark.parametrize("name", sorted(make_fixtures.EDGE_CASES))
def test_each_edge_case_flips_valid_with_a_named_error(fixture_runs, source, name, request):
    key = f"{source}_{name}"
    if key not in fixture_runs:
        pytest.skip(f"no {source} run fixture")
    _fn, code = make_fixtures.EDGE_CASES[name]
    run = fixture_runs[key]
    rep = validate_run(run, model_dir=model_dir_for(run, request))
    assert not rep.valid
    codes = {i.code for i in rep.errors}
    assert code in codes, codes
    phase, label, repeat = make_fixtures.target_of(run) if code != "invalid_record" else (None, None, None)
    hit = [i for i in rep.errors if i.code == code][0]
    if code != "invalid_record":
        assert (hit.phase, hit.label) == (phase, label)


def test_nan_record_error_names_file_line_and_field(fixture_runs):
    rep = validate_run(fixture_runs["synthetic_edge_nan_throughput"])
    (err,) = [i for i in rep.errors if i.code == "invalid_record"]
    assert "same_runtime-runs.jsonl:" in err.message and "record.throughput_tok_s:" in err.message


def test_missing_plan_is_only_a_warning(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    (run / "plan.json").unlink()
    rep = validate_run(run)
    assert rep.valid
    assert "no_plan" in {i.code for i in rep.warnings}


def test_missing_case_is_a_count_mismatch(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    path = run / "same_runtime-runs.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[1:]))
    rep = validate_run(run)
    assert "count_mismatch" in {i.code for i in rep.errors}


def test_identical_kv_capacity_across_settings_is_a_warning(tmp_path):
    cases = default_cases()
    cases = [SynthCase(**{**c.__dict__, "kv_cache_tokens": 5000}) for c in cases]
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    rep = validate_run(run)
    assert rep.valid
    assert "identical_kv_capacity" in {i.code for i in rep.warnings}


def test_missing_kv_line_is_a_warning_not_zero(tmp_path):
    cases = [SynthCase(**{**c.__dict__, "kv_cache_tokens": None}) for c in default_cases()]
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    rep = validate_run(run)
    assert rep.valid
    assert "missing_kv_capacity" in {i.code for i in rep.warnings}


def test_expected_failure_is_counted_and_unexpected_failure_is_an_error(tmp_path):
    cases = default_cases(points=((4, 1),), implementations=("current",))
    cases.append(SynthCase("official_g4_n1", "official", 4, 1, fail=True))
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    rep = validate_run(run)
    assert rep.valid, [i.message for i in rep.errors]
    cases[-1] = SynthCase("sync_g4_n1", "sync", 4, 1, fail=True)
    run2 = write_run_dir(tmp_path / "run2", [SynthPhase("same_runtime", cases, repeats=1)])
    rep2 = validate_run(run2)
    assert "case_failed" in {i.code for i in rep2.errors}


def test_tampered_file_listed_in_sha256sums_is_an_error(tmp_path, valid_run):
    import hashlib

    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    files = sorted(p for p in run.rglob("*") if p.is_file())
    (run / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(run)}\n" for p in files))
    assert validate_run(run).valid
    log = run / "logs" / "same_runtime" / "baseline-r1.log"
    log.write_text(log.read_text() + "edited\n")
    rep = validate_run(run)
    assert [i.path for i in rep.errors if i.code == "checksum_mismatch"] == ["logs/same_runtime/baseline-r1.log"]


def test_invalid_manifest_is_an_error(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    (run / "environment-manifest.json").write_text('{"schema_version": 1}\n')
    rep = validate_run(run)
    assert "invalid_manifest" in {i.code for i in rep.errors}


def test_evidence_device_must_match_the_plan_runtime(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    make_fixtures.rewrite_case(run, ("same_runtime", "current_g4_n1", 0), evidence={"device": "cuda"})
    rep = validate_run(run)
    assert "runtime_mismatch" in {i.code for i in rep.errors}


def test_record_in_the_wrong_phase_file_is_invalid(tmp_path, valid_run):
    run = tmp_path / "run"
    shutil.copytree(valid_run, run)
    (run / "same_runtime-runs.jsonl").rename(run / "other-runs.jsonl")
    rep = validate_run(run)
    msgs = [i.message for i in rep.errors if i.code == "invalid_record"]
    assert msgs and "does not match file name phase 'other'" in msgs[0]


def test_short_measurement_windows_are_warned_per_label(valid_run):
    """3 rounds of ~0.6 s (no minimum recorded) is a short window: a warning naming it."""
    rep = validate_run(valid_run)
    short = [i for i in rep.warnings if i.code == "short_measurement_window"]
    labels = {i.label for i in short}
    assert "baseline" in labels and "current_g4_n1" in labels
    msg = next(i.message for i in short if i.label == "baseline")
    assert "3 rounds (no minimum recorded)" in msg and "shorter than 3 s" in msg
    assert rep.valid  # a warning, not an error


def test_reached_window_is_not_warned(valid_run):
    from types import SimpleNamespace

    from analysis.load import load_run
    from analysis.validation.checks import check_window as _check_window
    from analysis.validation.common import Collector as _Collector
    from results_schema.records.models import MeasurementWindow

    data = load_run(valid_run)
    long_runs = []
    for p, ln, cr in data.case_runs:
        r = cr.record
        scale = 3.5 / r.elapsed_s  # stretch the rounds to a 3.5 s window
        rounds = tuple(x.model_copy(update={"elapsed_s": x.elapsed_s * scale,
                                            "throughput_tok_s": x.output_tokens / (x.elapsed_s * scale)})
                       for x in r.rounds)
        el = sum(x.elapsed_s for x in rounds)
        rec = r.model_copy(update={
            "rounds": rounds, "elapsed_s": el, "throughput_tok_s": r.output_tokens / el,
            "workload": r.workload.model_copy(update={"min_measured_s": 3.0}),
            "window": MeasurementWindow(measured_s=el, rounds=len(rounds), min_measured_s=3.0,
                                        min_rounds=len(rounds), reached=True)})
        long_runs.append((p, ln, cr.model_copy(update={"record": rec})))
    col = _Collector()
    _check_window(SimpleNamespace(case_runs=long_runs), col)
    assert col.issues == []
    # the same records asking for a 5 s minimum are short
    col = _Collector()
    asked = [(p, ln, cr.model_copy(update={"record": cr.record.model_copy(update={
        "workload": cr.record.workload.model_copy(update={"min_measured_s": 5.0})})})) for p, ln, cr in long_runs]
    _check_window(SimpleNamespace(case_runs=asked), col)
    assert {i.code for _c, i in col.issues} == {"short_measurement_window"}
