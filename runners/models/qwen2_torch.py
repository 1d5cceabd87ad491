"""A Qwen2 decoder in plain torch, with Hugging Face's parameter names, for training small models here.

What is modelled: ``Qwen2ForCausalLM``'s forward pass -- token embedding, per layer
RMSNorm -> grouped-query self-attention (q/k/v with bias, o without, rotary position
embedding in the "rotate half" layout, causal) -> residual -> RMSNorm -> SwiGLU MLP ->
residual, final RMSNorm, untied ``lm_head``. Parameter names equal the checkpoint names
(``model.layers.0.self_attn.q_proj.weight``, ...), so ``state_dict()`` is a Qwen2
checkpoint that vLLM and ``transformers`` load. Sources: ``transformers``
``models/qwen2/modeling_qwen2.py`` and vLLM ``model_executor/models/qwen2.py``
(checked by ``tests/runners/test_answering_model.py`` against ``transformers``' logits).

What is deliberately not modelled: KV caches, sliding windows, attention masks other than
causal (training batches are right-padded, so padding never precedes a real token),
dropout, rope scaling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Qwen2Shape:
    """Shapes of the decoder (``config.json`` fields of the same names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Qwen2Shape:
        """The shape of a Qwen2 ``config.json`` dict."""
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__})


class RMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * weight`` (Qwen2RMSNorm)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of shape ``(seq_len, head_dim)``: ``inv_freq = theta^(-2i/head_dim)``, halves repeated."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    """Grouped-query causal self-attention with rotary embeddings (Qwen2Attention)."""

    def __init__(self, s: Qwen2Shape) -> None:
        super().__init__()
        d = s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * d, bias=True)
        self.k_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * d, bias=True)
        self.v_proj = nn.Linear(s.hidden_size, s.num_key_value_heads * d, bias=True)
        self.o_proj = nn.Linear(s.num_attention_heads * d, s.hidden_size, bias=False)
        self.shape = s

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple[Any, Any]]:
        """Attention output and this call's rotated ``(k, v)``; ``past``: keys/values of earlier positions
        (batch 1, broadcast over ``x``'s batch) that every position of ``x`` also attends to."""
        b, t, _ = x.shape
        s, d = self.shape, self.shape.head_dim
        q = self.q_proj(x).view(b, t, s.num_attention_heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, s.num_key_value_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, s.num_key_value_heads, d).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = s.num_attention_heads // s.num_key_value_heads
        kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if past is None:
            out = F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        else:
            pk, pv = (p.repeat_interleave(rep, dim=1).expand(b, -1, -1, -1) for p in past)
            n = pk.shape[2]
            mask = torch.cat((torch.ones(t, n, dtype=torch.bool), torch.ones(t, t, dtype=torch.bool).tril()), dim=1)
            out = F.scaled_dot_product_attention(q, torch.cat((pk, kr), 2), torch.cat((pv, vr), 2), attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), (k, v)


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` (Qwen2MLP)."""

    def __init__(self, s: Qwen2Shape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals (Qwen2DecoderLayer)."""

    def __init__(self, s: Qwen2Shape) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = MLP(s)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple[Any, Any]]:
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Backbone(nn.Module):
    """Embedding, decoder layers and the final norm (``model.*`` in the checkpoint)."""

    def __init__(self, s: Qwen2Shape) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s) for _ in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)


class Qwen2LM(nn.Module):
    """Qwen2 causal LM: ``forward(ids)`` of shape ``(batch, seq)`` -> logits ``(batch, seq, vocab)``."""

    def __init__(self, s: Qwen2Shape) -> None:
        super().__init__()
        self.shape = s
        self.model = Backbone(s)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Normal(0, std) matrices and embeddings, zero biases, unit norms; drawn in ``named_parameters`` order."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def init_offset_head(self, layer: int, head: int, offset: int, scale: float) -> None:
        """Make query head ``head`` of ``layer`` attend ``offset`` positions back, through its q/k biases only.

        The key bias of the head's KV group is ``scale`` on the first half of every rotary pair
        and the query bias is ``scale * (cos(-offset*theta_i), sin(-offset*theta_i))`` per pair, so
        after the rotary embedding their product is ``scale^2 * sum_i cos((m - n - offset) * theta_i)``:
        largest at distance ``m - n = offset`` (the weights stay as drawn; training may change all of it).
        """
        s = self.shape
        d, half = s.head_dim, s.head_dim // 2
        block = self.model.layers[layer]
        assert isinstance(block, DecoderLayer)
        attn = block.self_attn
        theta = 1.0 / (s.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        group = head // (s.num_attention_heads // s.num_key_value_heads)
        with torch.no_grad():
            k = torch.zeros(d)
            k[:half] = scale
            attn.k_proj.bias[group * d:(group + 1) * d] = k
            attn.q_proj.bias[head * d:(head + 1) * d] = scale * torch.cat(((-offset * theta).cos(),
                                                                           (-offset * theta).sin()))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = self.shape
        cos, sin = rope_tables(ids.shape[1], s.head_dim, s.rope_theta)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x, _ = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))

    def forward_shared_prefix(self, prefix: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, T, vocab)`` of ``rest`` ``(batch, T)``, every row preceded by the same ``prefix`` ``(P,)``.

        Equal to ``forward(cat(prefix, rest_row))[P:]`` per row (causal attention: the prefix's
        states do not depend on what follows), with the prefix computed once for the batch.
        """
        s = self.shape
        p, t = prefix.shape[0], rest.shape[1]
        cos, sin = rope_tables(p + t, s.head_dim, s.rope_theta)
        xp, xr = self.model.embed_tokens(prefix[None]), self.model.embed_tokens(rest)
        for layer in self.model.layers:
            xp, kv = layer(xp, cos[:p], sin[:p])
            xr, _ = layer(xr, cos[p:], sin[p:], past=kv)
        return self.lm_head(self.model.norm(xr))

    @torch.no_grad()
    def greedy(self, prompt: list[int], stop_id: int, max_new: int) -> list[int]:
        """Greedy continuation of one prompt (no cache: one full forward per token), stopping after ``stop_id``."""
        ids = list(prompt)
        out: list[int] = []
        for _ in range(max_new):
            nxt = int(self(torch.tensor([ids]))[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
            if nxt == stop_id:
                break
        return out
