"""The offloader, the evidence hook and layer-byte accounting on a generated Llama-architecture model, beside Qwen2.

Torch only, no engine: a small decoder stack with vLLM's module tree (fused ``self_attn.qkv_proj``,
``mlp.gate_up_proj``; Llama without any bias, Qwen2 with q/k/v biases; grouped-query attention) is built from
a ``config.json`` dict, written as a Hugging Face checkpoint (unfused names, as ``LlamaForCausalLM`` saves it),
wrapped by the project's offloader and run forward, as ``offload_tools.bench`` stacks layers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

import runners.incase.evidence_hook.offload_evidence_hook as hook
from offload.selection import select_offload_layers as offloaded_layers
from offload_tools.layer_bytes import (layer_bytes_from_config, layer_bytes_from_safetensors,
                                       layer_param_names_from_safetensors, layer_param_shapes)
from results_schema.records.models import RuntimeEvidence
from results_schema.records.identity import OffloadSetting
from results_schema.rules.evidence_rule import evidence_problems

REPO = Path(__file__).resolve().parents[2]

# SmolLM2-135M's proportions (conf/model/configs/smollm2_135m.json: hidden 576, 9 / 3 heads, head_dim 64,
# intermediate 1536, no bias, tied embeddings) at hidden 48; Qwen2 the same with its q/k/v biases.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 48, "intermediate_size": 128,
         "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 6,
         "attention_bias": False, "mlp_bias": False, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
         "torch_dtype": "bfloat16", "vocab_size": 64}
QWEN2 = {**LLAMA, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_bias": None}
ARCHS = {"llama": LLAMA, "qwen2": QWEN2}


class Decoder(nn.Module):
    """One decoder layer with vLLM's parameter names (``LlamaDecoderLayer`` / ``Qwen2DecoderLayer``)."""

    def __init__(self, cfg: dict, gen: torch.Generator) -> None:
        super().__init__()
        h, i, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
        self.nq, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], hd
        qkv_bias = cfg["model_type"] == "qwen2"
        self.input_layernorm = nn.Module()
        self.input_layernorm.weight = nn.Parameter(1 + 0.1 * torch.randn(h, generator=gen), requires_grad=False)
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = nn.Linear(h, (self.nq + 2 * self.nkv) * hd, bias=qkv_bias)
        self.self_attn.o_proj = nn.Linear(self.nq * hd, h, bias=False)
        self.post_attention_layernorm = nn.Module()
        self.post_attention_layernorm.weight = nn.Parameter(1 + 0.1 * torch.randn(h, generator=gen),
                                                            requires_grad=False)
        self.mlp = nn.Module()
        self.mlp.gate_up_proj = nn.Linear(h, 2 * i, bias=False)
        self.mlp.down_proj = nn.Linear(i, h, bias=False)
        for p in self.parameters():
            p.requires_grad_(False)
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        n = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * self.input_layernorm.weight
        q, k, v = self.self_attn.qkv_proj(n).split([self.nq * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
        q = q.view(t, self.nq, self.hd).transpose(0, 1)
        k = k.view(t, self.nkv, self.hd).transpose(0, 1).repeat_interleave(self.nq // self.nkv, 0)
        v = v.view(t, self.nkv, self.hd).transpose(0, 1).repeat_interleave(self.nq // self.nkv, 0)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.self_attn.o_proj(a.transpose(0, 1).reshape(t, -1))
        n = x * self.post_attention_layernorm.weight
        g, u = self.mlp.gate_up_proj(n).chunk(2, -1)
        return x + self.mlp.down_proj(torch.nn.functional.silu(g) * u)


def stack(cfg: dict, seed: int = 0) -> list[Decoder]:
    gen = torch.Generator().manual_seed(seed)
    return [Decoder(cfg, gen) for _ in range(cfg["num_hidden_layers"])]


def write_checkpoint(cfg: dict, layers: list[Decoder], out: Path) -> Path:
    """The stack as a Hugging Face checkpoint: q/k/v and gate/up unfused, ``model.layers.<i>.`` names."""
    tensors: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(layers):
        p = f"model.layers.{i}."
        q, k, v = layer.self_attn.qkv_proj.weight.split([layer.nq * layer.hd, layer.nkv * layer.hd,
                                                         layer.nkv * layer.hd])
        parts = {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
                 "self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
                 "mlp.gate_proj.weight": layer.mlp.gate_up_proj.weight.chunk(2)[0],
                 "mlp.up_proj.weight": layer.mlp.gate_up_proj.weight.chunk(2)[1],
                 "mlp.down_proj.weight": layer.mlp.down_proj.weight,
                 "input_layernorm.weight": layer.input_layernorm.weight,
                 "post_attention_layernorm.weight": layer.post_attention_layernorm.weight}
        if layer.self_attn.qkv_proj.bias is not None:
            qb, kb, vb = layer.self_attn.qkv_proj.bias.split([layer.nq * layer.hd, layer.nkv * layer.hd,
                                                              layer.nkv * layer.hd])
            parts.update({"self_attn.q_proj.bias": qb, "self_attn.k_proj.bias": kb, "self_attn.v_proj.bias": vb})
        tensors.update({p + k: t.contiguous().clone() for k, t in parts.items()})
    tensors["model.embed_tokens.weight"] = torch.zeros(cfg["vocab_size"], cfg["hidden_size"], dtype=torch.bfloat16)
    tensors["model.norm.weight"] = torch.ones(cfg["hidden_size"], dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg))
    return out / "model.safetensors"


def run(layers: list[Decoder], x: torch.Tensor, forwards: int = 3) -> torch.Tensor:
    with torch.inference_mode():
        for _ in range(forwards):
            y = x
            for layer in layers:
                y = layer(y)
    return y


@pytest.fixture
def evidence_path(monkeypatch, tmp_path):
    monkeypatch.setattr(hook, "_state", hook._State())
    path = tmp_path / "evidence" / "case-r0.json"
    monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(path))
    monkeypatch.setenv("OFFLOAD_IMPL", "current")
    return path


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_layer_shapes_accounted_from_config_are_the_modules_and_the_checkpoint_headers(arch, tmp_path):
    cfg = ARCHS[arch]
    layers = stack(cfg)
    module_shapes = {n: tuple(p.shape) for n, p in layers[0].named_parameters()}
    assert module_shapes == layer_param_shapes(cfg)
    per_layer = sum(p.numel() * p.element_size() for p in layers[0].parameters())
    assert layer_bytes_from_config(cfg) == per_layer
    st = write_checkpoint(cfg, layers, tmp_path / arch)
    assert layer_bytes_from_safetensors([st]) == {i: per_layer for i in range(cfg["num_hidden_layers"])}
    assert layer_param_names_from_safetensors([st]) == set(module_shapes)
    if arch == "llama":
        assert not any(n.endswith(".bias") for n in module_shapes)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize(("g", "n", "p", "params"), [(2, 1, 1, ()), (3, 2, 2, ()), (1, 1, 1, ("mlp",))])
def test_offloader_on_the_architecture_gives_equal_outputs_and_evidence_that_passes_the_rule(
        arch, g, n, p, params, evidence_path, capsys, tmp_path):
    from offload.prefetch import CurrentPrefetchOffloader

    cfg = ARCHS[arch]
    x = torch.randn(5, cfg["hidden_size"], generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    expected = run(stack(cfg), x)
    off = CurrentPrefetchOffloader(g, n, p, offload_params=list(params))
    hook.observe(off)
    wrapped = off.wrap_modules(iter(stack(cfg)), prefix="model.layers")
    off.post_init()
    assert torch.equal(run(wrapped, x), expected)

    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("OFFLOAD_EVIDENCE ")]
    assert len(lines) == 1, lines
    ev = RuntimeEvidence.model_validate_json(evidence_path.read_text())
    layers_n = cfg["num_hidden_layers"]
    chosen = tuple(offloaded_layers(layers_n, g, n))
    assert ev.selected_layers == chosen and ev.wrapped_layers == chosen and ev.num_layers == layers_n
    st = write_checkpoint(cfg, stack(cfg), tmp_path / "ckpt")
    per_layer = layer_bytes_from_safetensors([st], offload_params=params)
    assert ev.offloaded_bytes == sum(per_layer[i] for i in chosen)
    assert ev.offloaded_bytes == len(chosen) * layer_bytes_from_config(cfg, offload_params=params)
    setting = OffloadSetting(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=p,
                             offload_params=params)
    problems = evidence_problems(ev, implementation="current", setting=setting,
                                 select=offloaded_layers, config_layers=layers_n)
    assert problems == []


def test_smollm2_config_accounts_its_published_layer_bytes_and_kv():
    from offload_tools.layer_bytes import kv_bytes_per_token

    cfg = json.loads((REPO / "conf" / "model" / "configs" / "smollm2_135m.json").read_text())
    assert layer_bytes_from_config(cfg) == 7_080_192  # 3,540,096 bf16 parameters per layer
    assert kv_bytes_per_token(cfg) == 30 * 2 * 3 * 64 * 2
