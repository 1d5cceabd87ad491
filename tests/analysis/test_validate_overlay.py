"""Offline validation of ``overlay`` cases: the evidence class must be the plan's ``overlay_class``."""

from __future__ import annotations

from results_schema.rules.evidence_rule import EXPECTED_OFFLOADER_CLASS, expected_class
from results_schema.records.plan import PlannedCase

KEY = ("same_runtime", "overlay_g8_n3_p2")


def test_overlay_class_comes_from_the_plan():
    pat = expected_class("overlay", "overlay_emulation.prefetch:StaleRingOffloader")
    assert pat is not None and pat.match("overlay_emulation.prefetch.StaleRingOffloader")
    assert not pat.match("overlay_emulation.prefetch.CorrectRingOffloader")
    assert not pat.match("overlay_emulation.prefetchXStaleRingOffloader")  # the dot is literal
    assert expected_class("overlay", None) is None  # no plan.json naming it: not checked here
    assert expected_class("current", None) is EXPECTED_OFFLOADER_CLASS["current"]


def test_planned_case_omits_a_null_overlay_class_so_old_plans_keep_their_bytes():
    base = dict(label="current_g4_n1", implementation="current", offload_group_size=4, offload_num_in_group=1,
                offload_prefetch_step=1, offload_params=(), offload_backend="auto", repeats=1, expect_error=None,
                runtime="cpu", device="cpu", expected_runs=1, expected_failures=0)
    assert "overlay_class" not in PlannedCase(**base).model_dump_json()
    c = PlannedCase(**{**base, "label": "overlay_g4_n1", "implementation": "overlay", "overlay_class": "a.b:C"})
    assert '"overlay_class":"a.b:C"' in c.model_dump_json()
