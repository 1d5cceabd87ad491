"""scripts/duet_probe.py, its pure parts: common rounds, same-time ratios, the schedule, the paired interval over
pairs (``analysis.comparison.verdict_rule.decide_paired``), the leak's pairing by block, the lagged SD.

The pairs are simulated: each process's rounds take ``tokens / (speed x host(t))`` seconds, where ``host`` is a
speed factor both vCPUs share at a time (the finding the probe rests on) and each process adds its own noise.
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from analysis.comparison.verdict_rule import decide_paired
from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
duet = load_script("duet_probe")

TOKENS = 256


def _proc(t0: float, speed: float, n: int, host=lambda t: 1.0, own: float = 0.0, rng=None) -> list:
    """``n`` back-to-back rounds from ``t0`` at ``speed`` tok/s x ``host(t)`` x lognormal(own)."""
    out, t = [], t0
    for _ in range(n):
        f = host(t) * (math.exp(rng.gauss(0.0, own)) if own else 1.0)
        s = TOKENS / (speed * f)
        out.append(duet.Round(t, s, TOKENS))
        t += s
    return out


def _pair(name: str, kind: str, block: int, ref, other) -> object:
    recs = [dict(rounds=[dict(t=r.t, s=r.s, tokens=r.tokens, digest="d") for r in p]) for p in (ref, other)]
    return duet.pair_result(dict(name=name, kind=kind, cpus=[0, 1], procs=recs), block)


def _blocks(rng: random.Random, blocks: int, rounds: int) -> list:
    """``blocks`` blocks of A||A, A||B, A||C pairs (A 200, B 120, C 170 tok/s: B/A 0.6, C/A 0.85) of ``rounds`` rounds
    each, under a host speed shared by a block's pair (SD 15% between blocks) and 1% per-round noise of each process."""
    results = []
    for k in range(blocks):
        host = math.exp(rng.gauss(0.0, 0.15))
        for kind, speed in (("AA", 200.0), ("AB", 120.0), ("AC", 170.0)):
            a = _proc(100.0 * k, 200.0, rounds, lambda t, h=host: h, 0.01, rng)
            b = _proc(100.0 * k, speed, rounds, lambda t, h=host: h, 0.01, rng)
            results.append(_pair(f"p{k}{kind}", kind, k, a, b))
    return results


def test_common_rounds_drop_what_ran_after_the_first_process_stopped() -> None:
    fast, slow = _proc(0.0, 256.0, 12), _proc(0.0, 128.0, 5)  # 1-s and 2-s rounds; slow ends at 10 s
    cf, cs = duet.common_rounds(fast, slow)
    assert len(cs) == 5 and len(cf) == 10 and cf[-1].end <= slow[-1].end + 1e-6
    assert duet.pair_values(fast, slow) == pytest.approx((256.0, 128.0))
    assert duet.round_log_ratios(slow, fast) == pytest.approx([math.log(0.5)] * 5)
    with pytest.raises(ValueError, match="no common round"):
        duet.pair_values(fast, [])


def test_a_host_speed_shared_by_both_processes_cancels_in_the_pair_ratio() -> None:
    rng = random.Random(7)
    same_time, lone = [], []
    for k in range(40):
        level = math.exp(rng.gauss(0.0, 0.15))  # the host's speed this pair: SD 15%

        def host(t: float, level=level) -> float:
            return level * (1.0 + 0.05 * math.sin(t))  # and moving within the pair

        a = _proc(100.0 * k, 200.0, 8, host, 0.01, rng)
        b = _proc(100.0 * k, 120.0, 8, host, 0.01, rng)
        ref, other = duet.pair_values(a, b)
        same_time.append(math.log(other / ref))
        lone.append(math.log(ref))
    assert statistics.stdev(same_time) < 0.02 < 0.10 < statistics.stdev(lone)
    assert math.exp(statistics.mean(same_time)) == pytest.approx(0.6, rel=0.02)


def test_arm_ratio_is_the_paired_interval_over_pairs_and_covers_the_simulated_ratio() -> None:
    results = _blocks(random.Random(3), 4, 8)
    for kind, want in (("AB", 0.6), ("AC", 0.85)):
        d = duet.arm_ratio(results, kind)
        pairs = [r for r in results if r.kind == kind]
        assert d == decide_paired([r.other for r in pairs], [r.ref for r in pairs])
        assert d.n_a == 4 and d.df == 3 and d.ci_low_pct < 100 * (want - 1) < d.ci_high_pct
        assert d.verdict == "slower"
    assert duet.arm_ratio(results[:3], "AB") is None  # one pair: no interval over pairs


def test_leak_pairs_a_next_to_b_with_the_a_a_pair_of_its_own_block() -> None:
    results = []
    for k, host in enumerate((1.0, 0.7, 1.2)):  # the host's speed differs a lot between blocks
        aa = _pair(f"a{k}", "AA", k, _proc(0, 200 * host, 6), _proc(0, 200 * host, 6))
        ab = _pair(f"b{k}", "AB", k, _proc(0, 180 * host, 6), _proc(0, 120 * host, 6))  # B slows its A by 10%
        results += [ab, aa]
    d = duet.leak(results)
    assert d.center_pct == pytest.approx(-10.0) and d.n_a == 3
    assert duet.leak(results[:2]) is None


def test_schedule_rotates_the_kinds_and_alternates_the_vcpus() -> None:
    plan = duet.schedule(4)
    assert len(plan) == 12
    for k in range(4):
        block = [(kind, cpus) for b, kind, cpus in plan if b == k]
        assert sorted(kind for kind, _ in block) == ["AA", "AB", "AC"]
        assert block[0][0] == duet.KINDS[k % 3]
        assert {cpus for _, cpus in block} == {(0, 1) if k % 2 == 0 else (1, 0)}


def test_lagged_sd_takes_the_point_nearest_the_lag() -> None:
    pts = [(float(t), 0.01 * t + (0.02 if t % 20 == 0 else 0.0)) for t in range(0, 200, 10)]
    sd, n = duet.lagged_sd(pts, lag=25.0, tol=5.0)  # 20 and 30 s are equally near 25: the earlier
    assert n == 18 and sd > 0
    flat_sd, flat_n = duet.lagged_sd([(float(t), 0.01 * t) for t in range(0, 200, 25)], lag=25.0, tol=1.0)
    assert flat_n == 7 and flat_sd == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(duet.lagged_sd([(0.0, 1.0), (25.0, 2.0)])[0])


PAIRS_ALLOWED = ("allowed an even number from 2 to 50 (the vCPUs swap each block: an odd count puts every reference "
                 "arm once more on vCPU 0 than on vCPU 1, whose speeds differ)")


def test_bad_pairs_is_one_line_and_exit_2_before_any_process(capsys) -> None:
    assert duet.main(["--pairs", "0"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --pairs 0: {PAIRS_ALLOWED}"


@pytest.mark.parametrize("pairs", [1, 3, 5, 51])
def test_a_pairs_count_that_leaves_a_vcpu_one_reference_more_is_refused(pairs: int) -> None:
    # check_args, not main: where the count passes, main goes on to start the probe's engine processes
    why = duet.check_args(duet.build_parser().parse_args(["--pairs", str(pairs)]))
    assert why == f"--pairs {pairs}: {PAIRS_ALLOWED}"


def test_every_allowed_pairs_count_runs_each_kinds_reference_as_often_on_either_vcpu() -> None:
    for pairs in range(2, 51, 2):
        why = duet.check_args(duet.build_parser().parse_args(["--pairs", str(pairs)]))
        assert why is None or not why.startswith("--pairs"), why  # (a host without vCPUs 0 and 1 is refused apart)
        for kind in duet.KINDS:
            refs = [cpus[0] for _block, k, cpus in duet.schedule(pairs) if k == kind]
            assert refs.count(0) == refs.count(1) == pairs // 2, (pairs, kind)


def test_a_fresh_runs_folder_that_is_not_there_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-such-folder"
    assert duet.main(["--fresh-runs", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --fresh-runs {missing}: not a folder (give the folder holding "
                                               "the default's run directories)")


def test_fresh_estimates_are_asked_for_and_skip_folders_without_run_records(tmp_path: Path, capsys) -> None:
    duet.print_fresh(None)
    assert capsys.readouterr().out.strip() == ("fresh-process estimates: none asked for (--fresh-runs DIR, e.g. "
                                               "results/default)")
    (tmp_path / "not-a-run").mkdir()  # e.g. a folder of plots beside the runs: no *-runs.jsonl
    duet.print_fresh(tmp_path)
    assert capsys.readouterr().out.strip() == f"fresh-process estimates: no run directory under {tmp_path}"


@pytest.mark.parametrize("argv, names", [(["--pairs", "x"], "argument --pairs: invalid int value: 'x'"),
                                         (["--no-such-option"], "unrecognized arguments: --no-such-option")])
def test_what_argparse_refuses_is_one_line_and_exit_2(argv: list[str], names: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        duet.main(argv)
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {names}"


def test_vcpu_use_reads_the_vcpu_line_and_splits_own_from_foreign(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 50 900 0 0 0 3 0 0\ncpu1 10 0 5 90 0 1 1 0 0 0\n")
    assert duet.vcpu_ticks(1, stat) == (17, 0) and duet.vcpu_ticks(0, stat) == (150, 3)
    with pytest.raises(ValueError, match="no line for cpu2"):
        duet.vcpu_ticks(2, stat)
    hz = duet.os.sysconf("SC_CLK_TCK")
    use = duet.vcpu_use((0, 0), (hz * 10, hz // 10), own_cpu_s=9.0, wall_s=10.0)
    assert use == pytest.approx(dict(own=0.9, foreign=0.1, steal=0.01), abs=1e-9)


def test_summary_prints_the_paired_ratios_and_the_duet_noise(capsys) -> None:
    results = _blocks(random.Random(5), 3, 6)
    duet.summarize(results)
    out = capsys.readouterr().out
    d = duet.arm_ratio(results, "AB")
    assert f"B/A (current (1,1) / baseline): {1 + d.center_pct / 100:.4f}" in out
    aa = [r.log_ratio for r in results if r.kind == "AA"]  # every simulated pair has the reference on vCPU 0
    assert f"(vCPU1 / vCPU0) {100 * statistics.stdev(aa):.2f}% over 3 pairs (2 df" in out
    assert "C/A (control 2.6 ms / baseline)" in out and "leak: A next to B" in out


def _fake_launches(monkeypatch: pytest.MonkeyPatch, fail_slot: int | None = None) -> list:
    """``launch_one`` replaced by a 30-s sleep in its own session per slot (as an engine process is started), or a
    ``RuntimeError`` for ``fail_slot``; returns the started processes."""
    started: list = []

    def launch(_setup, out: Path, name: str, arm: str, slot: int, _cpu: int, _rounds: int):
        if slot == fail_slot:
            raise RuntimeError(f"slot {slot} did not start")
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
        started.append(p)
        return p, out / f"{name}-{slot}{arm}.json"

    monkeypatch.setattr(duet, "launch_one", launch)
    return started


def test_a_sigterm_of_the_script_stops_the_running_pair_before_it_ends(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    started = _fake_launches(monkeypatch)
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        duet.exit_on_signals()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()  # a `kill` or `timeout` of the script
        with pytest.raises(SystemExit) as e:
            duet.run_pair(None, tmp_path, "p00", "AB", (0, 1), 6)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert e.value.code == 128 + signal.SIGTERM
    assert len(started) == 2 and all(p.returncode is not None for p in started)  # stopped and reaped


def test_a_failed_second_launch_stops_the_first_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _fake_launches(monkeypatch, fail_slot=1)
    with pytest.raises(RuntimeError, match="slot 1 did not start"):
        duet.run_pair(None, tmp_path, "p00", "AB", (0, 1), 6)
    assert len(started) == 1 and started[0].returncode is not None
