"""Claims about the transfer-bound model and the recommender."""

from __future__ import annotations

import pytest

from analysis.aggregate import aggregate
from analysis.load import load_run
from analysis.model import GIB, TransferModel, fit_model, recommend
from analysis.synthetic import SynthCase, SynthPhase, write_run_dir


def test_serial_model_adds_copy_time_per_offloaded_layer():
    m = TransferModel(baseline_tok_s=100.0, num_prompts=4, num_layers=8, bytes_per_layer=1e6,
                      bandwidth_bytes_s=1e8, mode="serial")
    assert m.t0 == pytest.approx(0.04)
    assert m.step_seconds(4, 1) == pytest.approx(0.04 + 2 * 0.01)
    assert m.predict(0, 0) == 100.0
    assert m.predict(4, 2) < m.predict(4, 1) < m.predict(8, 1) < 100.0


def test_overlapped_model_hides_copies_behind_compute_and_prefetch_helps():
    m = TransferModel(100.0, 4, 8, 1e6, 1e8, "overlapped")
    # per-layer compute 5 ms, copy 10 ms: G=8,N=1 hides 8*5=40 ms >= 10 ms
    assert m.predict(8, 1) == 100.0
    # G=1,N=1: every layer offloaded, 5 ms hidden per 10 ms copy -> stall 5 ms x 8
    assert m.step_seconds(1, 1) == pytest.approx(0.04 + 8 * 0.005)
    assert m.predict(1, 1, prefetch_step=2) == 100.0


def test_fit_recovers_the_bandwidth_of_noise_free_data(tmp_path):
    true = TransferModel(100.0, 4, 8, 18_688.0, 5e6, "serial")
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.0)]
    for g, n in ((8, 1), (4, 1), (4, 2), (2, 1)):
        cases.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=true.predict(g, n), sd_tok_s=0.0))
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    data = load_run(run)
    m = fit_model(aggregate(data), data.runs, "same_runtime")
    assert m.mode == "serial" and m.num_prompts == 4
    assert m.bandwidth_bytes_s == pytest.approx(5e6, rel=0.02)


def test_recommend_picks_highest_throughput_meeting_need(valid_run):
    data = load_run(valid_run)
    s = aggregate(data)
    rec = recommend(s, data.runs, need_gib=2 * 18_688 / GIB)
    ok = s[(s["released_bytes"] >= 2 * 18_688) & (s["phase"] == "same_runtime")]
    assert rec.best["label"] == ok.sort_values("throughput_median_tok_s").iloc[-1]["label"]
    assert any("highest median throughput" in line for line in rec.lines)


def test_recommend_requires_exactly_one_need(valid_run):
    data = load_run(valid_run)
    with pytest.raises(ValueError, match="exactly one"):
        recommend(aggregate(data), data.runs)


def test_kv_bytes_per_token_of_qwen25_7b():
    from analysis.layer_bytes import kv_bytes_per_token

    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
           "num_hidden_layers": 28, "torch_dtype": "bfloat16"}
    assert kv_bytes_per_token(cfg) == 2 * 28 * 4 * 128 * 2 == 57_344


def test_need_kv_gib_uses_token_counts_when_logs_give_no_gib(valid_run, capsys):
    from analysis.cli import main

    assert main(["recommend", str(valid_run), "--need-kv-gib", str(300 * 512 / GIB)]) == 0
    out = capsys.readouterr().out
    assert "bytes/token from config.json" in out
    # only the (4,2) and (2,1) points gain >= 300 tokens (400 each)
    assert "recommendation: current_g4_n2" in out or "recommendation: current_g2_n1" in out \
        or "recommendation: official_g4_n2" in out or "recommendation: official_g2_n1" in out
