"""Claims about the result models: strict, documented, finite, round-tripping."""

from __future__ import annotations

import json
import random
import typing

import pytest
from pydantic import BaseModel, ValidationError

from tests.support.synthetic import SynthCase, make_case_run
from results_schema.records import case_outcome, host_load, identity, models, validation
from results_schema.codec.io import dumps_model, parse_line, strict_json_loads

ALL_MODELS = [
    identity.OffloadSetting, identity.CaseKey, identity.EngineCase, identity.Setting, identity.LabelKey,
    models.RuntimeEvidence, models.WorkloadSpec, models.RoundResult, models.MeasurementWindow, models.BenchRecord,
    case_outcome.KVCacheCapacity, models.CaseRun, case_outcome.CaseFailure, validation.ValidationIssue, validation.CaseCount,
    validation.CheckResult, validation.ValidationReport, host_load.HostLoad,
]


def case_run(**overrides) -> models.CaseRun:
    case = SynthCase(**{"label": "current_g4_n1", "implementation": "current", "group_size": 4, "num_in_group": 1,
                        **overrides})
    return make_case_run("same_runtime", case, 0, random.Random(0))


@pytest.mark.parametrize("cls", ALL_MODELS, ids=lambda c: c.__name__)
def test_every_field_has_a_description_and_model_is_strict(cls):
    assert cls.model_config["extra"] == "forbid"
    assert cls.model_config["frozen"] is True
    missing = [name for name, f in cls.model_fields.items() if not f.description]
    assert missing == []


@pytest.mark.parametrize("cls", [models.RuntimeEvidence, models.BenchRecord, models.CaseRun, case_outcome.CaseFailure,
                                 validation.ValidationReport], ids=lambda c: c.__name__)
def test_top_level_models_carry_schema_version_1(cls):
    ann = cls.model_fields["schema_version"].annotation
    assert typing.get_args(ann) == (1,)


def test_case_run_round_trips_through_strict_json():
    cr = case_run()
    text = dumps_model(cr)
    assert models.CaseRun.model_validate(strict_json_loads(text)) == cr
    assert parse_line(text, models.CaseRun) == cr


def test_rejects_unknown_field():
    data = json.loads(dumps_model(case_run()))
    data["record"]["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        models.CaseRun.model_validate(data)


def test_models_are_frozen():
    cr = case_run()
    with pytest.raises(ValidationError):
        cr.process_wall_s = 1.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_rejects_non_finite_throughput(bad):
    data = case_run().record.model_dump()
    data["throughput_tok_s"] = bad
    with pytest.raises(ValidationError, match="throughput_tok_s"):
        models.BenchRecord.model_validate(data)


def test_rejects_throughput_inconsistent_with_tokens_and_seconds():
    data = case_run().record.model_dump()
    data["throughput_tok_s"] *= 1.01
    with pytest.raises(ValidationError, match=r"throughput_tok_s .* != output_tokens / elapsed_s"):
        models.BenchRecord.model_validate(data)


def test_rejects_output_tokens_not_summing_rounds():
    data = case_run().record.model_dump()
    data["output_tokens"] += 1
    with pytest.raises(ValidationError, match="sum over rounds"):
        models.BenchRecord.model_validate(data)


def test_rejects_num_in_group_larger_than_group_size():
    with pytest.raises(ValidationError, match=r"offload_num_in_group \(3\) must be <= offload_group_size \(2\)"):
        identity.OffloadSetting(offload_group_size=2, offload_num_in_group=3)


def test_evidence_rejects_wrapped_count_mismatch_and_bad_released_bytes():
    ev = case_run().evidence.model_dump()
    with pytest.raises(ValidationError, match="wrapped_count"):
        models.RuntimeEvidence.model_validate({**ev, "wrapped_count": 5})
    with pytest.raises(ValidationError, match="released_bytes"):
        models.RuntimeEvidence.model_validate({**ev, "released_bytes": 1})
    with pytest.raises(ValidationError, match="not a subset"):
        models.RuntimeEvidence.model_validate({**ev, "wrapped_layers": (0, 1), "wrapped_count": 2})


def test_token_digest_must_be_hex_sha256():
    data = case_run().record.model_dump()
    data["token_digest"] = "not-a-digest"
    with pytest.raises(ValidationError, match="token_digest"):
        models.BenchRecord.model_validate(data)


def test_validation_report_valid_flag_must_match_issues():
    issue = validation.ValidationIssue(code="missing_log", severity="error", message="x")
    with pytest.raises(ValidationError, match="contradicts"):
        validation.ValidationReport(run_dir="r", valid=True, checks=(), counts=(), issues=(issue,))
    rep = validation.ValidationReport(run_dir="r", valid=False, checks=(), counts=(), issues=(issue,))
    assert rep.errors == (issue,) and rep.warnings == ()


def test_kv_capacity_missing_is_null_not_zero():
    kv = case_outcome.KVCacheCapacity()
    assert kv.kv_cache_tokens is None and kv.kv_cache_gib is None and kv.max_concurrency is None


@pytest.mark.parametrize("cls", ALL_MODELS, ids=lambda c: c.__name__)
def test_json_schema_export_works(cls: type[BaseModel]):
    schema = cls.model_json_schema()
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("seed", range(20))
def test_random_case_runs_round_trip(seed):
    rng = random.Random(seed)
    g = rng.randint(1, 8)
    n = rng.randint(1, g)
    case = SynthCase(label=f"current_g{g}_n{n}", implementation="current", group_size=g, num_in_group=n,
                     prefetch_step=rng.randint(1, 3), mean_tok_s=rng.uniform(1, 1e4), sd_tok_s=rng.uniform(0, 50),
                     kv_cache_tokens=rng.choice([None, rng.randint(0, 10**7)]))
    cr = make_case_run("p", case, rng.randint(0, 5), rng, measured_rounds=rng.randint(1, 10))
    text = dumps_model(cr)
    assert models.CaseRun.model_validate(strict_json_loads(text)) == cr


@pytest.mark.parametrize("cls", ALL_MODELS, ids=lambda c: c.__name__)
def test_every_model_rejects_non_finite_floats_by_config(cls):
    assert cls.model_config["allow_inf_nan"] is False


# ----------------------------------------------------------------------------- measurement window
def _with_rounds(n: int, elapsed: float, measured_rounds: int = 3, min_s: float | None = 3.0, window: bool = True):
    rec = case_run().record
    rd = rec.rounds[0]
    rounds = tuple(rd.model_copy(update={"index": i, "elapsed_s": elapsed,
                                         "throughput_tok_s": rd.output_tokens / elapsed}) for i in range(n))
    el = elapsed * n
    wl = rec.workload.model_copy(update={"measured_rounds": measured_rounds, "min_measured_s": min_s})
    data = json.loads(dumps_model(rec))
    for derived in ("requests", "requests_per_s", "round_latency_p50_s", "round_latency_p95_s"):
        data.pop(derived, None)  # rules over the rounds (results_schema.records.load_metrics); these rounds are new
    data.update(workload=json.loads(dumps_model(wl)), rounds=[json.loads(dumps_model(r)) for r in rounds],
                output_tokens=rd.output_tokens * n, elapsed_s=el, throughput_tok_s=rd.output_tokens * n / el)
    if window:
        data["window"] = {"measured_s": el, "rounds": n, "min_measured_s": min_s or 0.0,
                          "min_rounds": measured_rounds, "reached": el >= (min_s or 0.0) and n >= measured_rounds}
    return models.BenchRecord.model_validate(data)


def test_rounds_beyond_measured_rounds_need_an_unreached_window():
    r = _with_rounds(12, 0.25)  # 12 x 0.25 s = the 3 s window; 11 rounds were 2.75 s
    assert r.window.reached and r.window.rounds == 12 and r.window.measured_s == 3.0
    with pytest.raises(ValidationError, match="already reached min_measured_s"):
        _with_rounds(13, 0.25)  # one round more than the window needed
    with pytest.raises(ValidationError, match="already reached min_measured_s"):
        _with_rounds(4, 0.25, min_s=None, window=False)  # no window asked: exactly measured_rounds
    with pytest.raises(ValidationError, match="< measured_rounds"):
        _with_rounds(2, 2.0)


def test_window_must_agree_with_the_record():
    data = json.loads(dumps_model(_with_rounds(12, 0.25)))
    data["window"]["rounds"] = 11
    with pytest.raises(ValidationError, match="window"):
        models.BenchRecord.model_validate(data)
    data["window"].update(rounds=12, reached=False)
    with pytest.raises(ValidationError, match="reached"):
        models.BenchRecord.model_validate(data)


def test_records_without_a_window_keep_their_bytes():
    rec = case_run().record
    assert rec.window is None and rec.workload.min_measured_s is None
    text = dumps_model(rec)
    assert '"window"' not in text and '"min_measured_s"' not in text
    assert '"window"' in dumps_model(_with_rounds(12, 0.25))


def _host_load(**overrides):
    fields = dict(wall_s=10.0, host_busy_cpu_s=16.0, case_cpu_s=9.0, runner_cpu_s=1.0, foreign_cpu_s=6.0,
                  foreign_cores=0.6, steal_cpu_s=0.0, steal_fraction=0.0, host_cores=2, contended_cores_limit=0.25,
                  contended_steal_limit=0.05, contended=True)
    return host_load.HostLoad(**{**fields, **overrides})


def test_host_load_contended_must_follow_the_limits_it_records():
    assert _host_load().contended
    with pytest.raises(ValueError, match="contended .False. contradicts foreign_cores 0.600"):
        _host_load(contended=False)
    assert not _host_load(contended_cores_limit=1.0, contended=False).contended
    assert _host_load(foreign_cpu_s=0.0, foreign_cores=0.0, host_busy_cpu_s=10.0, steal_cpu_s=2.0,
                      steal_fraction=0.1).contended
    with pytest.raises(ValueError, match=r"foreign_cpu_s \(5.0\) != max\(0, host_busy_cpu_s"):
        _host_load(foreign_cpu_s=5.0, foreign_cores=0.5)
    with pytest.raises(ValueError, match="foreign_cores"):
        _host_load(foreign_cores=0.7)


def test_bench_records_without_host_load_still_validate_and_the_field_round_trips():
    from tests.support.synthetic import host_load as synth_host_load

    old = case_run()
    assert old.record.host_load is None and '"host_load"' not in dumps_model(old)
    assert models.CaseRun.model_validate_json(dumps_model(old)) == old
    new = case_run(foreign_cores=(0.6,))
    assert new.record.host_load == synth_host_load(0.6) and new.record.host_load.contended
    assert parse_line(dumps_model(new), models.CaseRun) == new


CASE_RECORDS = ["CaseFailure", "CasePlacement", "AccuracyCaseRun", "BenchRecord", "ServingCaseSpec",
                "ServingCaseResult", "ServingRun"]


@pytest.mark.parametrize("name", CASE_RECORDS)
def test_case_records_inherit_the_case_key_first_and_in_its_order(name):
    """The key block is written once (``identity.CaseKey``); each record's JSON still starts with it, in order."""
    from results_schema.records import accuracy, placement, serving, serving_spec

    cls = next(getattr(m, name) for m in (case_outcome, placement, accuracy, models, serving_spec, serving)
               if hasattr(m, name))
    assert issubclass(cls, identity.CaseKey)
    assert list(cls.model_fields)[:5] == ["schema_version", "phase", "label", "implementation", "repeat"]
    schema = cls.model_json_schema()
    assert list(schema["properties"])[:5] == list(cls.model_fields)[:5]
    assert set(identity.CaseKey.model_fields) <= set(schema["required"]) | {"schema_version"}
