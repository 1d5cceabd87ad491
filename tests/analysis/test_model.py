"""Claims about the transfer-bound model and the recommender."""

from __future__ import annotations

import pytest

from analysis.aggregate import aggregate
from analysis.load import load_run
from analysis.model.fit import GIB, TransferModel, fit_model, recommend
from analysis.model.trust import untrusted_reason
from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir


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
    from offload_tools.layer_bytes import kv_bytes_per_token

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


# ----------------------------------------------------------------------------- honest recommender
def _cli(argv, capsys):
    from analysis.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_point_whose_tokens_differ_is_never_recommended_nor_on_the_front(fixture_runs, tmp_path):
    import shutil

    from analysis.report.tables import build

    from .conftest import make_fixtures

    run = tmp_path / "run"
    shutil.copytree(fixture_runs["synthetic_edge_tokens_differ"], run)
    phase, label, _rep = make_fixtures.target_of(run)
    t = build(run)
    s = t["summary"].set_index("label")
    assert not t["validation"].valid
    assert "tokens differ from the phase baseline" in s.loc[label, "front_excluded"]
    assert "token_digest_differs" in s.loc[label, "front_excluded"]
    assert not s.loc[label, "pareto"] and not s.loc[label, "knee"]
    impl = s.loc[label, "implementation"]
    rec = recommend(t["summary"], t["data"].runs, need_gib=float(s.loc[label, "released_bytes"]) / GIB,
                    phase=phase, implementation=impl, valid=False)
    assert rec.best is None or rec.best["label"] != label
    assert any(line.startswith(f"not a candidate: {label} (") for line in rec.lines)
    # the Markdown table says why
    from analysis.report.markdown import render_markdown

    row = next(r for r in render_markdown(t)[1].splitlines() if f"| {label} |" in r)
    assert "tokens differ from the phase baseline" in row


def _three_impl_run(tmp_path, **kw):
    from tests.support.synthetic import default_cases

    cases = default_cases(implementations=("current", "official", "sync"), official_delta=-30.0, sd=0.5, **kw)
    # make sync the fastest offloaded implementation
    for c in cases:
        if c.implementation == "sync":
            c.mean_tok_s += 5.0
    return write_run_dir(tmp_path / "run3", [SynthPhase("same_runtime", cases, repeats=3)])


def test_implementation_filter_applies_to_measured_points(tmp_path, capsys):
    run = _three_impl_run(tmp_path)
    rc, out, _ = _cli(["recommend", str(run), "--need-gib", str(18_688 / GIB), "--implementation", "official"],
                      capsys)
    assert rc == 0
    rec_line = next(line for line in out.splitlines() if line.startswith("recommendation:"))
    assert "recommendation: official_" in rec_line and "sync" not in rec_line
    assert "margin ±5%" in rec_line
    rc, out, _ = _cli(["recommend", str(run), "--need-gib", str(18_688 / GIB), "--implementation", "sync"], capsys)
    assert "recommendation: sync_" in out


def test_unknown_phase_or_implementation_is_a_usage_error_listing_choices(tmp_path, capsys):
    run = _three_impl_run(tmp_path)
    rc, _, err = _cli(["recommend", str(run), "--need-gib", "0", "--phase", "nope"], capsys)
    assert rc == 2 and "--phase 'nope'" in err and "choices: same_runtime" in err
    rc, _, err = _cli(["recommend", str(run), "--need-gib", "0", "--implementation", "oficial"], capsys)
    assert rc == 2 and "--implementation 'oficial'" in err and "choices: current, official, sync" in err


def test_fit_at_the_grid_edge_is_reported_and_gives_no_predictions(tmp_path):
    # offloading costs nothing measurable: the best bandwidth is the largest on the grid (10,000 GB/s)
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.0)]
    for g, n in ((8, 1), (4, 1), (4, 2), (2, 1)):
        cases.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=100.0, sd_tok_s=0.0))
    run = write_run_dir(tmp_path / "run", [SynthPhase("same_runtime", cases, repeats=1)])
    data = load_run(run)
    s = aggregate(data)
    m = fit_model(s, data.runs, "same_runtime")
    assert m.bandwidth_bytes_s == pytest.approx(1e13)
    assert m.bandwidth_source == "grid edge (highest)" and untrusted_reason(m) is not None
    assert "grid edge (highest)" in m.fit_note() and "fitted" not in m.fit_note()
    rec = recommend(s, data.runs, need_gib=0.0)
    assert rec.predictions == []
    assert any("no predictions for unmeasured settings" in line for line in rec.lines)


def test_predictions_only_when_the_fit_error_is_within_the_bound(tmp_path):
    from analysis.model.fit import MAX_FIT_ERROR_PCT

    true = TransferModel(100.0, 4, 8, 18_688.0, 5e6, "serial")
    good = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.0)]
    bad = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=0.0)]
    for g, n in ((8, 1), (4, 1), (4, 2), (2, 1)):
        good.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=true.predict(g, n), sd_tok_s=0.0))
    # throughput that rises with more offloaded layers: no transfer-bound model fits it
    for (g, n), t in zip(((8, 1), (4, 1), (4, 2), (2, 1)), (40.0, 60.0, 80.0, 95.0), strict=True):
        bad.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=t, sd_tok_s=0.0))
    for name, cases, trusted in (("good", good, True), ("bad", bad, False)):
        run = write_run_dir(tmp_path / name, [SynthPhase("same_runtime", cases, repeats=1)])
        data = load_run(run)
        s = aggregate(data)
        m = fit_model(s, data.runs, "same_runtime")
        assert (m.fit_rms_error_pct <= MAX_FIT_ERROR_PCT) is trusted
        rec = recommend(s, data.runs, need_gib=0.0)
        assert bool(rec.predictions) is trusted
        assert sum(line.startswith("model fit current_") for line in rec.lines) == 4  # error per point
