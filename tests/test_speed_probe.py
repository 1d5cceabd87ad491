"""scripts/speed_probe.py: the window matching, the adjustment and the printed analysis on simulated engine rounds
and probe units whose host speed is known; its bad-argument lines; the probe process's start and stop (no orphan).

The simulation: the host's speed is a piecewise-constant series of episodes (lengths exponential, mean 12 s; levels
lognormal, SD 15%), as measured here (``docs/measurements/noise-source-2026-12-05.md``). Each engine process's rounds
take ``tokens / (arm speed x host(t) x own noise)`` seconds; each probe unit takes ``unit / probe_host(t)`` CPU
seconds, where ``probe_host`` is the engine's host (shared episodes, as on this VM) or an independent one.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
sp = load_script("speed_probe")
duet = sp.duet

TOKENS = 256
COST = 0.78  # the simulated control's throughput over the baseline's (a 22% cost)
SPEED = {sp.BASELINE: 200.0, sp.TWIN: 200.0, sp.CONTROL: 200.0 * COST}
UNIT_S = 0.0025
needs_two_vcpus = pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="the probe pins to vCPU 1")
"""The probe-process tests also carry ``heavy``: each starts a probe process (1.3-2.2 s here)."""


def _host(rng: random.Random, t_end: float, mean_s: float = 12.0, sd: float = 0.15):
    """A host speed factor of ``t``: episodes of exponential length (mean ``mean_s``), lognormal levels (SD ``sd``)."""
    edges, levels, t = [], [], 0.0
    while t < t_end:
        edges.append(t)
        levels.append(math.exp(rng.gauss(0.0, sd)))
        t += rng.expovariate(1.0 / mean_s)
    return lambda x: levels[max(0, bisect.bisect_right(edges, x) - 1)]


def _rounds(t0: float, speed: float, n: int, host, own: float, rng: random.Random) -> list:
    out, t = [], t0
    for _ in range(n):
        s = TOKENS / (speed * host(t) * math.exp(rng.gauss(0.0, own)))
        out.append(duet.Round(t, s, TOKENS))
        t += s
    return out


def _simulate(seed: int, blocks: int, shared: bool, rounds: int = 6, own: float = 0.01) -> tuple[list, list]:
    """``(records as speed_probe.measure writes them, probe samples)``: ``schedule(blocks)``, a process every 20 s
    (12 s start-up, then its rounds), one probe unit every 0.2 s from the start."""
    rng = random.Random(seed)
    order = sp.schedule(blocks)
    t_end = 20.0 * len(order) + 30.0
    host = _host(rng, t_end)
    probe_host = host if shared else _host(random.Random(seed + 1000), t_end)
    recs = []
    for i, (block, arm) in enumerate(order):
        rr = _rounds(20.0 * i + 12.0, SPEED[arm], rounds, host, own, rng)
        recs.append(dict(name=f"p{i:02d}-{arm}", arm=arm, block=block, kind=sp.ARM_LETTER[arm], cpus=[0], wall_s=20.0,
                         error=None, procs=[dict(rounds=[dict(t=r.t, s=r.s, tokens=r.tokens, digest=f"g{j}")
                                                         for j, r in enumerate(rr)],
                                                 vcpu=dict(own=1.0, foreign=0.0, steal=0.0))],
                         evidence=[dict(wrapped_count=0, offloaded_bytes=0, control_acted=arm == sp.CONTROL)]))
    samples = []
    for k in range(int(t_end / 0.2)):
        t = 0.2 * k
        cpu = UNIT_S / probe_host(t) * math.exp(rng.gauss(0.0, 0.01))
        samples.append(sp.Sample(t, cpu, cpu))
    return recs, samples


def _values(recs: list, samples: list) -> list:
    ref = sp.reference_unit_s(samples)
    return [sp.proc_value(r["name"], r["arm"], r["block"], duet._rounds(r["procs"][0]), samples, ref) for r in recs]


def _write(d: Path, recs: list, samples: list, blocks: int) -> Path:
    d.mkdir()
    doc = dict(blocks=blocks, rounds=6, period_ms=200.0, engine_cpu=0, probe_cpu=1, probe_unit={}, procs=recs,
               wall_s=20.0 * len(recs))
    (d / "speed-probe.json").write_text(json.dumps(doc))
    (d / "probe.jsonl").write_text("".join(json.dumps(dict(t=x.t, s=x.s, cpu_s=x.cpu_s)) + "\n" for x in samples)
                                   + '{"t": 1')  # a last line cut by the probe's stop
    return d


# ---------------------------------------------------------------- window matching and the adjustment

def test_window_takes_the_units_inside_the_round_or_widens_to_the_nearest() -> None:
    samples = [sp.Sample(0.2 * k, 0.002, 0.002) for k in range(20)]  # midpoints 0.001, 0.201, ...
    inside, widened = sp.window(samples, 1.0, 2.0)
    assert [round(x.t, 1) for x in inside] == [1.0, 1.2, 1.4, 1.6, 1.8] and not widened
    near, widened = sp.window(samples, 1.05, 1.1)  # no unit inside a 50-ms round
    assert widened and sorted(round(x.t, 1) for x in near) == [0.8, 1.0, 1.2]


def test_round_speed_is_the_reference_over_the_window_median_and_adjusts_tokens_not_seconds() -> None:
    fast = [sp.Sample(0.1 * k, 1.0, 0.002) for k in range(10)]  # 0-1 s: units of 2 ms
    slow = [sp.Sample(1.0 + 0.1 * k, 1.0, 0.004) for k in range(10)]  # 1-2 s: units of 4 ms
    samples = [sp.Sample(x.t, 0.001, x.cpu_s) for x in fast + slow]
    r1, r2 = duet.Round(0.0, 1.0, 100), duet.Round(1.0, 1.0, 100)
    assert sp.round_speed(samples, r1, 0.003) == pytest.approx((1.5, False))
    assert sp.round_speed(samples, r2, 0.003) == pytest.approx((0.75, False))
    p = sp.proc_value("x", sp.BASELINE, 1, [r1, r2], samples, 0.003)
    assert p.raw == pytest.approx(100.0)
    assert p.adj == pytest.approx((100 / 1.5 + 100 / 0.75) / 2.0)
    with pytest.raises(ValueError, match="no probe sample"):
        sp.reference_unit_s([])


def test_schedule_is_abba_over_the_three_arms() -> None:
    order = sp.schedule(4)
    assert [a for b, a in order if b == 1] == [sp.BASELINE, sp.CONTROL, sp.TWIN]
    assert [a for b, a in order if b == 2] == [sp.TWIN, sp.CONTROL, sp.BASELINE]
    assert len(order) == 12 and {b for b, _ in order} == {1, 2, 3, 4}


def test_a_shared_episode_is_removed_and_the_control_cost_recovered() -> None:
    recs, samples = _simulate(seed=11, blocks=8, shared=True)
    procs = _values(recs, samples)
    for arm in (sp.BASELINE, sp.TWIN, sp.CONTROL):
        raw, adj = sp.arm_sd(procs, arm, False), sp.arm_sd(procs, arm, True)
        assert raw > 0.05 and adj < 0.3 * raw, (arm, raw, adj)
    aa_raw, _, _ = sp.paired(procs, sp.TWIN, False)
    aa_adj, d_aa, mde_aa = sp.paired(procs, sp.TWIN, True)
    assert len(aa_adj) == 8 and sp.statistics.stdev(aa_adj) < 0.3 * sp.statistics.stdev(aa_raw)
    assert d_aa.verdict != "slower" and d_aa.ci_low_pct < 0 < d_aa.ci_high_pct
    _, d_raw, mde_raw = sp.paired(procs, sp.CONTROL, False)
    _, d_adj, mde_adj = sp.paired(procs, sp.CONTROL, True)
    truth = 100 * (COST - 1)
    assert d_adj.ci_low_pct < truth < d_adj.ci_high_pct and d_adj.verdict == "slower"
    assert abs(d_adj.center_pct - truth) < 2.0
    assert d_adj.ci_high_pct - d_adj.ci_low_pct < 0.3 * (d_raw.ci_high_pct - d_raw.ci_low_pct)
    assert mde_adj < 0.3 * mde_raw and mde_aa < 5.0
    r, slope, n = sp.speed_correlation(procs, within=False)
    assert n == 8 * 3 * 6 and r > 0.9 and slope == pytest.approx(1.0, abs=0.15)


def test_a_probe_that_does_not_share_the_episodes_does_not_narrow_anything() -> None:
    recs, samples = _simulate(seed=11, blocks=8, shared=False)
    procs = _values(recs, samples)
    aa_raw, _, _ = sp.paired(procs, sp.TWIN, False)
    aa_adj, _, _ = sp.paired(procs, sp.TWIN, True)
    assert sp.statistics.stdev(aa_adj) > 0.8 * sp.statistics.stdev(aa_raw)
    r, _slope, _n = sp.speed_correlation(procs, within=False)
    assert abs(r) < 0.4


def test_probe_stats_duty_and_unit_spread() -> None:
    samples = [sp.Sample(0.2 * k, 0.002, 0.002 * (1.1 if k % 2 else 1.0)) for k in range(11)]
    st = sp.probe_stats(samples)
    assert st["duty"] == pytest.approx(11 * 0.002 / 2.002)
    assert st["median_ms"] == pytest.approx(2.0) and st["max_ms"] == pytest.approx(2.2) and st["n"] == 11


def test_analyze_prints_the_production_numbers_raw_and_adjusted(tmp_path: Path, capsys) -> None:
    recs, samples = _simulate(seed=5, blocks=4, shared=True)
    d = _write(tmp_path / "run", recs, samples, 4)
    assert sp.main(["--analyze", str(d)]) == 0
    out = capsys.readouterr().out
    procs = _values(recs, samples)
    for arm in (sp.BASELINE, sp.TWIN, sp.CONTROL):
        assert (f"{arm}: SD over 4 processes of log tok/s raw {100 * sp.arm_sd(procs, arm, False):.2f}%, adjusted "
                f"{100 * sp.arm_sd(procs, arm, True):.2f}%") in out
    logs, dec, mde = sp.paired(procs, sp.CONTROL, True)
    assert (f"control / baseline adjusted: per-block log ratio SD {100 * sp.statistics.stdev(logs):.2f}% over 4 "
            f"blocks") in out
    assert f"{dec.center_pct:+.1f}% (CI95 paired t over 4 blocks" in out and f"paired MDE at 4 blocks {mde:.1f}%" in out
    st = sp.probe_stats(samples)
    assert f"probe: duty {100 * st['duty']:.2f}% of" in out and f"{st['n']} units" in out
    r, slope, n = sp.speed_correlation(procs, within=True)
    assert f"(log, centred per process): correlation {r:+.2f}, slope {slope:.2f} over {n} rounds" in out
    assert out.count("tokens same as the first baseline True") == 12 and "WARNING" not in out


def test_analyze_names_a_failed_process_and_exits_1(tmp_path: Path, capsys) -> None:
    recs, samples = _simulate(seed=5, blocks=1, shared=True)
    recs[1] = dict(recs[1], error="exit codes [1]")
    recs[2]["procs"][0]["vcpu"]["foreign"] = 0.29  # other work on the engine's vCPU while it measured
    d = _write(tmp_path / "run", recs, samples, 1)
    assert sp.main(["--analyze", str(d)]) == 1
    out = capsys.readouterr().out
    assert f"FAILED process {recs[1]['name']} ({sp.CONTROL}): exit codes [1]" in out
    assert "no interval (needs 2 blocks)" in out
    assert f"WARNING {recs[2]['name']}: other work used 29% of vCPU 0 while it measured (limit 5%)" in out


# ---------------------------------------------------------------- bad input

def _exit_code(argv: list[str]) -> int:
    try:
        return sp.main(argv)
    except SystemExit as e:  # argparse's refusals (duet_probe._Parser: one line, exit 2)
        return int(e.code or 0)


@pytest.mark.parametrize("argv, line", [(["--blocks", "0"], "--blocks 0: allowed 1..50"),
                                        (["--rounds", "201"], "--rounds 201: allowed 1..200"),
                                        (["--period-ms", "10"], "--period-ms 10: allowed 50..5000"),
                                        (["--blocks", "x"], "argument --blocks: invalid int value: 'x'")])
def test_bad_values_are_one_line_and_exit_2_before_any_process(argv, line, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sp, "start_probe", lambda *a, **k: pytest.fail("a process started"))
    assert _exit_code(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {line}"]


def test_an_existing_out_or_a_missing_analysis_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sp, "start_probe", lambda *a, **k: pytest.fail("a process started"))
    assert sp.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out {tmp_path}: exists (a run never reuses a directory)"
    assert sp.main(["--analyze", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --analyze {tmp_path}: no speed-probe.json there"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the probe process

def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.heavy
# exclusive: it asserts the probe's sampling interval (0.05 +- 0.04 s); beside the other passes on 2 cores the first
# gap was 0.163 s once (a fresh clone's make test at 159eadd, 2026-12-06), so it runs alone
@pytest.mark.exclusive
@needs_two_vcpus
def test_the_probe_writes_units_and_is_stopped_and_reaped(tmp_path: Path) -> None:
    with sp.probe_running(tmp_path, 0.05) as p:
        time.sleep(0.4)
        assert p.poll() is None
    assert p.returncode is not None
    samples = sp.load_samples(tmp_path / "probe.jsonl")
    assert len(samples) >= 3 and all(x.cpu_s > 0 and x.s > 0 for x in samples)
    assert samples[1].t - samples[0].t == pytest.approx(0.05, abs=0.04)


@pytest.mark.heavy
@needs_two_vcpus
def test_a_sigterm_of_the_script_stops_the_probe(tmp_path: Path) -> None:
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        duet.exit_on_signals()
        with pytest.raises(SystemExit) as e, sp.probe_running(tmp_path, 0.05) as p:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
            time.sleep(5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    assert e.value.code == 128 + signal.SIGTERM and p.returncode is not None


@pytest.mark.heavy
@needs_two_vcpus
def test_a_probe_that_cannot_write_is_refused_and_stopped(tmp_path: Path) -> None:
    (tmp_path / "probe.jsonl").mkdir()  # the probe cannot open its file: it exits
    with pytest.raises(RuntimeError, match="the speed probe wrote no unit"):
        sp.start_probe(tmp_path, 0.05)


@pytest.mark.heavy
@needs_two_vcpus
def test_the_probe_ends_by_itself_when_its_parent_is_killed(tmp_path: Path) -> None:
    code = ("import os, subprocess, sys, time; argv = ['taskset', '-c', '1', sys.executable, sys.argv[1], 'probe', "
            "'--out', sys.argv[2], '--period-ms', '50', '--parent-pid', str(os.getpid())]; "
            "p = subprocess.Popen(argv, start_new_session=True); print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "scripts" / "speed_probe.py"),
                               str(tmp_path / "probe.jsonl")], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    t0 = time.monotonic()
    while not (tmp_path / "probe.jsonl").is_file() and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    parent.kill()  # SIGKILL: no finally runs in the parent
    parent.wait()
    t0 = time.monotonic()
    while not _gone(pid) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert _gone(pid)


def test_an_engine_process_is_a_pair_of_one_whose_twin_is_ready_and_done(tmp_path: Path, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(duet, "run_pair", lambda *a: calls.append(a) or dict(error=None))
    sp.run_process(None, tmp_path, "p00-baseline_twin", sp.TWIN, 6)
    assert calls == [(None, tmp_path, "p00-baseline_twin", "A", (sp.ENGINE_CPU,), 6)]
    bdir = tmp_path / "pairs" / "p00-baseline_twin"
    assert duet.barrier(bdir, 0, timeout_s=0.1) < 0.1  # the worker's barrier does not wait
    assert (bdir / "done-1").is_file()  # and its loop stops at --rounds (it waits for the twin's done-1)
