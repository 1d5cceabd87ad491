"""The probe stages of ``choose-decisions.jsonl`` (``results_schema.records.choice``): a ``remeasure`` line adds
processes to the probe's own cases, a ``stopped`` line removes the verify phase from the plan's counts, and the
record refuses a probe stage that chooses a setting or names no contended process."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from results_schema.records.choice import ChoiceDecision, SettingRef, verify_phase, with_decided
from results_schema.records.plan import PlannedCase, PlannedPhase, RunPlan


def _case(label: str, repeats: int, g: int = 0) -> PlannedCase:
    return PlannedCase(label=label, implementation="baseline" if g == 0 else "current", offload_group_size=g,
                       offload_num_in_group=1 if g else 0, offload_prefetch_step=1, offload_params=(),
                       offload_backend="auto", repeats=repeats, expect_error=None, runtime="cpu", device="cpu",
                       expected_runs=repeats, expected_failures=0)


def _phase(name: str, *cases: PlannedCase) -> PlannedPhase:
    return PlannedPhase(name=name, kind="throughput", cases=cases, processes=sum(c.repeats for c in cases))


PLAN = RunPlan(experiment="choose", run_id="t", phases=(
    _phase("probe", _case("baseline", 2), _case("current_g1_n1", 1, g=1)), _phase("verify", _case("baseline", 4))),
    processes=7)


def _decision(stage: str, **update: object) -> ChoiceDecision:
    doc = dict(stage=stage, need_bytes=1, need_source="need_gib=0.001", implementation="current", num_layers=2,
               num_prompts=1, layer_bytes=(10, 10), layer_bytes_source="config.json", slot_bytes=0,
               baseline_phase="probe", baseline_tok_s=(100.0,), noise_pct=0.0, copy_bench_bandwidth_bytes_s=None,
               points=(), fits=(), form=None, form_reason="no model fitted", half_width_pct=0.0, predictions=(),
               checked=(), budget=0, chosen=(), decided_phase=None, trusted=True, note="n",
               processes_every_candidate=0, remeasured=("probe/baseline-r0",))
    doc.update(update)
    return ChoiceDecision.model_validate(doc)


def test_a_remeasure_adds_repeats_to_the_probes_own_cases() -> None:
    d = _decision("remeasure", decided_phase=_phase("probe", _case("baseline", 1)))
    whole = with_decided(PLAN, [d, _decision("remeasure", decided_phase=_phase("probe", _case("baseline", 1),
                                                                                _case("current_g1_n1", 1, g=1)))])
    probe = whole.phases[0]
    assert [(c.label, c.repeats, c.expected_runs) for c in probe.cases] == [("baseline", 4, 4), ("current_g1_n1", 2, 2)]
    assert probe.processes == 6 and whole.processes == 10


def test_a_remeasure_of_a_label_the_probe_lacks_is_refused() -> None:
    d = _decision("remeasure", decided_phase=_phase("probe", _case("current_g2_n1", 1, g=2)))
    with pytest.raises(ValueError, match="current_g2_n1"):
        with_decided(PLAN, [d])


def test_a_stopped_choice_removes_the_verify_phase_from_the_counts() -> None:
    whole = with_decided(PLAN, [_decision("remeasure", decided_phase=_phase("probe", _case("baseline", 1))),
                                _decision("stopped", unrun_phase="verify")])
    assert [p.name for p in whole.phases] == ["probe"] and whole.processes == 4


def test_a_remeasure_adds_no_verify_phase() -> None:
    """The phase the decided settings were measured in is never the probe a re-measure adds processes to."""
    d = _decision("remeasure", decided_phase=_phase("probe", _case("baseline", 1)))
    assert verify_phase([d, _decision("stopped", unrun_phase="verify")]) is None


@pytest.mark.parametrize("stage, update, match", [
    ("remeasure", {"remeasured": ()}, "contended processes named"),
    ("stopped", {"remeasured": (), "unrun_phase": "verify"}, "contended processes named"),
    ("remeasure", {"budget": 1, "chosen": (SettingRef(group_size=1, num_in_group=1, prefetch_step=1,
                                                      label="current_g1_n1"),)}, "no setting chosen"),
    ("remeasure", {"unrun_phase": "verify"}, "unrun_phase is set exactly for stage stopped"),
    ("stopped", {}, "unrun_phase is set exactly for stage stopped"),
    ("remeasure", {"form": "serial"}, "form is null exactly"),
])
def test_a_probe_stage_that_chooses_or_names_nothing_is_refused(stage: str, update: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        _decision(stage, **update)
