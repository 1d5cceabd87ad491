"""A need the device already covers: where the runtime reports its memory (CUDA, NPU), the probe baselines' total
minus peak used is free memory; a need within it is met without offload (``runners.orchestration.choose_decide``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from runners.orchestration.choose_decide import _Context, free_device_bytes, next_decision
from runners.planning.choose_plan import GIB, ChooseNeed, ModelSizes, need_bytes
from tests.runners.helpers import compose_cfg


def _rec(total: int | None, peak: int | None) -> SimpleNamespace:
    return SimpleNamespace(device_memory_total_bytes=total, device_memory_peak_load_bytes=peak)


def test_free_memory_is_the_smallest_total_minus_peak_over_the_baselines() -> None:
    assert free_device_bytes([_rec(80 * GIB, 60 * GIB), _rec(80 * GIB, 62 * GIB)]) == 18 * GIB


def test_no_free_memory_is_claimed_where_a_baseline_lacks_the_device_figures() -> None:
    assert free_device_bytes([_rec(None, None), _rec(None, None)]) is None  # the CPU runtime
    assert free_device_bytes([_rec(80 * GIB, 60 * GIB), _rec(None, 61 * GIB)]) is None


def _ctx(need: str, records: list[SimpleNamespace]) -> _Context:
    cfg = compose_cfg("+experiment=choose", need)
    sizes = ModelSizes((18_882_560,) * cfg.model.num_layers, 18_886_656, "test")
    known = ChooseNeed(*need_bytes(cfg), sizes)
    return _Context(cfg, Path("/nonexistent"), known, (100.0, 101.0), 4, None, set(), tuple(records))


def test_a_need_within_the_free_device_memory_is_met_without_offload() -> None:
    d = next_decision(_ctx("need_gib=0.05", [_rec(80 * GIB, 79 * GIB), _rec(80 * GIB, 79 * GIB)]), [])
    assert d is not None and d.stage == "unnecessary" and not d.chosen
    assert "offload unnecessary" in d.note and "1 GiB free" in d.note


def test_a_need_beyond_the_free_device_memory_is_not_declared_unnecessary() -> None:
    ctx = _ctx("need_gib=0.05", [_rec(80 * GIB, 80 * GIB - 1024), _rec(80 * GIB, 80 * GIB - 1024)])
    free = free_device_bytes(ctx.baseline_records)
    assert free == 1024
    # the next step reads the probe's measured points from the run directory: none here, so no decision yet
    assert next_decision(ctx, []) is None
