"""Train the small Qwen2 model that answers the generated GSM8K / GPQA-format sets (CPU, torch, deterministic).

What is modelled: a 4-layer Qwen2-architecture model (hidden 128, 4 heads, 2 KV heads) with
a byte-level BPE tokenizer of this project (``runners.models.tiny_model.build_tokenizer_json``,
merges learnt from the published protocol's prompt texts and the generator's words, digits
never merged) and the tiny model's ChatML chat template, trained from a seeded
initialisation on rows of ``runners.incase.accuracy.synthetic`` rendered exactly as the
``qwen-chat-v1`` protocol renders them (system turn, user turn, ``add_generation_prompt``),
the loss on the reply tokens only: the GSM8K row's worked answer ending in ``#### N``, or the
gold letter, each followed by ``<|im_end|>``. Training rows show their GPQA options in an
order drawn by the training generator (not the protocol's text-seeded shuffle), so the
letter must be read from the options; rows equal to a held-out row
(``synthetic.held_out_keys``) are skipped. One attention head (layer 0, head 0) starts as a
fixed-offset head (``Qwen2LM.init_offset_head``: q/k biases only, offset 3), so that in
``\nB. 7`` (tokens ``B`` ``.`` ``Ġ`` ``7``) the digit's position can read its letter from the
start. The multiple-choice task is "which number is the largest": a rule computed from
the options, learnt in about 100 steps on its own; the earlier "which word is the
<category> <word>" task (match a question word to an option) stayed at chance (loss
ln 4 / 2) for 1600 steps. AdamW, linear warm-up then cosine decay, gradient clipping;
fp32 training, bf16 checkpoint.

Determinism: one seed for the initialisation, the data and the order; a fixed number of
intra-op threads (``--threads``, recorded in ``config.json`` ``training``; the committed
checkpoint used 1); ``torch.use_deterministic_algorithms(True)``; no data-loader workers. Same
arguments, same torch build and CPU -> byte-identical ``model.safetensors`` (checked by
training twice).

What is deliberately not modelled: anything beyond these two toy tasks; GPU training.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_schema.records.protocols import DEFAULT_PROTOCOL, protocol_spec
from runners.incase.accuracy import synthetic
from runners.incase.accuracy.datasets import GPQARow, normalize_row
from runners.incase.accuracy.protocol import parse_reply, render_row
from runners.incase.accuracy.rendered import LETTERS
from runners.models.tiny_model import (_byte_to_unicode, _model_config, _tokenizer_config, build_tokenizer_json,
    verify_model_dir, write_model_dir)

MODEL_NAME = "tiny-answering-qwen2-l4-h128"
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "eval_models" / MODEL_NAME
"""Where the trained checkpoint is committed (``python -m runners.models.answering_model --out`` rebuilds it)."""

_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")
"""GPT-2's pre-tokenisation pattern (ASCII approximation of ``\\p{L}`` / ``\\p{N}``), as the ByteLevel pre-tokenizer."""


@dataclass(frozen=True)
class TrainSettings:
    """Hyper-parameters (defaults = the shipped checkpoint)."""

    seed: int = 0
    steps: int = 1600
    batch_size: int = 16
    choice_batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    num_layers: int = 4
    hidden_size: int = 128
    intermediate_size: int = 384
    num_heads: int = 4
    num_kv_heads: int = 2
    num_merges: int = 600
    threads: int = 1
    letter_head_scale: float = 6.0
    letter_offset: int = 3


def chatml(system: str, user: str) -> str:
    """The tiny model's chat template applied to one system and one user turn, ``add_generation_prompt=True``."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def _tokenizer_corpus() -> list[list[str]]:
    """Pre-tokenised corpus of the merges: both tasks' prompts and replies for 300 rows each (seed 7)."""

    b2u = _byte_to_unicode()
    texts = []
    for task in synthetic.TASKS:
        spec = protocol_spec(DEFAULT_PROTOCOL, task)
        for i, raw in enumerate(synthetic.generate_rows(task, 7, 300)):
            r = render_row(spec, normalize_row(task, i, raw))
            texts += [chatml(r.system, r.user), str(raw.get("answer", ""))]
    return [[b2u[b] for b in piece.encode("utf-8")] for t in texts for piece in _PRETOKEN.findall(t)]


def build_tokenizer(num_merges: int) -> tuple[str, int]:
    """``(tokenizer.json text, vocab size)``: digit bytes are never merged (numbers stay one token per digit)."""

    return build_tokenizer_json(num_merges, words=_tokenizer_corpus(), mergeable=lambda sym: not any(
        c.isdigit() for c in sym))


def render_example(task: str, raw: dict[str, object], rng: random.Random | None) -> tuple[str, str]:
    """``(prompt text, reply text)`` of one generated row under the published protocol.

    Args:
        rng: training: GPQA options in an order drawn from it; None: the protocol's own shuffle.
    """

    spec = protocol_spec(DEFAULT_PROTOCOL, task)
    row = normalize_row(task, 0, raw)
    r = render_row(spec, row)
    if task == "gsm8k":
        return chatml(r.system, r.user), str(raw["answer"])
    assert isinstance(row, GPQARow)
    if rng is None:
        return chatml(r.system, r.user), r.gold
    order = [0, 1, 2, 3]
    rng.shuffle(order)
    shown = {LETTERS[k]: row.options[i] for k, i in enumerate(order)}
    user = spec.user_template.format(question=row.question, **shown)
    return chatml(r.system, user), LETTERS[order.index(0)]


def _task_prefix(tok: Any, task: str) -> list[int]:
    """Token ids every prompt of ``task`` starts with: the chat turns up to ``Question:\\n``."""
    spec = protocol_spec(DEFAULT_PROTOCOL, task)
    head = spec.user_template.split("{question}", 1)[0]
    return list(tok.encode(chatml(spec.system_message, head + "\x00").split("\x00", 1)[0]).ids)


def _fresh_row(rng: random.Random, task: str) -> dict[str, object]:
    """The next generated ``task`` row that is not a held-out row (``synthetic.held_out_keys``)."""
    held_out = _HELD_OUT.setdefault("keys", synthetic.held_out_keys())[task]
    while True:
        raw = synthetic.arithmetic_row(rng) if task == "gsm8k" else synthetic.choice_row(rng, "train")
        if synthetic.row_key(task, raw) not in held_out:
            return raw


_HELD_OUT: dict[str, dict[str, frozenset[tuple[str, ...]]]] = {}


def _batch(tok: Any, rng: random.Random, task: str, size: int, prefix: list[int], im_end: int,
           pad: int) -> tuple[Any, Any]:
    """``(ids, labels)`` of ``size`` fresh ``task`` rows after the shared ``prefix``, right-padded; labels -100
    off the reply (label ``j`` is the target of position ``j``'s prediction of token ``j + 1``).

    Raises:
        ValueError: a row's prompt does not start with ``prefix`` (the tokenizer split differently).
    """
    import torch

    seqs = []
    for _ in range(size):
        raw = _fresh_row(rng, task)
        prompt, reply = render_example(task, raw, rng)
        p, r = tok.encode(prompt).ids, tok.encode(reply).ids + [im_end]
        if p[:len(prefix)] != prefix:
            raise ValueError(f"{task} prompt does not start with the shared prefix: {prompt[:200]!r}")
        rest = p[len(prefix):]
        seqs.append((rest + r, [-100] * (len(rest) - 1) + r + [-100]))
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((size, width), pad, dtype=torch.long)
    labels = torch.full((size, width), -100, dtype=torch.long)
    for i, (s, lab) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, :len(lab)] = torch.tensor(lab)
    return ids, labels


def _loss(model: Any, prefix: Any, ids: Any, labels: Any) -> Any:
    """Mean over rows of each row's mean next-token cross entropy on its reply tokens."""
    import torch.nn.functional as F

    logits = model.forward_shared_prefix(prefix, ids)
    per_tok = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                              reduction="none").view(labels.shape)
    mask = (labels != -100).float()
    return ((per_tok * mask).sum(1) / mask.sum(1)).mean()


def _lr_at(step: int, s: TrainSettings) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to 10% of it at ``steps``."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    frac = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train(s: TrainSettings, tokenizer_json: str, vocab_size: int, log_every: int = 100) -> Any:
    """Train from scratch; return the ``Qwen2LM`` (fp32).

    Raises:
        ValueError: non-finite loss (names the step).
    """
    import torch
    from tokenizers import Tokenizer

    from runners.models.qwen2_torch import Qwen2LM, Qwen2Shape

    torch.set_num_threads(s.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(s.seed)
    tok = Tokenizer.from_str(tokenizer_json)
    im_end, pad = vocab_size - 1, vocab_size - 3
    model = Qwen2LM(Qwen2Shape(vocab_size=vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                               num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                               num_key_value_heads=s.num_kv_heads))
    model.init_weights(torch.Generator().manual_seed(s.seed))
    if s.letter_head_scale:  # "\nB. 7": the digit's position sees its letter three tokens back
        model.init_offset_head(0, 0, s.letter_offset, s.letter_head_scale)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.98), weight_decay=s.weight_decay)
    rng = random.Random(f"train-{s.seed}")
    prefixes = {t: torch.tensor(_task_prefix(tok, t)) for t in synthetic.TASKS}
    sizes = {"gsm8k": s.batch_size, "gpqa": s.choice_batch_size}
    t0 = time.perf_counter()
    for step in range(s.steps):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, s)
        losses = []
        for task in synthetic.TASKS:
            ids, labels = _batch(tok, rng, task, sizes[task], prefixes[task].tolist(), im_end, pad)
            losses.append(_loss(model, prefixes[task], ids, labels))
        loss = sum(losses) / len(losses)
        if not math.isfinite(loss.item()):
            raise ValueError(f"training diverged: loss {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log_every and (step % log_every == 0 or step == s.steps - 1):
            print(f"step {step} loss gsm8k {losses[0].item():.4f} gpqa {losses[1].item():.4f} "
                  f"lr {_lr_at(step, s):.2e} elapsed {time.perf_counter() - t0:.0f}s", flush=True)
    return model.eval()


def greedy_accuracy(model: Any, tokenizer_json: str, vocab_size: int, task: str, rows: Sequence[dict[str, object]],
                    max_new: int = 96) -> tuple[int, int]:
    """``(correct, unparsable)`` of ``model``'s greedy replies to ``rows`` scored by the protocol's parser."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    spec = protocol_spec(DEFAULT_PROTOCOL, task)
    correct = unparsable = 0
    for raw in rows:
        prompt, gold = render_example(task, raw, None)
        gold = parse_reply(spec, gold) or gold
        out = model.greedy(tok.encode(prompt).ids, vocab_size - 1, max_new)
        parsed = parse_reply(spec, tok.decode([t for t in out if t < vocab_size - 3]))
        correct += parsed == gold
        unparsable += parsed is None
    return correct, unparsable


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _config(s: TrainSettings, vocab_size: int) -> dict[str, Any]:
    cfg = _model_config(num_layers=s.num_layers, hidden_size=s.hidden_size, inter=s.intermediate_size,
                        num_heads=s.num_heads, num_kv_heads=s.num_kv_heads, vocab_size=vocab_size,
                        max_position_embeddings=4096, init_std=0.02)
    cfg["training"] = {"script": "python -m runners.models.answering_model", **s.__dict__}
    return cfg


def build_answering_model(out_dir: Path | str, s: TrainSettings = TrainSettings(), log_every: int = 100) -> Path:
    """Train and write the model directory (bf16 ``model.safetensors``, tokenizer, chat template, ``SHA256SUMS``).

    Args:
        out_dir: target directory; must not exist or be empty.

    Returns:
        The model directory.

    Raises:
        ValueError: ``out_dir`` exists and is not empty; training diverged.
    """
    import torch

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"model directory {out} exists and is not empty")
    tok_json, vocab = build_tokenizer(s.num_merges)
    model = train(s, tok_json, vocab, log_every)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    pad_id, eos_id = vocab - 3, vocab - 1
    write_model_dir(out, tensors, {
        "config.json": _json(_config(s, vocab)),
        "generation_config.json": _json({"bos_token_id": pad_id, "eos_token_id": eos_id, "pad_token_id": pad_id,
                                         "do_sample": False}),
        "tokenizer.json": tok_json,
        "tokenizer_config.json": _json(_tokenizer_config(4096)),
    })
    return out


def load_trained(model_dir: Path | str) -> tuple[Any, str, int]:
    """``(Qwen2LM in fp32 with the checkpoint's bf16 weights, tokenizer.json text, vocab size)``."""
    from safetensors.torch import load_file

    from runners.models.qwen2_torch import Qwen2LM, Qwen2Shape

    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    model = Qwen2LM(Qwen2Shape.from_config(cfg))
    model.load_state_dict({k: v.float() for k, v in load_file(str(d / "model.safetensors")).items()})
    return model.eval(), (d / "tokenizer.json").read_text(encoding="utf-8"), int(cfg["vocab_size"])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.models.answering_model", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="model directory to create (must not exist or be empty)")
    ap.add_argument("--steps", type=int, default=TrainSettings.steps)
    ap.add_argument("--threads", type=int, default=TrainSettings.threads, help="torch intra-op threads")
    ap.add_argument("--eval-rows", type=int, default=synthetic.EVAL_ROWS, help="held-out rows per task scored after training (0: none)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        d = build_answering_model(a.out, TrainSettings(steps=a.steps, threads=a.threads))
    except ValueError as e:
        print(f"error: {e}")
        return 2

    print(f"{d}  sha256(SHA256SUMS)={verify_model_dir(d)}  train+write {time.perf_counter() - t0:.0f}s")
    if a.eval_rows:
        model, tok_json, vocab = load_trained(d)
        for task in synthetic.TASKS:
            rows = synthetic.generate_rows(task, synthetic.EVAL_SEED, a.eval_rows)
            correct, unparsable = greedy_accuracy(model, tok_json, vocab, task, rows)
            print(f"{task}: {correct}/{len(rows)} correct, {unparsable} unparsable (bf16 weights, fp32 greedy)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
