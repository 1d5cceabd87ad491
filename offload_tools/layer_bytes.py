"""Bytes of one decoder layer, from ``config.json`` shape arithmetic and from safetensors headers.

Used by the runner while a run goes (choose-then-confirm: released bytes of every setting) and by
analysis afterwards. What is modelled: dense decoder layers of Qwen2 / Qwen2.5 / Qwen3 / Llama / Mistral
shaped models (attention q/k/v/o projections with optional biases, optional
per-head q/k RMSNorm (Qwen3), gated MLP gate/up/down, two RMSNorm weights per
layer) in one dtype. The Qwen2.5-7B shape (hidden 3584, intermediate 18944,
28 heads, 4 KV heads, head_dim 128, q/k/v biases, bf16) gives 233,057,792
parameters = 466,115,584 bytes per layer (shared/cases/README.md).

Safetensors headers are read by parsing the format directly (8-byte
little-endian header length, then a JSON header with ``dtype``/``shape``/
``data_offsets`` per tensor), so neither torch nor tensor data is touched.

What is deliberately not modelled: mixture-of-experts layers, quantized
checkpoints, tied/shared parameters across layers (``config.json`` arithmetic
raises for unknown architectures rather than guessing).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from offload.matching import matches_offload_params

DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4, "F32": 4,
    "bfloat16": 2, "bf16": 2, "BF16": 2,
    "float16": 2, "half": 2, "fp16": 2, "F16": 2,
    "float64": 8, "F64": 8,
    "int8": 1, "I8": 1, "uint8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "int32": 4, "I32": 4, "int64": 8, "I64": 8, "int16": 2, "I16": 2, "BOOL": 1,
}
"""Element size in bytes per dtype name (torch names and safetensors codes)."""

_SUPPORTED = {"qwen2", "qwen3", "llama", "mistral"}
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def dtype_bytes(name: str) -> int:
    """Element size of a dtype name (``bfloat16``, ``torch.float16``, ``BF16``...).

    Raises:
        ValueError: unknown dtype.
    """
    key = name.removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def layer_param_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Parameter shapes of one decoder layer, with vLLM's fused names.

    vLLM fuses q/k/v into ``self_attn.qkv_proj`` and gate/up into
    ``mlp.gate_up_proj``; names here follow vLLM so that ``offload_params``
    segment matching sees what the offloader sees.

    Args:
        config: a Hugging Face ``config.json`` dict.

    Returns:
        ``{dotted_name: shape}`` relative to the layer module.

    Raises:
        ValueError: unsupported architecture (``model_type``) or missing keys.
    """
    model_type = config.get("model_type")
    if model_type not in _SUPPORTED:
        raise ValueError(f"layer bytes from config.json: unsupported model_type {model_type!r} ({sorted(_SUPPORTED)})")
    try:
        h = int(config["hidden_size"])
        inter = int(config["intermediate_size"])
        n_heads = int(config["num_attention_heads"])
    except KeyError as exc:
        raise ValueError(f"config.json lacks {exc.args[0]!r}") from exc
    n_kv = int(config.get("num_key_value_heads") or n_heads)
    head_dim = int(config.get("head_dim") or h // n_heads)
    q_out, kv_out = n_heads * head_dim, n_kv * head_dim
    qkv_bias = model_type == "qwen2" or bool(config.get("attention_bias", False))
    o_bias = bool(config.get("attention_bias", False)) and model_type != "qwen2"
    if config.get("num_experts") or config.get("num_local_experts"):
        raise ValueError("layer bytes from config.json: mixture-of-experts layers are not modelled")
    shapes: dict[str, tuple[int, ...]] = {
        "self_attn.qkv_proj.weight": (q_out + 2 * kv_out, h),
        "self_attn.o_proj.weight": (h, q_out),
        "mlp.gate_up_proj.weight": (2 * inter, h),
        "mlp.down_proj.weight": (h, inter),
        "input_layernorm.weight": (h,),
        "post_attention_layernorm.weight": (h,),
    }
    if qkv_bias:
        shapes["self_attn.qkv_proj.bias"] = (q_out + 2 * kv_out,)
    if o_bias:
        shapes["self_attn.o_proj.bias"] = (h,)
    if bool(config.get("mlp_bias", False)):
        shapes["mlp.gate_up_proj.bias"] = (2 * inter,)
        shapes["mlp.down_proj.bias"] = (h,)
    if model_type == "qwen3":
        shapes["self_attn.q_norm.weight"] = (head_dim,)
        shapes["self_attn.k_norm.weight"] = (head_dim,)
    return shapes


def config_dtype(config: dict) -> str:
    """The checkpoint dtype named in ``config.json`` (``torch_dtype`` or ``dtype``)."""
    name = config.get("torch_dtype") or config.get("dtype")
    if not name:
        raise ValueError("config.json names no dtype (torch_dtype/dtype)")
    return str(name)


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def layer_bytes_from_config(config: dict, dtype: str | None = None, offload_params: Sequence[str] = ()) -> int:
    """Bytes of one decoder layer by shape arithmetic.

    Args:
        config: ``config.json`` dict.
        dtype: dtype the weights are loaded in (vLLM ``dtype``); ``None``/``"auto"``
            uses the config's dtype.
        offload_params: ``offload_params`` segments; only matching parameters count.

    Returns:
        Bytes (int). Qwen2.5-7B shape, bf16: 466,115,584.
    """
    dt = config_dtype(config) if dtype in (None, "auto") else dtype
    size = dtype_bytes(dt)
    return sum(_numel(s) * size for name, s in layer_param_shapes(config).items()
               if matches_offload_params(name, offload_params))


def read_safetensors_header(path: Path | str) -> dict[str, dict]:
    """Parse a safetensors header without reading tensor data.

    Format: 8-byte little-endian unsigned header length, then that many bytes
    of JSON: ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}``.

    Raises:
        ValueError: truncated file or implausible header length.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > 100_000_000:
            raise ValueError(f"{path}: implausible safetensors header length {n}")
        raw = fh.read(n)
    if len(raw) != n:
        raise ValueError(f"{path}: truncated safetensors header ({len(raw)} of {n} bytes)")
    header = json.loads(raw)
    header.pop("__metadata__", None)
    return header


_FUSE = (
    (".q_proj.", ".qkv_proj."), (".k_proj.", ".qkv_proj."), (".v_proj.", ".qkv_proj."),
    (".gate_proj.", ".gate_up_proj."), (".up_proj.", ".gate_up_proj."),
)


def vllm_param_name(name: str) -> str:
    """A checkpoint parameter name as vLLM's module carries it: ``q/k/v_proj`` -> ``qkv_proj``,
    ``gate/up_proj`` -> ``gate_up_proj`` (``mlp.up_proj.weight`` -> ``mlp.gate_up_proj.weight``)."""
    for a, b in _FUSE:
        name = name.replace(a, b)
    return name


def layer_param_names_from_safetensors(files: Sequence[Path | str]) -> set[str]:
    """Parameter names of the decoder layers in safetensors headers, relative to the layer, as vLLM names them
    (:func:`vllm_param_name`): ``self_attn.qkv_proj.weight``, ``mlp.gate_up_proj.weight``, ...

    Raises:
        ValueError: a file whose header does not parse (:func:`read_safetensors_header`).
    """
    out: set[str] = set()
    for f in files:
        for name in read_safetensors_header(f):
            if (m := _LAYER_RE.search(name)) is not None:
                out.add(vllm_param_name(name[m.end():]))
    return out


def safetensors_files(model_dir: Path | str) -> list[Path]:
    """The checkpoint's safetensors files (sorted)."""
    return sorted(Path(model_dir).glob("*.safetensors"))


def layer_bytes_from_safetensors(
    files: Sequence[Path | str], dtype: str | None = None, offload_params: Sequence[str] = ()
) -> dict[int, int]:
    """Bytes per decoder layer index from safetensors headers.

    Args:
        files: checkpoint shards.
        dtype: load dtype; ``None``/``"auto"`` keeps each tensor's stored size
            (``data_offsets``), otherwise element count x the dtype's size.
        offload_params: only parameters whose vLLM (fused) name segment-matches count.

    Returns:
        ``{layer_index: bytes}`` for every layer with at least one tensor.
    """
    out: dict[int, int] = {}
    size = None if dtype in (None, "auto") else dtype_bytes(dtype)
    for f in files:
        for name, meta in read_safetensors_header(f).items():
            m = _LAYER_RE.search(name)
            if not m:
                continue
            rel = vllm_param_name(name[m.end():])
            if not matches_offload_params(rel, offload_params):
                continue
            if size is None:
                start, end = meta["data_offsets"]
                nbytes = int(end) - int(start)
            else:
                nbytes = _numel(meta["shape"]) * size
            idx = int(m.group(1))
            out[idx] = out.get(idx, 0) + nbytes
    return out


def load_config(model_dir: Path | str) -> dict:
    """Read ``<model_dir>/config.json``."""
    return json.loads((Path(model_dir) / "config.json").read_text())


def kv_bytes_per_token(config: dict, dtype: str | None = None) -> int:
    """KV-cache bytes one token occupies across all layers: ``2 * layers * kv_heads * head_dim * dtype bytes``.

    Args:
        config: ``config.json`` dict (``num_hidden_layers``, ``num_key_value_heads``, ``head_dim``).
        dtype: KV-cache dtype; ``None``/``"auto"`` uses the model dtype.
    """
    h = int(config["hidden_size"])
    n_heads = int(config["num_attention_heads"])
    n_kv = int(config.get("num_key_value_heads") or n_heads)
    head_dim = int(config.get("head_dim") or h // n_heads)
    dt = config_dtype(config) if dtype in (None, "auto") else dtype
    return 2 * int(config["num_hidden_layers"]) * n_kv * head_dim * dtype_bytes(dt)
