"""The small model this project trains to answer the generated GSM8K / GPQA-format sets: data, tokenizer,
architecture against ``transformers``, bit-identical training, the committed checkpoint and held-out sets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from results_schema.records.protocols import DEFAULT_PROTOCOL, protocol_spec
from runners.incase.accuracy import synthetic
from runners.incase.accuracy.datasets import load_dataset, normalize_row
from runners.incase.accuracy.protocol import parse_reply, render_row
from runners.models.answering_model import SHIPPED_DIR, TrainSettings, build_tokenizer, chatml, render_example, train

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = REPO / "eval_datasets" / "synthetic" / "manifest.json"
TINY = TrainSettings(steps=3, batch_size=2, choice_batch_size=2, num_layers=1, hidden_size=32, intermediate_size=64,
                     num_heads=2, num_kv_heads=1, num_merges=40, warmup_steps=1)


def test_generated_rows_are_reproducible_and_render_under_the_published_protocol() -> None:
    for task in synthetic.TASKS:
        rows = synthetic.generate_rows(task, 5, 40)
        assert rows == synthetic.generate_rows(task, 5, 40) and rows != synthetic.generate_rows(task, 6, 40)
        spec = protocol_spec(DEFAULT_PROTOCOL, task)
        golds = [render_row(spec, normalize_row(task, i, r)).gold for i, r in enumerate(rows)]
        if task == "gsm8k":
            for r, gold in zip(rows, golds, strict=True):
                assert parse_reply(spec, str(r["answer"])) == gold and str(r["answer"]).endswith(f"#### {gold}")
        else:
            assert set(golds) == set("ABCD")  # the protocol's text-seeded shuffle spreads the gold letter


def test_committed_held_out_sets_are_what_synthesize_writes(tmp_path: Path) -> None:
    entries = synthetic.write_eval_sets(tmp_path)
    committed = json.loads(SYNTHETIC.read_text())["datasets"]
    assert [e.model_dump() for e in entries] == committed
    for task in synthetic.TASKS:
        entry, _, rows = load_dataset(SYNTHETIC, task)
        assert (entry.kind, entry.source, entry.rows) == ("fixture", "synthetic", synthetic.EVAL_ROWS)


def test_training_prompt_is_the_chat_template_rendering_and_digits_stay_single_tokens() -> None:
    from tokenizers import Tokenizer

    tok_json, vocab = build_tokenizer(TrainSettings().num_merges)
    assert tok_json == (SHIPPED_DIR / "tokenizer.json").read_text(encoding="utf-8")
    tok = Tokenizer.from_str(tok_json)
    assert tok.encode(" 1234").tokens == ["Ġ", "1", "2", "3", "4"]
    from jinja2 import Template

    from runners.models.tiny_model import CHAT_TEMPLATE

    raw = synthetic.generate_rows("gpqa", 3, 1)[0]
    prompt, gold = render_example("gpqa", raw, None)
    r = render_row(protocol_spec(DEFAULT_PROTOCOL, "gpqa"), normalize_row("gpqa", 0, raw))
    assert prompt == Template(CHAT_TEMPLATE).render(messages=r.messages(), add_generation_prompt=True)
    assert prompt == chatml(r.system, r.user) and gold == r.gold


@pytest.mark.heavy  # three tiny trainings with torch (3 s CPU)
def test_training_twice_from_scratch_gives_identical_weights() -> None:
    import torch

    tok_json, vocab = build_tokenizer(TINY.num_merges)
    first, second = (train(TINY, tok_json, vocab, log_every=0).state_dict() for _ in range(2))
    digest = [hashlib.sha256(b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in sd.values()))
              for sd in (first, second)]
    assert digest[0].hexdigest() == digest[1].hexdigest()
    changed = train(TrainSettings(**{**TINY.__dict__, "seed": 1}), tok_json, vocab, log_every=0).state_dict()
    assert any(not torch.equal(changed[k], first[k]) for k in first)


def test_committed_checkpoint_verifies_and_has_the_trained_shape() -> None:
    from runners.models.tiny_model import verify_model_dir

    verify_model_dir(SHIPPED_DIR)
    cfg = json.loads((SHIPPED_DIR / "config.json").read_text())
    assert (cfg["architectures"], cfg["num_hidden_layers"], cfg["hidden_size"]) == (["Qwen2ForCausalLM"], 4, 128)
    # the command as recorded when the checkpoint was trained (the file is checksummed: never rewritten)
    assert cfg["training"]["script"].startswith("python -m runners.") and cfg["training"]["script"].endswith(
        ".answering_model")
    assert (SHIPPED_DIR / "model.safetensors").stat().st_size < 4_000_000


@pytest.mark.heavy  # imports transformers' Qwen2 (5 s CPU)
def test_torch_decoder_equals_transformers_qwen2_on_the_committed_weights() -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from runners.models.answering_model import load_trained

    model, tok_json, vocab = load_trained(SHIPPED_DIR)
    cfg = {k: v for k, v in json.loads((SHIPPED_DIR / "config.json").read_text()).items() if k != "training"}
    ref = Qwen2ForCausalLM(Qwen2Config(**cfg)).float().eval()
    ref.load_state_dict(model.state_dict())
    ids = torch.randint(0, vocab, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(ids), ref(ids).logits
    assert torch.allclose(ours, theirs, atol=2e-4, rtol=1e-4), (ours - theirs).abs().max()
    prefix, rest = ids[0, :25], ids[:, 25:]
    with torch.no_grad():
        shared = model.forward_shared_prefix(prefix, rest)
    assert torch.allclose(shared[0], ours[0, 25:], atol=2e-4)


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_offset_head_attends_two_tokens_back_from_the_start() -> None:
    import torch

    from runners.models.qwen2_torch import Qwen2LM, Qwen2Shape, _rotate_half, rope_tables

    s = Qwen2Shape(vocab_size=50, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=1)
    model = Qwen2LM(s)
    model.init_weights(torch.Generator().manual_seed(0))
    model.init_offset_head(0, 0, 2, 6.0)
    attn = model.model.layers[0].self_attn
    x = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.randint(0, 50, (1, 30))))
    cos, sin = rope_tables(30, s.head_dim, s.rope_theta)
    q = attn.q_proj(x).view(1, 30, 2, s.head_dim).transpose(1, 2)[0, 0]
    k = attn.k_proj(x).view(1, 30, 1, s.head_dim).transpose(1, 2)[0, 0]
    q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    scores = (q @ k.T).masked_fill(torch.ones(30, 30).triu(1).bool(), float("-inf"))
    assert (scores.argmax(-1)[2:] == torch.arange(0, 28)).all()


def test_choice_rows_ask_for_the_largest_of_four_single_token_digits() -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(build_tokenizer(TrainSettings().num_merges)[0])
    for raw in synthetic.generate_rows("gpqa", 11, 50):
        options = [int(str(raw[k])) for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                                              "Incorrect Answer 3")]
        assert len(set(options)) == 4 and options[0] == max(options) and min(options) >= 1
        prompt, _ = render_example("gpqa", raw, None)
        tail = tok.encode(prompt).tokens[-30:]
        assert [tail[i] for i in (2, 7, 12, 17)] == ["A", "B", "C", "D"]  # fixed layout: "A" "." "Ġ" digit "Ċ"


@pytest.mark.heavy  # measured 3.5 s in the fast tier (its budget is 2 minutes)
def test_training_never_draws_a_held_out_row() -> None:
    import random

    from runners.models.answering_model import _fresh_row

    held_out = synthetic.held_out_keys()
    assert all(len(keys) == synthetic.EVAL_ROWS for keys in held_out.values())  # no duplicate held-out rows
    for task in synthetic.TASKS:
        rng = random.Random("overlap-check")
        unfiltered = [synthetic.arithmetic_row(rng) if task == "gsm8k" else synthetic.choice_row(rng, "train")
                      for _ in range(3000)]
        assert any(synthetic.row_key(task, r) in held_out[task] for r in unfiltered)  # the skip has work to do
        rng = random.Random("overlap-check")
        assert not {synthetic.row_key(task, _fresh_row(rng, task)) for _ in range(3000)} & held_out[task]
