# one fresh process: engine-like bf16 decode GEMMs (batch 4) over ~200 MB of weights, pinned by the caller
# (a copy of ../noise-source-2026-12-05/work.py whose 1-s windows also record their start time, time.time(),
#  so that two processes run at the same time can be aligned window by window: analyze_duet.py)
import json, os, sys, time
# argv: WINDOWS (1-s windows before the final window; 0 = none) FINAL_S (the final window, s)
# The runs used three copies of this file: run.sh's (= `work.py 0 3`), run2.sh's (= `work.py 4 1`) and the series'
# (= `work.py 150 1`); they were merged into this one after the runs, with the measuring lines unchanged.
WINDOWS, FINAL_S = int(sys.argv[1]), float(sys.argv[2])
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
h, f, L = 1024, 2816, 8
W = [(torch.randn(4 * h, h, dtype=torch.bfloat16), torch.randn(2 * f, h, dtype=torch.bfloat16),
      torch.randn(h, f, dtype=torch.bfloat16)) for _ in range(L)]
x = torch.randn(4, h, dtype=torch.bfloat16)
def step():
    y = x
    for a, b, c in W:
        y = torch.nn.functional.linear(y, a)[:, :h]
        z = torch.nn.functional.linear(y, b)[:, :f]
        y = torch.nn.functional.linear(z, c)
    return y
for _ in range(20): step()
wins = []
for _w in range(WINDOWS):
    c0, w0 = time.process_time(), time.perf_counter(); n = 0
    while time.perf_counter() - w0 < 1.0:
        step(); n += 1
    wins.append([time.time(), 1000 * (time.process_time() - c0) / n])
c0, w0 = time.process_time(), time.perf_counter(); n = 0
while time.perf_counter() - w0 < FINAL_S:
    step(); n += 1
c1, w1 = time.process_time(), time.perf_counter()
ahp = 0
for line in open('/proc/self/smaps_rollup'):
    if line.startswith('AnonHugePages'): ahp = int(line.split()[1]) * 1024
print(json.dumps({"steps": n, "cpu_s": c1 - c0, "wall_s": w1 - w0, "ms_per_step_cpu": 1000 * (c1 - c0) / n,
                  "anon_huge_bytes": ahp, "windows_ms": wins}))
