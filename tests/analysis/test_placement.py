"""``analysis.validation.placement``: overlap of two cases of one phase on one node (no Ray needed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from analysis.validation.placement import check_placements, placement_markdown
from results_schema.records.placement import CasePlacement


def _p(label: str, node: str, start: float, end: float, *, sharing: str = "per_node", kind: str = "performance",
       accel: tuple[str, ...] = (), phase: str = "same_runtime") -> CasePlacement:
    return CasePlacement(phase=phase, label=label, implementation="baseline" if label == "baseline" else "current",
                         repeat=0, attempt=0, kind=kind, executor="ray", sharing=sharing, hostname=f"h-{node}",
                         node_id=node * 8, device="cpu", accelerator_ids=accel, start_unix_s=start,
                         end_unix_s=end, times_from="node", outcome="finished")


def test_back_to_back_on_one_node_and_parallel_on_two_nodes_pass() -> None:
    ps = [_p("baseline", "a", 0, 10), _p("g8", "a", 10, 20), _p("g4", "b", 0, 20)]
    assert check_placements(ps) == []
    md = "\n".join(placement_markdown(ps))
    assert "Overlap check: passed" in md and "per_node" in md and "Parallel placement" not in md


def test_overlap_on_one_node_is_an_error_naming_both_cases() -> None:
    f = check_placements([_p("baseline", "a", 0, 10), _p("g8", "a", 9.5, 20)])
    assert [(x.code, x.severity) for x in f] == [("placement_overlap", "error")]
    assert "baseline r0" in f[0].message and "g8 r0" in f[0].message and "0.5 s" in f[0].message
    assert "FAILED, 1 overlap(s)" in "\n".join(placement_markdown([_p("baseline", "a", 0, 10), _p("g8", "a", 9, 20)]))


def test_per_accelerator_overlap_is_a_warning_and_flagged_but_same_accelerator_is_an_error() -> None:
    ps = [_p("baseline", "a", 0, 10, sharing="per_accelerator", accel=("0",)),
          _p("g8", "a", 5, 20, sharing="per_accelerator", accel=("1",))]
    assert [(x.code, x.severity) for x in check_placements(ps)] == [("shared_node", "warning")]
    assert "Parallel placement" in "\n".join(placement_markdown(ps))
    same = [ps[0], ps[1].model_copy(update={"accelerator_ids": ("0",)})]
    assert [x.severity for x in check_placements(same)] == ["error"]


def test_mixed_sharing_in_one_phase_is_an_error_and_accuracy_may_overlap() -> None:
    f = check_placements([_p("baseline", "a", 0, 10), _p("g8", "b", 0, 10, sharing="per_accelerator")])
    assert [x.code for x in f] == ["mixed_sharing"]
    assert check_placements([_p("baseline", "a", 0, 10, kind="accuracy"), _p("g8", "a", 1, 9, kind="accuracy")]) == []


def test_model_rejects_end_before_start_and_cause_without_loss() -> None:
    with pytest.raises(ValidationError, match="end_unix_s"):
        _p("baseline", "a", 10, 5)
    with pytest.raises(ValidationError, match="cause"):
        _p("baseline", "a", 0, 1).model_validate({**_p("baseline", "a", 0, 1).model_dump(), "cause": "x"})
