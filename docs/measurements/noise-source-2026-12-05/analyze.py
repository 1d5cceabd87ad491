"""The analyses printed in ../noise-source-2026-12-05.md, over the raw files beside this script (python3 analyze.py)."""
import json
import math
import statistics as st
from pathlib import Path

HERE = Path(__file__).parent


def factors() -> None:
    rows = [json.loads(line) for line in open(HERE / "vary1.jsonl")]
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["cond"], []).append(r["res"]["ms_per_step_cpu"])
    base = [math.log(x) for x in by["base"]]
    print("run.sh (vary1.jsonl): one fresh process per line, CPU ms per step, rotating conditions")
    for c, v in by.items():
        lg = [math.log(x) for x in v]
        ahp = [r["res"]["anon_huge_bytes"] for r in rows if r["cond"] == c]
        print(f"  {c:8s} n={len(v)} median {st.median(v):6.2f} ms  SD(log) {st.stdev(lg) * 100:5.1f}%  "
              f"mean vs base {100 * (math.exp(st.mean(lg) - st.mean(base)) - 1):+5.1f}%  "
              f"AnonHugePages {min(ahp) >> 20}-{max(ahp) >> 20} MiB")


def aslr() -> None:
    rows = [json.loads(line) for line in open(HERE / "vary2.jsonl")]
    print("run2.sh (vary2.jsonl): 4 one-second windows per fresh process, ASLR on / off (setarch -R)")
    for c in ("aslr", "noaslr"):
        procs = [[math.log(x) for x in r["res"]["windows_ms"]] for r in rows if r["cond"] == c]
        within = st.mean([st.variance(p) for p in procs])
        between = max(0.0, st.variance([st.mean(p) for p in procs]) - within / len(procs[0]))
        print(f"  {c:7s} n={len(procs)} between-process SD {100 * math.sqrt(between):.1f}%  "
              f"within-process (1-s windows) SD {100 * math.sqrt(within):.1f}%")


def series() -> None:
    w = [math.log(x) for x in json.load(open(HERE / "vary3.json"))["windows_ms"]]
    m, v = st.mean(w), st.pvariance(w)
    print(f"work.py 150 1 (vary3.json): one process, 150 one-second windows: SD {100 * math.sqrt(v):.1f}%, "
          f"{math.exp(min(w)):.1f}-{math.exp(max(w)):.1f} ms per step")
    for lag in (1, 2, 5, 10, 20, 30, 60):
        c = sum((w[i] - m) * (w[i + lag] - m) for i in range(len(w) - lag)) / (len(w) - lag) / v
        print(f"  autocorrelation at {lag:3d} s: {c:+.2f}")
    blk = [st.mean(w[i:i + 7]) for i in range(0, len(w) - 7, 7)]
    d = [st.mean(w[i + 25:i + 32]) - st.mean(w[i:i + 7]) for i in range(0, len(w) - 32)]
    print(f"  SD of 7-s means {100 * st.stdev(blk):.1f}%; SD of the difference of two 7-s means 25 s apart "
          f"{100 * st.stdev(d):.1f}% (independent: {100 * math.sqrt(2) * st.stdev(blk):.1f}%)")
    for lag in (2,):
        d2 = [w[i + lag] - w[i] for i in range(len(w) - lag)]
        print(f"  SD of the difference of two 1-s windows {lag} s apart {100 * st.stdev(d2):.1f}% "
              f"(independent: {100 * math.sqrt(2 * v):.1f}%)")


if __name__ == "__main__":
    factors()
    aslr()
    series()
