"""offload_params segment matching, exactly as upstream vLLM (cases README)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.matching import matches_offload_params, select_param_names

NAME = "mlp.experts.w2_weight"


@pytest.mark.parametrize("segment", ["experts", "experts.w2_weight", "mlp", "w2_weight", "mlp.experts"])
def test_whole_segments_match(segment):
    assert matches_offload_params(NAME, {segment})


@pytest.mark.parametrize("segment", ["expert", "w2", "xperts", "experts.w2", "mlp.expert"])
def test_partial_segments_do_not_match(segment):
    assert not matches_offload_params(NAME, {segment})


def test_weight_does_not_match_its_scale():
    assert matches_offload_params("mlp.experts.w13_weight", {"w13_weight"})
    assert not matches_offload_params("mlp.experts.w13_weight_scale", {"w13_weight"})


def test_empty_segment_set_selects_everything():
    assert matches_offload_params(NAME, ())


def test_prefix_takes_part_in_matching():
    assert matches_offload_params("blocks.0.attn.qkv.weight", {"visual"}, prefix="visual")
    assert not matches_offload_params("blocks.0.attn.qkv.weight", {"visual"})


def test_select_param_names_keeps_order_and_filters():
    names = ["self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight"]
    assert select_param_names(names, {"mlp"}) == names[1:3]
    assert select_param_names(names, ()) == names


_seg = st.text(alphabet="abcdw_12", min_size=1, max_size=6)


@given(st.lists(_seg, min_size=1, max_size=5), st.sets(st.lists(_seg, min_size=1, max_size=3).map(".".join), max_size=3))
def test_agrees_with_upstream_expression(parts, segments):
    name = ".".join(parts)
    upstream = (not segments) or any(f".{p}." in f".{name}." for p in segments)
    assert matches_offload_params(name, segments) == upstream
