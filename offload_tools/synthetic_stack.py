"""Synthetic decoder stack with Qwen2.5-7B layer shapes (torch only), for :mod:`offload_tools.gpu_check_torch`.

28 layers; hidden 3584, intermediate 18944, 28 query / 4 KV heads of 128, q/k/v bias;
233,057,792 parameters = 466,115,584 bytes per layer in bf16, vLLM's parameter names
(``self_attn.qkv_proj``, ``mlp.gate_up_proj``, ...). Attention is causal over the step's tokens
(no KV cache, no paged attention).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


QWEN25_7B = dict(hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128, layers=28)
QWEN25_7B_LAYER_BYTES_BF16 = 466_115_584



@dataclass(frozen=True)
class Shapes:
    """Layer shapes; ``width_divisor`` divides head_dim and intermediate (1 = Qwen2.5-7B)."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int

    @classmethod
    def qwen25_7b(cls, layers: int = 28, width_divisor: int = 1) -> Shapes:
        q = QWEN25_7B
        hd = q["head_dim"] // width_divisor
        if hd < 1 or q["intermediate"] // width_divisor < 1:
            raise ValueError(f"--width-divisor ({width_divisor}) leaves no width (allowed: 1..128)")
        return cls(q["heads"] * hd, q["intermediate"] // width_divisor, q["heads"], q["kv_heads"], hd, layers)

    def layer_params(self) -> int:
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        return qkv * self.hidden + qkv + self.heads * self.head_dim * self.hidden \
            + 2 * self.intermediate * self.hidden + self.hidden * self.intermediate + 2 * self.hidden


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class _Linear(nn.Module):
    def __init__(self, out_f: int, in_f: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_f, in_f), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_f), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class _Attn(nn.Module):
    def __init__(self, s: Shapes) -> None:
        super().__init__()
        self.s = s
        self.qkv_proj = _Linear((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden, bias=True)
        self.o_proj = _Linear(s.hidden, s.heads * s.head_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, t = self.s, x.shape[0]
        q, k, v = self.qkv_proj(x).split([s.heads * s.head_dim, s.kv_heads * s.head_dim,
                                          s.kv_heads * s.head_dim], dim=-1)
        q = q.view(t, s.heads, s.head_dim).transpose(0, 1)
        rep = s.heads // s.kv_heads
        k = k.view(t, s.kv_heads, s.head_dim).transpose(0, 1).repeat_interleave(rep, 0)
        v = v.view(t, s.kv_heads, s.head_dim).transpose(0, 1).repeat_interleave(rep, 0)
        scores = (q @ k.transpose(1, 2)).float() * (s.head_dim ** -0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        p = scores.masked_fill(mask, float("-inf")).softmax(-1).to(x.dtype)
        return self.o_proj((p @ v).transpose(0, 1).reshape(t, s.heads * s.head_dim))


class _Mlp(nn.Module):
    def __init__(self, s: Shapes) -> None:
        super().__init__()
        self.gate_up_proj = _Linear(2 * s.intermediate, s.hidden, bias=False)
        self.down_proj = _Linear(s.hidden, s.intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(g) * u)


class DecoderLayer(nn.Module):
    """Qwen2-style pre-norm decoder layer; ``forward(hidden_states[T, hidden]) -> same shape``."""

    def __init__(self, s: Shapes) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden)
        self.self_attn = _Attn(s)
        self.post_attention_layernorm = RMSNorm(s.hidden)
        self.mlp = _Mlp(s)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        h = hidden_states + self.self_attn(self.input_layernorm(hidden_states))
        return h + self.mlp(self.post_attention_layernorm(h))


class Stack(nn.Module):
    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def build_reference(s: Shapes, device: torch.device, dtype: torch.dtype, seed: int = 0) -> list[DecoderLayer]:
    """``s.layers`` layers with seeded random weights (scaled so activations stay finite).

    Each layer is created on ``device`` (no host copy of 28 x 0.93 GB in fp32 at full scale); the
    weights are drawn there from one seeded generator in float32 and rounded to ``dtype``.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    layers = []
    with torch.no_grad():
        for _ in range(s.layers):
            with torch.device(device):
                layer = DecoderLayer(s)
            layer = layer.to(dtype=dtype)
            for name, p in layer.named_parameters():
                if name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                else:
                    fan_in = p.shape[-1] if p.dim() > 1 else s.hidden
                    p.copy_(torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
                            .mul_(fan_in ** -0.5).to(dtype))
            layers.append(layer)
    return layers
