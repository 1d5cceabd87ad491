"""``offload_params`` patterns are checked at planning against the names vLLM's modules carry."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from conf.schema_stack import ModelConfig
from runners.errors import EXIT_CONFIG, PlanError
from runners.planning.layer_names import layer_param_names
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg, compose_real

NOTHING = "phases.same_runtime.points=[{g:2,n:1,params:[nonexistent]}]"


def _points(*params: str) -> str:
    return f"phases.same_runtime.points=[{{g:2,n:1,params:[{','.join(params)}]}}]"


def test_a_pattern_matching_no_parameter_is_refused_naming_it_and_the_names() -> None:
    with pytest.raises(PlanError, match=r"offload_params pattern 'nonexistent' matches no parameter.*"
                                        r"mlp\.gate_up_proj\.weight.*self_attn\.qkv_proj\.weight"):
        plan(compose_real(NOTHING, "dry_run=true"))


@pytest.mark.parametrize("pattern", ["gate_up_proj", "mlp", "self_attn.qkv_proj", "down_proj.weight"])
def test_patterns_that_name_vllm_parameters_plan(pattern: str) -> None:
    assert plan(compose_real(_points(pattern), "dry_run=true"))


def test_a_checkpoint_name_that_vllm_fuses_is_refused_with_the_fused_name() -> None:
    with pytest.raises(PlanError, match=r"'q_proj' matches no parameter.*vLLM fuses it: use 'qkv_proj'"):
        plan(compose_real(_points("mlp", "q_proj")))


def test_a_near_miss_is_refused_with_the_nearest_segment() -> None:
    with pytest.raises(PlanError, match=r"'gate_up' .*nearest: gate_up_proj"):
        plan(compose_real(_points("gate_up")))


def test_names_come_from_the_weight_headers_when_the_checkpoint_exists(tmp_path: Path) -> None:
    header = {"model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]},
              "model.layers.0.self_attn.k_proj.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [16, 24]},
              "model.embed_tokens.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [24, 32]}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(32))
    (tmp_path / "config.json").write_text("{}")
    found = layer_param_names(ModelConfig(name="m", path=str(tmp_path), num_layers=1))
    assert found.names == ("mlp.gate_up_proj.weight", "self_attn.qkv_proj.weight")
    assert "weight headers" in found.source


def test_names_come_from_the_architecture_where_no_checkpoint_is_at_hand() -> None:
    cfg = compose_real("+experiment=qwen7b_choose", "need_gib=3", "dry_run=true")
    found = layer_param_names(cfg.model)
    assert "self_attn.qkv_proj.bias" in found.names and "model.config_json" in found.source


def test_a_model_whose_names_cannot_be_known_refuses_patterns() -> None:
    with pytest.raises(PlanError, match=r"offload_params cannot be checked: no model directory at hand"):
        layer_param_names(ModelConfig(name="m", path="/nonexistent/model", num_layers=2))


def test_the_matrix_and_pins_entry_points_exit_2_before_anything_is_written(tmp_path: Path, capsys) -> None:
    from runners.matrix import run_matrix
    from runners.pins import main as pins_main

    cfg = compose_cfg(NOTHING, f"results_root={tmp_path}")
    assert run_matrix(cfg, [NOTHING]) == EXIT_CONFIG
    out = pins_main([NOTHING, "--out", str(tmp_path / "pins.yaml")])
    captured = capsys.readouterr()
    assert out == EXIT_CONFIG and "'nonexistent'" in captured.err
    assert "'nonexistent'" in captured.out
    assert list(tmp_path.iterdir()) == []


def test_an_accuracy_phase_is_checked_against_its_own_model() -> None:
    cfg = compose_real("+experiment=reproduce", "phases.accuracy.points=[{g:2,n:1,params:[nonexist]}]")
    with pytest.raises(PlanError, match=r"phase 'accuracy'.*'nonexist'.*tiny-answering-qwen2-l4-h128/\*\.safetensors"):
        plan(cfg)
