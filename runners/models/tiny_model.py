"""Deterministic builder of a tiny Qwen2-architecture causal LM, with no hub access.

Writes a Hugging Face model directory that vLLM loads like any Qwen2 checkpoint:
``config.json``, ``generation_config.json``, ``model.safetensors`` (bf16, random
weights from a seeded ``torch.Generator``), a byte-level BPE ``tokenizer.json``
(256 byte tokens + merges learnt from a fixed built-in corpus by a deterministic
greedy pair count, plus Qwen's special tokens), ``tokenizer_config.json`` with a
Qwen-style ChatML ``chat_template``, and ``SHA256SUMS``.

Same arguments -> byte-identical files (tested). The weights are random: the model produces fluent-looking
garbage; it exists to exercise the vLLM engine, offloading and the measurement pipeline, not to answer questions.

Defaults (hidden 128, intermediate 256, 4 heads, 2 KV heads, q/k/v biases, bf16): 295,936 bytes per layer.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from results_schema.codec.files import file_sha256

if TYPE_CHECKING:
    import torch

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Fixed corpus for the BPE merges: changing it changes the tokenizer (and its hash).
_CORPUS = (
    "The quick brown fox jumps over the lazy dog. "
    "Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May? "
    "Answer: Natalia sold 48/2 = 24 clips in May. Natalia sold 48+24 = 72 clips altogether. #### 72 "
    "Which of the following is correct? (A) the first (B) the second (C) the third (D) the fourth. "
    "offload group size prefetch step decoder layer weights host memory device memory throughput "
)


def layer_param_count(hidden_size: int, intermediate_size: int, num_heads: int, num_kv_heads: int,
                      head_dim: int) -> int:
    """Parameters of one Qwen2 decoder layer (q/k/v with bias, o without, gate/up/down, 2 norms).

    Source: ``transformers`` ``Qwen2Attention`` / ``Qwen2MLP`` / ``Qwen2RMSNorm`` shapes.
    """
    h, i = hidden_size, intermediate_size
    q = h * num_heads * head_dim + num_heads * head_dim
    kv = 2 * (h * num_kv_heads * head_dim + num_kv_heads * head_dim)
    o = num_heads * head_dim * h
    mlp = 3 * h * i
    norms = 2 * h
    return q + kv + o + mlp + norms


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2 byte-to-unicode table used by byte-level BPE (openai/gpt-2 ``encoder.py``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(
        range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _corpus_words(corpus: str) -> list[list[str]]:
    """The corpus split at spaces, each word after the first with its leading space (byte-level symbols)."""
    b2u = _byte_to_unicode()
    words = [[b2u[b] for b in w.encode("utf-8")] for w in corpus.split(" ") if w]
    return [[b2u[ord(" ")]] + w if k else w for k, w in enumerate(words)]


def _learn_merges(num_merges: int, words: list[list[str]] | None = None,
                  mergeable: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
    """Greedy BPE merges over ``words`` (default: the fixed corpus); ties broken lexicographically.

    ``mergeable(symbol)`` false for either symbol of a pair keeps that pair from ever merging
    (the answering model keeps digits as single-byte tokens this way).
    """
    counts = Counter(tuple(w) for w in (_corpus_words(_CORPUS) if words is None else words))
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, n in counts.items():
            for p in zip(w, w[1:], strict=False):
                if mergeable is None or (mergeable(p[0]) and mergeable(p[1])):
                    pairs[p] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        merged = best[0] + best[1]
        new_counts: Counter[tuple[str, ...]] = Counter()
        for w, n in counts.items():
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            new_counts[tuple(out)] += n
        counts = new_counts
    return merges


def build_tokenizer_json(num_merges: int = 64, words: list[list[str]] | None = None,
                         mergeable: Callable[[str], bool] | None = None) -> tuple[str, int]:
    """Return (tokenizer.json text, vocab size incl. special tokens).

    Args:
        num_merges: most BPE merges learnt.
        words: pre-tokenised corpus as byte-level symbol lists (default: the fixed built-in corpus).
        mergeable: see :func:`_learn_merges`.
    """
    b2u = _byte_to_unicode()
    vocab: dict[str, int] = {}
    for b in range(256):
        vocab[b2u[b]] = b
    merges = _learn_merges(num_merges, words, mergeable)
    for left, right in merges:
        tok = left + right
        if tok not in vocab:
            vocab[tok] = len(vocab)
    added = []
    for tok in SPECIAL_TOKENS:
        added.append({"id": len(vocab), "content": tok, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        vocab[tok] = len(vocab)
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False,
                  "vocab": {k: v for k, v in vocab.items() if k not in SPECIAL_TOKENS},
                  "merges": [[left, right] for left, right in merges]},
    }
    return json.dumps(spec, ensure_ascii=False, indent=1, sort_keys=False) + "\n", len(vocab)


def _check_shapes(num_layers: int, hidden_size: int, num_heads: int, num_kv_heads: int) -> None:
    if num_layers < 1 or hidden_size < 1 or num_heads < 1 or num_kv_heads < 1:
        raise ValueError(f"num_layers ({num_layers}), hidden_size ({hidden_size}), num_heads ({num_heads}) "
                         f"and num_kv_heads ({num_kv_heads}) must be >= 1")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads}) and "
                         f"num_heads by num_kv_heads ({num_kv_heads})")


def _model_config(*, num_layers: int, hidden_size: int, inter: int, num_heads: int, num_kv_heads: int,
                  vocab_size: int, max_position_embeddings: int, init_std: float) -> dict[str, Any]:
    """``config.json`` of the Qwen2 checkpoint (``bos`` = ``<|endoftext|>``, ``eos`` = ``<|im_end|>``)."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": vocab_size - 3,
        "eos_token_id": vocab_size - 1,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": init_std,
        "intermediate_size": inter,
        "max_position_embeddings": max_position_embeddings,
        "max_window_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers,
        "num_key_value_heads": num_kv_heads,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }


def _weights(cfg: dict[str, Any], *, seed: int, init_std: float) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, drawn in a fixed order from one seeded generator (bf16)."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * init_std).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    hidden_size, inter, vocab_size = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head_dim = hidden_size // cfg["num_attention_heads"]
    q_out, kv_out = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    tensors: dict[str, torch.Tensor] = {"model.embed_tokens.weight": rnd(vocab_size, hidden_size)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = rnd(q_out, hidden_size)
        tensors[p + "self_attn.q_proj.bias"] = rnd(q_out)
        tensors[p + "self_attn.k_proj.weight"] = rnd(kv_out, hidden_size)
        tensors[p + "self_attn.k_proj.bias"] = rnd(kv_out)
        tensors[p + "self_attn.v_proj.weight"] = rnd(kv_out, hidden_size)
        tensors[p + "self_attn.v_proj.bias"] = rnd(kv_out)
        tensors[p + "self_attn.o_proj.weight"] = rnd(hidden_size, q_out)
        tensors[p + "mlp.gate_proj.weight"] = rnd(inter, hidden_size)
        tensors[p + "mlp.up_proj.weight"] = rnd(inter, hidden_size)
        tensors[p + "mlp.down_proj.weight"] = rnd(hidden_size, inter)
        tensors[p + "input_layernorm.weight"] = ones(hidden_size)
        tensors[p + "post_attention_layernorm.weight"] = ones(hidden_size)
    tensors["model.norm.weight"] = ones(hidden_size)
    tensors["lm_head.weight"] = rnd(vocab_size, hidden_size)
    return tensors


def _tokenizer_config(max_position_embeddings: int) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_position_embeddings,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def write_model_dir(out: Path, tensors: dict[str, torch.Tensor], texts: dict[str, str]) -> None:
    """Write the files into a temporary sibling directory, add ``SHA256SUMS``, then rename it to ``out``."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        # metadata is fixed so the safetensors bytes depend only on the tensors.
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, text in texts.items():
            (tmp / name).write_text(text, encoding="utf-8")
        names = sorted(f.name for f in tmp.iterdir())
        sums = "".join(f"{file_sha256(tmp / n)}  {n}\n" for n in names)
        (tmp / "SHA256SUMS").write_text(sums)
        for f in tmp.iterdir():
            f.chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_tiny_model(out_dir: str | os.PathLike[str], *, num_layers: int = 8, hidden_size: int = 128,
                     intermediate_size: int | None = None, num_heads: int = 4, num_kv_heads: int = 2,
                     seed: int = 0, max_position_embeddings: int = 4096, init_std: float = 0.2) -> Path:
    """Write a deterministic tiny Qwen2 model directory.

    Args:
        out_dir: target directory; must not exist or be empty.
        num_layers: decoder layers (>= 1).
        hidden_size: model width; must be divisible by ``num_heads``.
        intermediate_size: MLP width; default ``2 * hidden_size``.
        num_heads: attention heads; ``num_kv_heads`` must divide it.
        seed: seed of the ``torch.Generator`` that draws the weights.
        init_std: standard deviation of the normal weights. 0.2 (not HF's 0.02) so greedy
            output depends on every layer: at 0.02 the tiny model emits one repeated token,
            which would make token-identity checks unable to fail.
        max_position_embeddings: RoPE table length (tokens).

    Returns:
        ``Path`` of the model directory, containing ``SHA256SUMS``.

    Raises:
        ValueError: inconsistent shapes, or ``out_dir`` exists and is not empty.
    """
    _check_shapes(num_layers, hidden_size, num_heads, num_kv_heads)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"model directory {out} exists and is not empty")
    tok_text, vocab_size = build_tokenizer_json()
    config = _model_config(num_layers=num_layers, hidden_size=hidden_size, inter=intermediate_size or 2 * hidden_size,
                           num_heads=num_heads, num_kv_heads=num_kv_heads, vocab_size=vocab_size,
                           max_position_embeddings=max_position_embeddings, init_std=init_std)
    tensors = _weights(config, seed=seed, init_std=init_std)
    pad_id, eos_id = vocab_size - 3, vocab_size - 1  # <|endoftext|>, <|im_end|>
    gen_config = {"bos_token_id": pad_id, "eos_token_id": eos_id, "pad_token_id": pad_id, "do_sample": False}
    write_model_dir(out, tensors, {
        "config.json": json.dumps(config, indent=2, sort_keys=True) + "\n",
        "generation_config.json": json.dumps(gen_config, indent=2, sort_keys=True) + "\n",
        "tokenizer.json": tok_text,
        "tokenizer_config.json": json.dumps(_tokenizer_config(max_position_embeddings), indent=2,
                                            sort_keys=True) + "\n",
    })
    return out


def verify_model_dir(model_dir: str | os.PathLike[str]) -> str:
    """Check every file listed in ``SHA256SUMS``; return the SHA-256 of ``SHA256SUMS`` itself.

    Raises:
        FileNotFoundError: ``SHA256SUMS`` or a listed file is missing.
        ValueError: a file's hash differs (names the file, expected and actual hash).
    """
    d = Path(model_dir)
    sums = d / "SHA256SUMS"
    if not sums.is_file():
        raise FileNotFoundError(f"{sums} is missing: not a model directory built by runners.models.tiny_model")
    for line in sums.read_text().splitlines():
        expected, name = line.split(maxsplit=1)
        actual = file_sha256(d / name)
        if actual != expected:
            raise ValueError(f"model file {d / name}: sha256 {actual} != SHA256SUMS entry {expected}")
    return file_sha256(sums)


def tiny_layer_config(num_layers: int, hidden_size: int) -> dict[str, Any]:
    """``build_tiny_model``'s ``config.json`` shapes with its default heads (layer bytes before a build; no vocabulary)."""
    return _model_config(num_layers=num_layers, hidden_size=hidden_size, inter=2 * hidden_size, num_heads=4,
                         num_kv_heads=2, vocab_size=3, max_position_embeddings=4096, init_std=0.2)


def tiny_model_name(num_layers: int = 8, hidden_size: int = 128, seed: int = 0) -> str:
    return f"tiny-qwen2-l{num_layers}-h{hidden_size}-s{seed}"


def ensure_tiny_model(cache_dir: str | os.PathLike[str], *, num_layers: int = 8, hidden_size: int = 128,
                      seed: int = 0, **kwargs: int) -> Path:
    """Build the tiny model into ``<cache_dir>/tiny-qwen2-l{L}-h{H}-s{seed}`` once, then verify it.

    Concurrent callers (two runs, test workers) build it once: ``fcntl.flock`` on ``<cache_dir>/.<name>.lock``.

    Returns:
        Path of the verified model directory.

    Raises:
        ValueError: a cached file no longer matches its ``SHA256SUMS`` entry.
    """
    d = Path(cache_dir) / tiny_model_name(num_layers, hidden_size, seed)
    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f".{d.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / "SHA256SUMS").is_file():
            if d.exists() and not any(d.iterdir()):
                d.rmdir()
            if not d.exists():
                build_tiny_model(d, num_layers=num_layers, hidden_size=hidden_size, seed=seed, **kwargs)
    verify_model_dir(d)
    return d


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.models.tiny_model", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="model directory to create (must not exist or be empty)")
    for flag, default in (("--num-layers", 8), ("--hidden-size", 128), ("--intermediate-size", None),
                          ("--num-heads", 4), ("--num-kv-heads", 2), ("--seed", 0)):
        ap.add_argument(flag, type=int, default=default)
    a = ap.parse_args(argv)
    try:
        d = build_tiny_model(a.out, num_layers=a.num_layers, hidden_size=a.hidden_size,
                             intermediate_size=a.intermediate_size, num_heads=a.num_heads,
                             num_kv_heads=a.num_kv_heads, seed=a.seed)
    except ValueError as e:
        print(f"error: {e}")
        return 2
    print(f"{d}  sha256(SHA256SUMS)={verify_model_dir(d)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
