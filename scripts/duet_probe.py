"""Duet probe: the default's baseline against an arm AT THE SAME TIME, one engine process per vCPU (a measurement
script, not a verdict of record; runners and analysis are unchanged).

What is modelled: duet benchmarking (Bulej et al., ICPE 2020) on this 2-vCPU host, where the host's speed moves
both vCPUs together (two 1-thread GEMM processes, one per vCPU: 1-s speeds correlated +1.00). Each pair is two
fresh case processes started together, each pinned to one vCPU (``taskset -c``) with the default's case command
and environment: the default's plan (``runners.pins.compose`` + ``runners.planning.plan.plan``: runtime
``cpu_measure``, i.e. ``OMP_NUM_THREADS=1``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``VLLM_CPU_KVCACHE_SPACE``,
``OFFLOAD_CPU_KERNEL_PATH=plain``; workload input_len 8, max_tokens 64, 4 prompts), the spec written by
``runners.kinds.registry.case_argv``, the environment of ``runners.launching.case_command.case_env`` (the plugin
activated by ``OFFLOAD_IMPL``, the evidence hook, the control's ``OFFLOAD_STEP_DELAY_MS``), the model built by
``runners.models.built.ensure_built``. The process (``worker``) builds ``vllm.LLM`` as ``runners.incase.bench_one``
does (``engine_kwargs``, its round function), runs the warm-up rounds, waits at a file barrier for its twin, then
runs rounds until it has ``--rounds`` and its twin has too, recording per round the wall start (``time.time()``),
seconds and tokens. Arms: A = ``baseline``, B = ``current_g1_n1`` (current (1,1)), C = ``control_delay_2_6ms``.
Pairs A||A, A||B, A||C, ``--pairs K`` blocks, the order of the three rotated per block, the vCPU of each arm
alternated per block (so ``K`` is even: every arm runs as often on either vCPU, and a vCPU's own speed cancels in
B/A and C/A).

Printed: per pair the same-time log ratio over the common rounds (rounds that ended before the first of the twins
stopped) and per round (each round against the twin's round nearest in time); over pairs the SD of the A||A log
ratios (the duet's noise), B/A and C/A with the paired t interval over pairs (``analysis.comparison.verdict_rule.
decide_paired``: the pair is the unit), the leak (A's tok/s next to B against A's next to A in the same block: NOT
same-time, blocks' pairs run ~30-40 s apart), the SD of A's difference 25 s apart (rounds) and between consecutive
A processes on one vCPU (what a sequential design pairs), and the fresh-process (sequential) B/A and C/A of the
default runs under ``--fresh-runs DIR`` when given (``analysis.load.load_run``, ``decide``: Welch t over processes;
folders without ``*-runs.jsonl`` skipped).

What is deliberately not modelled: the leak itself (both arms share L3 and memory bandwidth: B's weight copies slow
its co-running A, biasing B/A toward 1; the leak line bounds it only as well as the sequential noise allows),
contention checks (``host_load``), evidence beyond the offloaded-layer count and the control's log lines.

Usage: ``python scripts/duet_probe.py [--pairs 4] [--rounds 6] [--out DIR] [--fresh-runs DIR]``;
``--analyze DIR`` prints the analysis of a finished probe again. Exit 0 when every pair ran, 1 when a pair failed,
2 on bad input (before any process starts). A SIGTERM or SIGHUP (``exit_on_signals``), a Ctrl-C or a failed
launch stops the running pair's engine processes before the script ends (exit ``128 + N`` for a signal).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.comparison.verdict_rule import decide, decide_paired  # noqa: E402
from analysis.load import load_run  # noqa: E402
from runners.incase.bench_one import _round_fn, engine_kwargs, load_case  # noqa: E402
from runners.incase.case_input import checked_offload  # noqa: E402
from runners.incase.rounds import digest_ids  # noqa: E402
from runners.kinds.registry import case_argv  # noqa: E402
from runners.launching.case_command import HOST_MODEL_INFO_CACHE, case_env, share_model_info_cache  # noqa: E402
from runners.models.built import ensure_built  # noqa: E402
from runners.paths import CasePaths  # noqa: E402
from runners.pins import compose  # noqa: E402
from runners.planning.plan import plan  # noqa: E402

ARMS = {"A": "baseline", "B": "current_g1_n1", "C": "control_delay_2_6ms"}
"""Arm -> the default's label it runs (conf/matrix/same_runtime_cpu.yaml)."""
KINDS = ("AA", "AB", "AC")
"""The pairs of a block (the first letter is the reference)."""
LAG_S, LAG_TOL_S = 25.0, 5.0
"""The lag (s) of the one-process comparison the duet is set against, and its tolerance."""
BARRIER_TIMEOUT_S = 300.0
FOREIGN_LIMIT = 0.05
"""Share of a vCPU that other work may use while a pair measures before the pair is flagged."""
PAIR_TIMEOUT_S = 600.0


# ---------------------------------------------------------------- pure parts (tests/test_duet_probe.py)

@dataclass(frozen=True)
class Round:
    """One measured round: wall start (``time.time()``, s), wall seconds, output tokens."""

    t: float
    s: float
    tokens: int

    @property
    def end(self) -> float:
        return self.t + self.s

    @property
    def tok_s(self) -> float:
        return self.tokens / self.s


def common_rounds(x: Sequence[Round], y: Sequence[Round]) -> tuple[list[Round], list[Round]]:
    """The rounds of ``x`` and ``y`` that ended by the time the first of the two processes ended its last round
    (both ran throughout them: neither process stops before its twin has its rounds)."""
    if not x or not y:
        return [], []
    end = min(x[-1].end, y[-1].end) + 1e-6
    return [r for r in x if r.end <= end], [r for r in y if r.end <= end]


def tok_s(rounds: Sequence[Round]) -> float:
    """Tokens over seconds of ``rounds`` (tok/s), as a case's ``throughput_tok_s``."""
    return sum(r.tokens for r in rounds) / sum(r.s for r in rounds)


def pair_values(x: Sequence[Round], y: Sequence[Round]) -> tuple[float, float]:
    """``(tok/s of x, tok/s of y)`` over their common rounds. Raises ``ValueError`` without a common round."""
    cx, cy = common_rounds(x, y)
    if not cx or not cy:
        raise ValueError("the two processes have no common round")
    return tok_s(cx), tok_s(cy)


def round_log_ratios(x: Sequence[Round], y: Sequence[Round]) -> list[float]:
    """Per common round of ``x``: ``log(x tok/s / y tok/s)`` against ``y``'s common round whose midpoint is nearest."""
    cx, cy = common_rounds(x, y)
    out = []
    for r in cx:
        mid = r.t + r.s / 2
        o = min(cy, key=lambda q: abs(q.t + q.s / 2 - mid))
        out.append(math.log(r.tok_s / o.tok_s))
    return out


def lagged_sd(series: Sequence[tuple[float, float]], lag: float = LAG_S, tol: float = LAG_TOL_S) -> tuple[float, int]:
    """SD of ``v_j - v_i`` over the ``(t, v)`` points ``i`` that have a later point ``j`` with ``t_j - t_i`` within
    ``tol`` of ``lag`` (the one nearest the lag; of two as near, the earlier); ``(nan, n)`` with fewer than 2 differences (``n`` found).

    The differences overlap (a point can serve twice), so ``n`` overstates their independent count."""
    pts = sorted(series)
    diffs = []
    for i, (t, v) in enumerate(pts):
        near = [(abs(u - t - lag), u, w) for u, w in pts[i + 1:] if abs(u - t - lag) <= tol]
        if near:
            diffs.append(min(near)[2] - v)
    return (statistics.stdev(diffs) if len(diffs) >= 2 else math.nan), len(diffs)


def consecutive_sd(values: Sequence[float]) -> float:
    """SD of the differences of consecutive values (nan with fewer than 3 values)."""
    d = [b - a for a, b in zip(values[:-1], values[1:], strict=True)]
    return statistics.stdev(d) if len(d) >= 2 else math.nan


def pct(log_ratio: float) -> float:
    """A log ratio as percent: ``100 (exp(x) - 1)``."""
    return 100.0 * math.expm1(log_ratio)


def schedule(pairs: int) -> list[tuple[int, str, tuple[int, int]]]:
    """``(block, kind, (vCPU of the reference arm, vCPU of the other))`` for ``pairs`` blocks: the kinds of block
    ``k`` rotated by ``k``; the reference arm on vCPU 0 in even blocks, on vCPU 1 in odd ones."""
    out = []
    for k in range(pairs):
        cpus = (0, 1) if k % 2 == 0 else (1, 0)
        for kind in KINDS[k % 3:] + KINDS[:k % 3]:
            out.append((k, kind, cpus))
    return out


# ---------------------------------------------------------------- the worker (one engine process)

def barrier(directory: Path, slot: int, timeout_s: float = BARRIER_TIMEOUT_S) -> float:
    """Mark ``slot`` ready and wait for the other slot (poll 5 ms); returns the wait (s). Raises ``TimeoutError``."""
    (directory / f"ready-{slot}").touch()
    t0 = time.monotonic()
    while not (directory / f"ready-{1 - slot}").exists():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"twin of slot {slot} not ready after {timeout_s:g} s")
        time.sleep(0.005)
    return time.monotonic() - t0


def vcpu_ticks(cpu: int, stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """``(busy, steal)`` clock ticks (USER_HZ) of vCPU ``cpu`` from ``/proc/stat`` (busy: user + nice + system + irq
    + softirq; steal apart). Raises ``ValueError`` when the line is missing."""
    for line in stat.read_text().splitlines():
        f = line.split()
        if f and f[0] == f"cpu{cpu}":
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[1:9])
            return user + nice + system + irq + softirq, steal
    raise ValueError(f"{stat}: no line for cpu{cpu}")


def vcpu_use(before: tuple[int, int], after: tuple[int, int], own_cpu_s: float, wall_s: float) -> dict[str, float]:
    """Over a window of ``wall_s`` s on one vCPU: the share of the window the pinned process ran (``own``), the
    share other work ran on that vCPU (``foreign``: busy ticks minus the process's own CPU time), and steal."""
    hz = os.sysconf("SC_CLK_TCK")
    busy_s, steal_s = ((b - a) / hz for a, b in zip(before, after, strict=True))
    return dict(own=own_cpu_s / wall_s, foreign=max(0.0, busy_s - own_cpu_s) / wall_s, steal=steal_s / wall_s)


def worker(a: argparse.Namespace) -> int:
    """One engine process (``worker`` subcommand): build ``vllm.LLM`` from the case file as ``runners.incase.bench_one``
    does, warm up, meet the twin at the barrier, run rounds until both have ``--rounds``, write the JSON result."""

    case = load_case(a.case)
    offload, w = checked_offload(case), case.workload
    if w is None:
        raise SystemExit(f"duet_probe worker: case file {a.case} has no workload (a throughput case has one)")
    faulthandler.enable()
    from vllm import LLM

    t0 = time.perf_counter()
    llm = LLM(**engine_kwargs(case.model, offload, w))
    load_s = time.perf_counter() - t0
    one_round = _round_fn(llm, w)
    for g in range(w.warmup_rounds):
        one_round(g)
    bdir = Path(a.barrier)
    waited = barrier(bdir, a.slot)
    cpu = min(os.sched_getaffinity(0))
    ticks0, c0, w0 = vcpu_ticks(cpu), time.process_time(), time.perf_counter()
    rounds: list[dict[str, Any]] = []
    g = w.warmup_rounds
    while len(rounds) < a.rounds or not (bdir / f"done-{1 - a.slot}").exists():
        t = time.time()
        elapsed, gen, _prompt = one_round(g)
        rounds.append(dict(t=t, s=elapsed, tokens=sum(len(x) for x in gen), digest=digest_ids(gen)))
        g += 1
        if len(rounds) == a.rounds:
            (bdir / f"done-{a.slot}").touch()
        if len(rounds) >= 10 * a.rounds:  # the twin stalled: stop anyway (its rounds then end first)
            break
    use = vcpu_use(ticks0, vcpu_ticks(cpu), time.process_time() - c0, time.perf_counter() - w0)
    out = dict(label=case.label, slot=a.slot, affinity=sorted(os.sched_getaffinity(0)), load_s=load_s,
               barrier_wait_s=waited, rounds=rounds, pid=os.getpid(), vcpu=use)
    Path(a.out).write_text(json.dumps(out))
    return 0


# ---------------------------------------------------------------- the parent (pairs, then the analysis)

@dataclass(frozen=True)
class Setup:
    """What every pair launches from: the default's scheduled cases by arm, the built model, the base env."""

    cases: dict[str, Any]
    model_dir: Path


def default_setup() -> Setup:
    """The default's plan (``runners.pins.compose([])``, ``plan``), its first scheduled case per arm, its model.

    Raises:
        ValueError: the default has no case with an arm's label.
    """

    cfg = compose([])
    scheduled = plan(cfg)
    cases = {}
    for arm, label in ARMS.items():
        found = [sc for sc in scheduled if sc.case.label == label]
        if not found:
            raise ValueError(f"the default's plan has no case {label!r} (labels: "
                             f"{sorted({sc.case.label for sc in scheduled})})")
        cases[arm] = found[0]
    model_dir, _built_s = ensure_built(cfg.model)
    return Setup(cases=cases, model_dir=model_dir)


def launch_one(setup: Setup, out: Path, name: str, arm: str, slot: int, cpu: int, rounds: int) -> tuple[Any, Path]:
    """Write one process's spec and start it pinned to ``cpu`` (own session); returns ``(Popen, result path)``."""

    sc = setup.cases[arm]
    stem = f"{name}-{slot}{arm}"
    paths = CasePaths.of(out, sc.case.phase, stem)
    for p in (paths.log, paths.evidence, paths.record):
        p.parent.mkdir(parents=True, exist_ok=True)
    share_model_info_cache(out, sc.case.implementation, HOST_MODEL_INFO_CACHE)
    result = out / "pairs" / f"{stem}.json"
    prefix = ["taskset", "-c", str(cpu), sys.executable, str(Path(__file__).resolve()), "worker",
              "--barrier", str(out / "pairs" / name), "--slot", str(slot), "--rounds", str(rounds),
              "--out", str(result)]
    argv = case_argv(sc, model_dir=setup.model_dir, paths=paths, bench_command=prefix, python=sys.executable)
    env = case_env(sc, run_dir=out, paths=paths, base_env=os.environ)
    log = open(paths.log, "wb")
    proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    return proc, result


def _stop(procs: Sequence[Any]) -> None:
    """TERM, then KILL, the process group of each still running process (each started with its own session)."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def exit_on_signals() -> None:
    """Make SIGTERM and SIGHUP end this script as ``SystemExit(128 + N)`` (Python's default ends it at once, without
    ``run_pair``'s ``finally``), so that a ``timeout``, a ``kill`` or a closed terminal stops the pair's engine
    processes (each in its own session: the signal does not reach them) before the script ends."""

    def end(sig: int, _frame: object) -> None:
        raise SystemExit(128 + sig)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, end)


def run_pair(setup: Setup, out: Path, name: str, kind: str, cpus: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Run one pair (slot 0 = the reference arm on ``cpus[0]``); its record, with ``error`` when it failed. One arm
    and one vCPU run a pair of one (``scripts/speed_probe.py``: its caller marks the twin slot ready and done)."""
    (out / "pairs" / name).mkdir(parents=True, exist_ok=True)
    started: list[tuple[Any, Path]] = []
    procs: list[Any] = []
    t0 = time.monotonic()
    error = None
    try:
        for slot, arm in enumerate(kind):  # inside the try: a failed second launch stops the first process
            started.append(launch_one(setup, out, name, arm, slot, cpus[slot], rounds))
            procs.append(started[-1][0])
        while any(p.poll() is None for p in procs):
            bad = [p.returncode for p in procs if p.poll() not in (None, 0)]
            if bad or time.monotonic() - t0 > PAIR_TIMEOUT_S:
                error = f"exit codes {bad}" if bad else f"timeout {PAIR_TIMEOUT_S:g} s"
                break
            time.sleep(0.2)
    finally:  # a failed twin, a timeout or Ctrl-C: no engine process outlives the pair
        _stop(procs)
    codes = [p.returncode for p in procs]
    if error is None and any(codes):
        error = f"exit codes {codes}"
    rec: dict[str, Any] = dict(name=name, kind=kind, cpus=list(cpus), wall_s=time.monotonic() - t0, error=error)
    if error is None:
        rec["procs"] = [json.loads(r.read_text()) for _, r in started]
        rec["evidence"] = [_evidence(out, setup, name, arm, slot) for slot, arm in enumerate(kind)]
    return rec


def _evidence(out: Path, setup: Setup, name: str, arm: str, slot: int) -> dict[str, Any]:
    """What the process offloaded (its evidence sidecar) and whether the control acted (its log)."""

    paths = CasePaths.of(out, setup.cases[arm].case.phase, f"{name}-{slot}{arm}")
    ev = json.loads(paths.evidence.read_text()) if paths.evidence.is_file() else {}
    return dict(wrapped_count=ev.get("wrapped_count"), offloaded_bytes=ev.get("offloaded_bytes"),
                control_acted="OFFLOAD_CONTROL acted" in paths.log.read_text(errors="replace"))


# ---------------------------------------------------------------- the analysis

def _rounds(proc: dict[str, Any]) -> list[Round]:
    return [Round(r["t"], r["s"], r["tokens"]) for r in proc["rounds"]]


@dataclass(frozen=True)
class PairResult:
    """One finished pair: its kind, block, the reference's and the other's tok/s over the common rounds, the
    per-round log ratios (other / reference), each process's ``(vCPU, mid time, tok/s)``."""

    name: str
    kind: str
    block: int
    ref: float
    other: float
    round_ratios: tuple[float, ...]
    procs: tuple[tuple[int, float, float], ...]
    tokens_same: bool

    @property
    def log_ratio(self) -> float:
        return math.log(self.other / self.ref)


def pair_result(rec: dict[str, Any], block: int) -> PairResult:
    """A pair's record (``run_pair``) as a ``PairResult``; ratios are other (slot 1) over reference (slot 0)."""
    x, y = (_rounds(p) for p in rec["procs"])
    ref, other = pair_values(x, y)
    n = min(len(x), len(y))
    digests = [[r["digest"] for r in p["rounds"][:n]] for p in rec["procs"]]
    same = digests[0] == digests[1]
    procs = tuple((rec["cpus"][i], (r[0].t + r[-1].end) / 2, tok_s(r)) for i, r in enumerate((x, y)))
    return PairResult(rec["name"], rec["kind"], block, ref, other, tuple(round_log_ratios(y, x)), procs, same)


def _ci(d: Any) -> str:
    return (f"{1 + d.center_pct / 100:.4f} ({d.center_pct:+.1f}%, CI{100 * d.confidence:.3g} paired t over "
            f"{d.n_a} pairs {d.ci_low_pct:+.1f}%..{d.ci_high_pct:+.1f}%; verdict {d.verdict})")


def print_pairs(results: Sequence[PairResult], recs: Sequence[dict[str, Any]]) -> None:
    print("per pair (other / reference, same time, common rounds):")
    for r, rec in zip(results, recs, strict=True):
        ev = rec["evidence"][1]
        rr = " ".join(f"{pct(v):+.1f}" for v in r.round_ratios)
        use = " / ".join(f"own {u['own']:.2f} foreign {u['foreign']:.2f} steal {u['steal']:.3f}"
                         for u in (p["vcpu"] for p in rec["procs"]))
        print(f"  {r.name} {r.kind} vCPUs {rec['cpus']}: {r.ref:.1f} vs {r.other:.1f} tok/s -> {pct(r.log_ratio):+.2f}%"
              f" | per round % [{rr}] | other: wrapped {ev['wrapped_count']}, control acted {ev['control_acted']},"
              f" tokens same as reference {r.tokens_same} | vCPU use {use} | pair wall {rec['wall_s']:.0f} s")
        if max(p["vcpu"]["foreign"] for p in rec["procs"]) > FOREIGN_LIMIT:
            print(f"    WARNING {r.name}: other work used more than {FOREIGN_LIMIT:.0%} of a vCPU of this pair while it "
                  "measured: its two processes did not run alone on their vCPUs (not a duet)")


def arm_ratio(results: Sequence[PairResult], kind: str) -> Any:
    """The other arm over the reference in the pairs of ``kind``: ``decide_paired`` (paired t over pairs, the pair
    the unit; ``Decision``: ``center_pct`` is the geometric mean per-pair ratio minus 1), None with fewer than 2."""
    pairs = [r for r in results if r.kind == kind]
    return decide_paired([r.other for r in pairs], [r.ref for r in pairs]) if len(pairs) >= 2 else None


def leak(results: Sequence[PairResult]) -> Any:
    """A's tok/s next to B over A's next to A (geometric mean of the A||A pair's two) in the same block:
    ``decide_paired`` over blocks, None with fewer than 2 blocks holding both pairs."""
    aa = {r.block: math.sqrt(r.ref * r.other) for r in results if r.kind == "AA"}
    ab = [(r.ref, aa[r.block]) for r in results if r.kind == "AB" and r.block in aa]
    return decide_paired([p[0] for p in ab], [p[1] for p in ab]) if len(ab) >= 2 else None


def summarize(results: Sequence[PairResult]) -> None:
    """Print the over-pairs lines (module docstring)."""
    aa = [r.log_ratio if r.procs[0][0] == 0 else -r.log_ratio for r in results if r.kind == "AA"]
    if len(aa) >= 2:
        rr = [v if r.procs[0][0] == 0 else -v for r in results if r.kind == "AA" for v in r.round_ratios]
        print(f"duet noise A||A: SD of the per-pair log ratio (vCPU1 / vCPU0) {100 * statistics.stdev(aa):.2f}% over "
              f"{len(aa)} pairs ({len(aa) - 1} df; mean {pct(statistics.mean(aa)):+.2f}%: vCPU1 over vCPU0); "
              f"per-round same-time SD {100 * statistics.stdev(rr):.2f}% ({len(rr)} rounds)")
    for k, label in (("AB", "B/A (current (1,1) / baseline)"), ("AC", "C/A (control 2.6 ms / baseline)")):
        d = arm_ratio(results, k)
        if d is not None:
            print(f"{label}: {_ci(d)}")
    d = leak(results)
    if d is not None:
        print(f"leak: A next to B / A next to A (same block, NOT same time: pairs ~30-40 s apart, so it carries the "
              f"host's drift): {_ci(d)}")
    print_lagged(results)


def print_lagged(results: Sequence[PairResult]) -> None:
    """The one-process comparisons the duet is set against: A 25 s apart, consecutive A processes per vCPU."""
    a_procs = sorted((t, cpu, math.log(v)) for r in results for i, (cpu, t, v) in enumerate(r.procs)
                     if r.kind[i] == "A")
    sd, n = lagged_sd([(t, v) for t, _c, v in a_procs])
    print(f"A, process tok/s {LAG_S:g}+-{LAG_TOL_S:g} s apart (any vCPU): SD of the log difference "
          f"{100 * sd:.2f}% ({n} differences, overlapping)")
    per_cpu = [consecutive_sd([v for _t, c, v in a_procs if c == cpu]) for cpu in (0, 1)]
    times = [[t for t, c, _v in a_procs if c == cpu] for cpu in (0, 1)]
    gaps = [b - a for ts in times for a, b in zip(ts[:-1], ts[1:], strict=True)]
    med = statistics.median(gaps) if gaps else math.nan
    print(f"A, consecutive fresh A processes on one vCPU (median {med:.0f} s apart): SD of the log difference "
          f"vCPU0 {100 * per_cpu[0]:.2f}%, vCPU1 {100 * per_cpu[1]:.2f}% (what a sequential design pairs)")


def print_fresh(runs_root: Path | None) -> None:
    """The fresh-process (sequential) B/A and C/A of every run directory under ``runs_root`` (Welch t, 95%); a folder
    without run records (no ``*-runs.jsonl``) is skipped; ``None``: one line saying none was asked for."""
    if runs_root is None:
        print("fresh-process estimates: none asked for (--fresh-runs DIR, e.g. results/default)")
        return
    dirs = sorted(d for d in runs_root.iterdir() if d.is_dir() and any(d.glob("*-runs.jsonl"))) \
        if runs_root.is_dir() else []
    if not dirs:
        print(f"fresh-process estimates: no run directory under {runs_root}")
        return
    print(f"fresh-process (sequential) estimates, {runs_root}:")
    for d in dirs:
        runs = load_run(d).runs
        tp = {lab: list(runs.loc[runs["label"] == lab, "throughput_tok_s"]) for lab in ARMS.values()}
        parts = []
        for arm in ("B", "C"):
            if tp[ARMS[arm]] and tp[ARMS["A"]]:
                dec = decide(tp[ARMS[arm]], tp[ARMS["A"]])
                parts.append(f"{arm}/A {1 + dec.center_pct / 100:.4f} (CI95 {dec.method} {dec.ci_low_pct:+.1f}%.."
                             f"{dec.ci_high_pct:+.1f}%, {dec.n_a} vs {dec.n_b} processes)")
        print(f"  {d.name}: " + "; ".join(parts))


def analyze(out: Path, fresh: Path | None) -> int:
    """Print the analysis of ``out/duet-pairs.json``; 1 when a pair failed or none is there, else 0."""
    data = json.loads((out / "duet-pairs.json").read_text())
    recs = [r for r in data["pairs"] if r["error"] is None]
    for r in data["pairs"]:
        if r["error"] is not None:
            print(f"FAILED pair {r['name']} {r['kind']}: {r['error']} (logs under {out}/logs)")
    results = [pair_result(r, r["block"]) for r in recs]
    print(f"duet probe {out}: {len(results)} pairs, {data['rounds']} rounds minimum per process, "
          f"wall {data.get('wall_s', math.nan):.0f} s")
    if results:
        print_pairs(results, recs)
        summarize(results)
    print_fresh(fresh)
    return 0 if results and len(recs) == len(data["pairs"]) else 1


# ---------------------------------------------------------------- entry

class _Parser(argparse.ArgumentParser):
    """argparse's errors (a non-integer ``--pairs``, an unknown option) as the one line ``error: ...`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python scripts/duet_probe.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ap.add_argument("--pairs", type=int, default=4,
                    help="blocks of A||A, A||B, A||C (fresh process pairs each; even: the vCPUs swap each block)")
    ap.add_argument("--rounds", type=int, default=6, help="minimum measured rounds per process")
    ap.add_argument("--out", default=None, help="output directory (new; default results/duet/<UTC time>)")
    ap.add_argument("--fresh-runs", default=None,
                    help="a folder of the default's run directories (e.g. results/default) to compare with; omitted: none")
    ap.add_argument("--analyze", default=None, help="print the analysis of a finished probe directory and exit")
    w = sub.add_parser("worker", help="one engine process (started by this script)")
    w.add_argument("--case", required=True)
    w.add_argument("--barrier", required=True)
    w.add_argument("--slot", type=int, choices=(0, 1), required=True)
    w.add_argument("--rounds", type=int, required=True)
    w.add_argument("--out", required=True)
    return ap


def check_args(a: argparse.Namespace) -> str | None:
    """One line naming a bad value and what is allowed, or None."""
    if not 2 <= a.pairs <= 50 or a.pairs % 2:
        return (f"--pairs {a.pairs}: allowed an even number from 2 to 50 (the vCPUs swap each block: an odd count "
                "puts every reference arm once more on vCPU 0 than on vCPU 1, whose speeds differ)")
    if not 1 <= a.rounds <= 200:
        return f"--rounds {a.rounds}: allowed 1..200"
    if a.fresh_runs is not None and not Path(a.fresh_runs).is_dir():
        return f"--fresh-runs {a.fresh_runs}: not a folder (give the folder holding the default's run directories)"
    if a.analyze is None and not {0, 1} <= os.sched_getaffinity(0):
        return f"this process may run on vCPUs {sorted(os.sched_getaffinity(0))}: the probe needs vCPUs 0 and 1"
    if a.out is not None and Path(a.out).exists():
        return f"--out {a.out}: exists (a probe never reuses a directory)"
    if a.analyze is not None and not (Path(a.analyze) / "duet-pairs.json").is_file():
        return f"--analyze {a.analyze}: no duet-pairs.json there"
    return None


def _fresh(a: argparse.Namespace) -> Path | None:
    """``--fresh-runs`` as a path, or None when it was not given."""
    return None if a.fresh_runs is None else Path(a.fresh_runs)


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.cmd == "worker":
        return worker(a)
    why = check_args(a)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if a.analyze is not None:
        return analyze(Path(a.analyze), _fresh(a))
    out = Path(a.out or ROOT / "results" / "duet" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    out.mkdir(parents=True)
    exit_on_signals()
    setup = default_setup()
    t0, recs = time.monotonic(), []
    order = schedule(a.pairs)
    for i, (block, kind, cpus) in enumerate(order):
        rec = run_pair(setup, out, f"p{i:02d}", kind, cpus, a.rounds)
        rec["block"] = block
        recs.append(rec)
        print(f"pair {i + 1}/{len(order)} {kind} vCPUs {list(cpus)}: {rec['error'] or 'ok'} ({rec['wall_s']:.0f} s)",
              flush=True)
        doc = dict(rounds=a.rounds, pairs=recs, wall_s=time.monotonic() - t0, arms=ARMS)
        (out / "duet-pairs.json").write_text(json.dumps(doc))
    return analyze(out, _fresh(a))


if __name__ == "__main__":
    raise SystemExit(main())
