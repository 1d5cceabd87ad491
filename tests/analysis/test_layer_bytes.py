"""Claims about layer bytes from config.json arithmetic and safetensors headers."""

from __future__ import annotations

import pytest

from offload_tools.layer_bytes import (
    layer_bytes_from_config,
    layer_bytes_from_safetensors,
    read_safetensors_header,
)
from tests.support.synthetic import TINY_CONFIG, write_model_dir
from offload.selection import select_offload_layers

QWEN25_7B = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
    "num_key_value_heads": 4, "num_hidden_layers": 28, "torch_dtype": "bfloat16",
}


def test_qwen25_7b_layer_is_466115584_bytes():
    assert layer_bytes_from_config(QWEN25_7B) == 466_115_584
    assert layer_bytes_from_config(QWEN25_7B, "float16") == 466_115_584
    assert layer_bytes_from_config(QWEN25_7B, "float32") == 2 * 466_115_584


@pytest.mark.parametrize(("g", "n", "expected"), [(28, 1, 466_115_584), (14, 1, 932_231_168)])
def test_qwen25_7b_points_release_layer_multiples(g, n, expected):
    assert len(select_offload_layers(28, g, n)) * layer_bytes_from_config(QWEN25_7B) == expected


def test_safetensors_headers_agree_with_config_arithmetic(tmp_path):
    d = write_model_dir(tmp_path / "m")
    per = layer_bytes_from_safetensors([d / "model.safetensors"])
    assert set(per) == set(range(TINY_CONFIG["num_hidden_layers"]))
    assert set(per.values()) == {layer_bytes_from_config(TINY_CONFIG)}
    assert "model.layers.0.self_attn.q_proj.weight" in read_safetensors_header(d / "model.safetensors")


def test_offload_params_filter_uses_vllm_fused_names(tmp_path):
    d = write_model_dir(tmp_path / "m")
    mlp_cfg = layer_bytes_from_config(TINY_CONFIG, offload_params=("mlp",))
    mlp_st = layer_bytes_from_safetensors([d / "model.safetensors"], offload_params=("mlp",))[0]
    assert mlp_cfg == mlp_st == (2 * 64 * 32 + 32 * 64) * 2
    assert layer_bytes_from_config(TINY_CONFIG, offload_params=("gate_up_proj",)) == 2 * 64 * 32 * 2


def test_unsupported_architecture_raises():
    with pytest.raises(ValueError, match="unsupported model_type 'mixtral'"):
        layer_bytes_from_config({**QWEN25_7B, "model_type": "mixtral"})


def test_truncated_safetensors_header_raises(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(ValueError, match="truncated"):
        read_safetensors_header(p)
