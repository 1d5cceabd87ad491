"""Speed probe: the host's speed measured beside a sequential design, as a covariate of each round's throughput (a
measurement script, not a verdict of record; runners and analysis are unchanged).

What is modelled: on this 2-vCPU KVM host the process-level noise of throughput comes from the host's speed
episodes (seconds to tens of seconds, outside the VM) that move both vCPUs together
(``docs/measurements/same-time-2026-12-05.md``: two 1-thread GEMM processes, one per vCPU, 1-s speeds correlated
+1.00). Fresh processes ~20 s apart sample different episodes, so pairing by block cancels little of it. Here the
engine runs one case at a time, as the default does, in a fresh process pinned to vCPU 0 (``taskset -c 0``), while a
low-duty probe pinned to vCPU 1 (``probe`` subcommand) times one fixed unit of work every ``--period-ms`` (200 ms):
``PROBE_REPS`` 1-thread float32 ``numpy.matmul`` of ``PROBE_N`` x ``PROBE_N`` (about 2-3 ms here, a working set
of 3 x 256 KiB: about 1% of one vCPU, little of the shared L3 or memory bandwidth), recording per unit its wall
start (``time.time()``, s), wall seconds and CPU seconds (``time.process_time``: a unit descheduled by other work on
vCPU 1 is not counted slow). The probe starts before anything else, runs for the whole script and is stopped on
every exit (``finally``; SIGTERM / SIGHUP through ``duet_probe.exit_on_signals``); it also ends by itself when its
parent is gone (``os.getppid`` changes: no orphan after a SIGKILL of the script).

Each engine process is ``scripts/duet_probe.py``'s worker as a pair of one (``duet_probe.run_pair`` with one arm:
the default's plan, spec, environment and model; ``vllm.LLM`` built as ``runners.incase.bench_one`` builds it; per
round the wall start, seconds and tokens), its twin slot marked ready and done so that it neither waits nor measures
past ``--rounds``. Arms: ``baseline``, ``baseline_twin`` (a second baseline process) and ``control_delay_2_6ms``
(a 2.6 ms sleep per forward: about 20-25% on this host), in ``--blocks`` blocks, ABBA order
(``runners.planning.blocks.block_order``: odd blocks baseline, control, twin; even blocks reversed).

The adjustment: the reference unit time is the median CPU seconds of every probe unit of the run; a round's host
speed is the reference over the median unit time of the probe units whose midpoints lie inside the round's wall
interval (fewer than ``MIN_WINDOW`` inside: the ``MIN_WINDOW`` units nearest the round's midpoint, counted as
widened); the round's adjusted tokens are its tokens over that speed, and a process's adjusted tok/s is its rounds'
adjusted tokens over their seconds, as its raw tok/s is their tokens over their seconds.

Printed (raw and adjusted side by side): per process its tok/s, mean probe speed, vCPU use and whether its tokens
equal the first baseline process's; per arm the SD over processes of log tok/s (each process's value, so its rounds'
noise enters over their count); the A/A (baseline_twin vs baseline) and the control vs baseline per-block log ratio
SD and the paired t interval over blocks (``analysis.comparison.verdict_rule.decide_paired``), with the paired MDE at
the run's blocks (``analysis.comparison.power.detectable_paired_cost_pct``: 80% power, 95%); the probe's duty (its
units' wall seconds over the wall span it ran), its unit times (median, SD of log, range); the correlation of the
per-round engine speed (log round tok/s less its arm's mean) with log probe speed, pooled and within processes, and
the slope of the first on the second (1 when dividing by the probe's speed is the right adjustment).

What is deliberately not modelled: contention checks (``host_load``), evidence beyond the offloaded-layer count and
the control's log line, a fitted slope in the adjustment (the probe's speed divides, the slope is only printed).

Usage: ``python scripts/speed_probe.py [--blocks 4] [--rounds 6] [--period-ms 200] [--out DIR]``; ``--analyze DIR``
prints the analysis of a finished run again from ``DIR/speed-probe.json`` and ``DIR/probe.jsonl``. Exit 0 when every
process ran, 1 when one failed, 2 on bad input (one line, before any process starts); ``--out`` is never reused.

The lead's measurement (quiet host, nothing else running; 12 engine processes of ~20 s each, about 4-5 min):

    .venv/bin/python scripts/speed_probe.py --blocks 4 --rounds 6 --out results/speed-probe/$(date -u +%Y%m%dT%H%MZ)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import duet_probe as duet  # noqa: E402
from analysis.comparison.power import detectable_paired_cost_pct  # noqa: E402
from analysis.comparison.verdict_rule import decide_paired  # noqa: E402
from runners.planning.blocks import block_order  # noqa: E402

BASELINE, TWIN, CONTROL = "baseline", "baseline_twin", "control_delay_2_6ms"
ARM_LETTER = {BASELINE: "A", TWIN: "A", CONTROL: "C"}
"""Arm -> ``duet_probe.ARMS`` letter of the default's case it runs (the twin is a second baseline process)."""
ENGINE_CPU, PROBE_CPU = 0, 1
PROBE_N, PROBE_REPS = 256, 11
"""The probe's unit: ``PROBE_REPS`` float32 matmuls of ``PROBE_N`` x ``PROBE_N`` (0.23 ms each on this host, 18:30 UTC 2026-12-05: about 2.5 ms)."""
MIN_WINDOW = 3
"""Fewest probe units behind a round's speed (fewer inside the round: the nearest ones)."""
PROBE_START_TIMEOUT_S = 60.0
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# ---------------------------------------------------------------- pure parts (tests/test_speed_probe.py)

@dataclass(frozen=True)
class Sample:
    """One probe unit: wall start (``time.time()``, s), wall seconds, CPU seconds."""

    t: float
    s: float
    cpu_s: float

    @property
    def mid(self) -> float:
        return self.t + self.s / 2


def schedule(blocks: int) -> list[tuple[int, str]]:
    """``(block, arm)`` in run order: block ``b`` (1-based) as ``block_order(BASELINE, [CONTROL, TWIN], b)``."""
    return [(b, arm) for b in range(1, blocks + 1) for arm in block_order(BASELINE, [CONTROL, TWIN], b)]


def reference_unit_s(samples: Sequence[Sample]) -> float:
    """The median CPU seconds of ``samples`` (the unit time at which the host's speed is 1). Raises ``ValueError``
    without samples."""
    if not samples:
        raise ValueError("no probe sample: the host's speed is unknown")
    return statistics.median(x.cpu_s for x in samples)


def window(samples: Sequence[Sample], t0: float, t1: float, min_n: int = MIN_WINDOW) -> tuple[list[Sample], bool]:
    """The samples whose midpoints lie in ``[t0, t1]`` and ``False``; fewer than ``min_n`` there: the ``min_n``
    samples whose midpoints are nearest ``(t0 + t1) / 2`` and ``True`` (widened)."""
    inside = [x for x in samples if t0 <= x.mid <= t1]
    if len(inside) >= min_n:
        return inside, False
    mid = (t0 + t1) / 2
    return sorted(samples, key=lambda x: abs(x.mid - mid))[:min_n], True


def round_speed(samples: Sequence[Sample], rnd: duet.Round, ref: float) -> tuple[float, bool]:
    """``(host speed in the round's wall interval, widened)``: ``ref`` over the median CPU seconds of its window."""
    w, widened = window(samples, rnd.t, rnd.end)
    return ref / statistics.median(x.cpu_s for x in w), widened


@dataclass(frozen=True)
class ProcValue:
    """One engine process: raw and adjusted tok/s, and per round ``(raw tok/s, host speed, widened)``."""

    name: str
    arm: str
    block: int
    raw: float
    adj: float
    rounds: tuple[tuple[float, float, bool], ...]

    def value(self, adjusted: bool) -> float:
        return self.adj if adjusted else self.raw


def proc_value(name: str, arm: str, block: int, rounds: Sequence[duet.Round], samples: Sequence[Sample],
               ref: float) -> ProcValue:
    """The process's raw tok/s (tokens over seconds) and adjusted tok/s (tokens / speed over seconds)."""
    per = [(r.tok_s, *round_speed(samples, r, ref)) for r in rounds]
    secs = sum(r.s for r in rounds)
    adj = sum(r.tokens / sp for r, (_v, sp, _w) in zip(rounds, per, strict=True)) / secs
    return ProcValue(name, arm, block, duet.tok_s(rounds), adj, tuple(per))


def arm_sd(procs: Sequence[ProcValue], arm: str, adjusted: bool) -> float:
    """SD over the arm's processes of log tok/s (nan with fewer than 2)."""
    v = [math.log(p.value(adjusted)) for p in procs if p.arm == arm]
    return statistics.stdev(v) if len(v) >= 2 else math.nan


def block_pairs(procs: Sequence[ProcValue], arm: str, ref_arm: str = BASELINE) -> list[tuple[ProcValue, ProcValue]]:
    """``(arm's process, ref_arm's process)`` of every block holding both, in block order."""
    by = {(p.block, p.arm): p for p in procs}
    return [(by[(b, arm)], by[(b, ref_arm)]) for b in sorted({p.block for p in procs})
            if (b, arm) in by and (b, ref_arm) in by]


def paired(procs: Sequence[ProcValue], arm: str, adjusted: bool) -> tuple[list[float], Any, float]:
    """``(per-block log ratios arm / baseline, decide_paired or None, paired MDE % from their SD or nan)`` (the
    interval and the MDE need 2 blocks)."""
    pairs = block_pairs(procs, arm)
    logs = [math.log(a.value(adjusted) / b.value(adjusted)) for a, b in pairs]
    if len(pairs) < 2:
        return logs, None, math.nan
    d = decide_paired([a.value(adjusted) for a, _ in pairs], [b.value(adjusted) for _, b in pairs])
    return logs, d, detectable_paired_cost_pct(len(pairs), statistics.stdev(logs))


def probe_stats(samples: Sequence[Sample]) -> dict[str, float]:
    """The probe's duty (its units' wall seconds over the span from its first start to its last end), and its
    units' CPU ms: median, SD of log (fraction), min, max, count."""
    span = samples[-1].t + samples[-1].s - samples[0].t
    logs = [math.log(x.cpu_s) for x in samples]
    return dict(duty=sum(x.s for x in samples) / span if span > 0 else math.nan,
                median_ms=1e3 * statistics.median(x.cpu_s for x in samples),
                sd_log=statistics.stdev(logs) if len(logs) >= 2 else math.nan,
                min_ms=1e3 * min(x.cpu_s for x in samples), max_ms=1e3 * max(x.cpu_s for x in samples),
                n=len(samples), span_s=span)


def _corr_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Pearson correlation of ``x`` and ``y`` and the least-squares slope of ``y`` on ``x`` (nan when degenerate)."""
    if len(x) < 3:
        return math.nan, math.nan
    xa, ya = np.asarray(x), np.asarray(y)
    xc, yc = xa - xa.mean(), ya - ya.mean()
    sxx, syy = float(xc @ xc), float(yc @ yc)
    if sxx == 0 or syy == 0:
        return math.nan, math.nan
    return float(xc @ yc) / math.sqrt(sxx * syy), float(xc @ yc) / sxx


def speed_correlation(procs: Sequence[ProcValue], within: bool) -> tuple[float, float, int]:
    """``(correlation, slope, rounds)`` of per-round engine speed (log round tok/s) on log probe speed: each
    centred by its arm's mean (``within`` False) or by its process's mean (``within`` True)."""
    groups: dict[Any, list[tuple[float, float]]] = {}
    for p in procs:
        key = p.name if within else p.arm
        groups.setdefault(key, []).extend((math.log(sp), math.log(v)) for v, sp, _w in p.rounds)
    xs: list[float] = []
    ys: list[float] = []
    for pts in groups.values():
        mx, my = statistics.mean(x for x, _ in pts), statistics.mean(y for _, y in pts)
        xs += [x - mx for x, _ in pts]
        ys += [y - my for _, y in pts]
    r, slope = _corr_slope(xs, ys)
    return r, slope, len(xs)


# ---------------------------------------------------------------- the probe (its own process, on vCPU 1)

def probe_loop(out: Path, period_s: float, parent_pid: int, n: int = PROBE_N, reps: int = PROBE_REPS) -> int:
    """Time one unit (``reps`` matmuls of ``n`` x ``n`` float32) every ``period_s`` s, one JSON line per unit
    (``t``, ``s``, ``cpu_s``) appended to ``out`` and flushed, until the parent ``parent_pid`` is gone."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty_like(a)
    with out.open("a", buffering=1) as f:
        nxt = time.monotonic()
        while os.getppid() == parent_pid:
            t, w0, c0 = time.time(), time.perf_counter(), time.process_time()
            for _ in range(reps):
                np.matmul(a, b, out=c)
            f.write(json.dumps(dict(t=t, s=time.perf_counter() - w0, cpu_s=time.process_time() - c0)) + "\n")
            nxt += period_s
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:  # a unit (or a deschedule) overran the period: no catch-up burst
                nxt = time.monotonic()
    return 0


def start_probe(out: Path, period_s: float, cpu: int = PROBE_CPU,
                timeout_s: float = PROBE_START_TIMEOUT_S) -> subprocess.Popen:
    """Start the probe pinned to ``cpu`` (own session, one BLAS thread) writing ``out/probe.jsonl``; return once its
    first unit is written. Raises ``RuntimeError`` (the probe stopped first) when it exits or writes nothing in
    ``timeout_s``."""
    env = dict(os.environ, **{k: "1" for k in THREAD_ENV})
    argv = ["taskset", "-c", str(cpu), sys.executable, str(Path(__file__).resolve()), "probe",
            "--out", str(out / "probe.jsonl"), "--period-ms", f"{1e3 * period_s:g}", "--parent-pid", str(os.getpid())]
    with open(out / "probe.log", "wb") as log:
        p = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    t0, path = time.monotonic(), out / "probe.jsonl"
    while not (path.is_file() and path.stat().st_size > 0):
        if p.poll() is not None or time.monotonic() - t0 > timeout_s:
            duet._stop([p])
            tail = (out / "probe.log").read_text(errors="replace")[-500:]
            raise RuntimeError(f"the speed probe wrote no unit (exit {p.returncode}); its log ends: {tail}")
        time.sleep(0.05)
    return p


@contextlib.contextmanager
def probe_running(out: Path, period_s: float) -> Iterator[subprocess.Popen]:
    """The probe (``start_probe``) for the body's duration; stopped (TERM, then KILL, and reaped) on every exit."""
    p = start_probe(out, period_s)
    try:
        yield p
    finally:
        duet._stop([p])


# ---------------------------------------------------------------- the engine processes

def run_process(setup: duet.Setup, out: Path, name: str, arm: str, rounds: int) -> dict[str, Any]:
    """One engine process of ``arm`` pinned to ``ENGINE_CPU``: ``duet_probe.run_pair`` with one slot, its twin slot
    marked ready and done (so the worker neither waits at the barrier nor measures past ``rounds``)."""
    bdir = out / "pairs" / name
    bdir.mkdir(parents=True)
    for f in ("ready-1", "done-1"):
        (bdir / f).touch()
    return duet.run_pair(setup, out, name, ARM_LETTER[arm], (ENGINE_CPU,), rounds)


def measure(out: Path, blocks: int, rounds: int, period_s: float) -> None:
    """The probe, then every process of ``schedule(blocks)``; ``out/speed-probe.json`` rewritten after each."""
    t0, recs = time.monotonic(), []
    with probe_running(out, period_s):
        setup = duet.default_setup()
        order = schedule(blocks)
        for i, (block, arm) in enumerate(order):
            rec = run_process(setup, out, f"p{i:02d}-{arm}", arm, rounds)
            rec.update(arm=arm, block=block)
            recs.append(rec)
            print(f"process {i + 1}/{len(order)} block {block} {arm}: {rec['error'] or 'ok'} ({rec['wall_s']:.0f} s)",
                  flush=True)
            doc = dict(blocks=blocks, rounds=rounds, period_ms=1e3 * period_s, engine_cpu=ENGINE_CPU,
                       probe_cpu=PROBE_CPU, probe_unit=dict(n=PROBE_N, reps=PROBE_REPS), procs=recs,
                       wall_s=time.monotonic() - t0)
            (out / "speed-probe.json").write_text(json.dumps(doc))


# ---------------------------------------------------------------- the analysis

def load_samples(path: Path) -> list[Sample]:
    """The probe's units from its JSON lines, in time order (a last line cut by the probe's stop is skipped)."""
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError, KeyError):
            d = json.loads(line)
            out.append(Sample(d["t"], d["s"], d["cpu_s"]))
    return sorted(out, key=lambda x: x.t)


def _pct_sd(x: float) -> str:
    return f"{100 * x:.2f}%"


def _ci(d: Any) -> str:
    if d is None:
        return "no interval (needs 2 blocks)"
    return (f"{d.center_pct:+.1f}% (CI{100 * d.confidence:.3g} paired t over {d.n_a} blocks {d.ci_low_pct:+.1f}%.."
            f"{d.ci_high_pct:+.1f}%; verdict {d.verdict})")


def print_processes(procs: Sequence[ProcValue], recs: Sequence[dict[str, Any]]) -> None:
    """One line per engine process."""
    ref_digests = next((r["procs"][0]["rounds"] for r in recs if r["arm"] == BASELINE), [])
    for p, rec in zip(procs, recs, strict=True):
        rr, ev, use = rec["procs"][0]["rounds"], rec["evidence"][0], rec["procs"][0]["vcpu"]
        n = min(len(rr), len(ref_digests))
        same = [r["digest"] for r in rr[:n]] == [r["digest"] for r in ref_digests[:n]]
        speed = statistics.mean(sp for _v, sp, _w in p.rounds)
        widened = sum(w for _v, _sp, w in p.rounds)
        print(f"  {p.name} block {p.block}: raw {p.raw:.1f} adjusted {p.adj:.1f} tok/s | probe speed mean {speed:.3f}"
              f" over {len(p.rounds)} rounds ({widened} widened) | vCPU own {use['own']:.2f} foreign "
              f"{use['foreign']:.2f} steal {use['steal']:.3f} | wrapped {ev['wrapped_count']}, control acted "
              f"{ev['control_acted']}, tokens same as the first baseline {same}")
        if use["foreign"] > duet.FOREIGN_LIMIT:
            print(f"    WARNING {p.name}: other work used {use['foreign']:.0%} of vCPU {ENGINE_CPU} while it measured "
                  f"(limit {duet.FOREIGN_LIMIT:.0%}): its rounds did not run alone")


def summarize(procs: Sequence[ProcValue], samples: Sequence[Sample]) -> None:
    """The per-arm, paired, probe and correlation lines (module docstring)."""
    for arm in (BASELINE, TWIN, CONTROL):
        n = sum(p.arm == arm for p in procs)
        print(f"{arm}: SD over {n} processes of log tok/s raw {_pct_sd(arm_sd(procs, arm, False))}, adjusted "
              f"{_pct_sd(arm_sd(procs, arm, True))}")
    for arm, what in ((TWIN, "A/A baseline_twin / baseline"), (CONTROL, "control / baseline")):
        for adjusted in (False, True):
            logs, d, mde = paired(procs, arm, adjusted)
            sd = statistics.stdev(logs) if len(logs) >= 2 else math.nan
            print(f"{what} {'adjusted' if adjusted else 'raw'}: per-block log ratio SD {_pct_sd(sd)} over "
                  f"{len(logs)} blocks [{' '.join(f'{duet.pct(v):+.1f}' for v in logs)}]; {_ci(d)}; paired MDE at "
                  f"{len(logs)} blocks {mde:.1f}%")
    st = probe_stats(samples)
    print(f"probe: duty {100 * st['duty']:.2f}% of {st['span_s']:.0f} s wall, {st['n']} units, unit CPU ms median "
          f"{st['median_ms']:.3f} (the reference), SD of log {_pct_sd(st['sd_log'])}, range "
          f"{st['min_ms']:.3f}-{st['max_ms']:.3f}")
    for within, how in ((False, "centred per arm"), (True, "centred per process")):
        r, slope, n = speed_correlation(procs, within)
        print(f"round engine speed vs probe speed (log, {how}): correlation {r:+.2f}, slope {slope:.2f} over "
              f"{n} rounds")


def analyze(out: Path) -> int:
    """Print the analysis of ``out``; 1 when a process failed or none ran, else 0."""
    doc = json.loads((out / "speed-probe.json").read_text())
    samples = load_samples(out / "probe.jsonl")
    recs = [r for r in doc["procs"] if r["error"] is None]
    for r in doc["procs"]:
        if r["error"] is not None:
            print(f"FAILED process {r['name']} ({r['arm']}): {r['error']} (logs under {out}/logs)")
    print(f"speed probe {out}: {len(recs)} engine processes on vCPU {doc['engine_cpu']}, {doc['rounds']} rounds each, "
          f"probe on vCPU {doc['probe_cpu']} every {doc['period_ms']:g} ms, wall {doc['wall_s']:.0f} s")
    if not recs or not samples:
        print("nothing to analyse: " + ("no engine process finished" if not recs else "no probe unit recorded"))
        return 1
    ref = reference_unit_s(samples)
    procs = [proc_value(r["name"], r["arm"], r["block"], duet._rounds(r["procs"][0]), samples, ref) for r in recs]
    print_processes(procs, recs)
    summarize(procs, samples)
    return 0 if len(recs) == len(doc["procs"]) else 1


# ---------------------------------------------------------------- entry

def build_parser() -> argparse.ArgumentParser:
    ap = duet._Parser(prog="python scripts/speed_probe.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ap.add_argument("--blocks", type=int, default=4, help="ABBA blocks of baseline, control, baseline_twin")
    ap.add_argument("--rounds", type=int, default=6, help="measured rounds per engine process")
    ap.add_argument("--period-ms", type=float, default=200.0, help="the probe's period (one unit each)")
    ap.add_argument("--out", default=None, help="output directory (new; default results/speed-probe/<UTC time>)")
    ap.add_argument("--analyze", default=None, help="print the analysis of a finished run directory and exit")
    p = sub.add_parser("probe", help="the speed probe (started by this script)")
    p.add_argument("--out", required=True)
    p.add_argument("--period-ms", type=float, required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    return ap


def check_args(a: argparse.Namespace) -> str | None:
    """One line naming a bad value and what is allowed, or None."""
    if not 1 <= a.blocks <= 50:
        return f"--blocks {a.blocks}: allowed 1..50"
    if not 1 <= a.rounds <= 200:
        return f"--rounds {a.rounds}: allowed 1..200"
    if not 50 <= a.period_ms <= 5000:
        return f"--period-ms {a.period_ms:g}: allowed 50..5000"
    if a.analyze is not None:
        return None if (Path(a.analyze) / "speed-probe.json").is_file() else \
            f"--analyze {a.analyze}: no speed-probe.json there"
    if not {ENGINE_CPU, PROBE_CPU} <= os.sched_getaffinity(0):
        return (f"this process may run on vCPUs {sorted(os.sched_getaffinity(0))}: the probe needs vCPUs "
                f"{ENGINE_CPU} and {PROBE_CPU}")
    if a.out is not None and Path(a.out).exists():
        return f"--out {a.out}: exists (a run never reuses a directory)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "probe":
        return probe_loop(Path(a.out), a.period_ms / 1e3, a.parent_pid)
    why = check_args(a)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if a.analyze is not None:
        return analyze(Path(a.analyze))
    out = Path(a.out or ROOT / "results" / "speed-probe" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True)
    duet.exit_on_signals()
    measure(out, a.blocks, a.rounds, a.period_ms / 1e3)
    return analyze(out)


if __name__ == "__main__":
    raise SystemExit(main())
