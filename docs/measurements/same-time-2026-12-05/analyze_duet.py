# prints every number of ../same-time-2026-12-05.md from cpu0.json and cpu1.json (made by duet.sh 120)
import json, math, os, statistics as st
os.chdir(os.path.dirname(os.path.abspath(__file__)))
a = json.load(open('cpu0.json'))["windows_ms"]; b = json.load(open('cpu1.json'))["windows_ms"]
# align 1-s windows by their start time (nearest within 0.5 s)
pairs = []
for t, x in a:
    best = min(b, key=lambda w: abs(w[0] - t))
    if abs(best[0] - t) < 0.5: pairs.append((math.log(x), math.log(best[1])))
xs, ys = zip(*pairs)
def corr(u, v):
    mu, mv = st.mean(u), st.mean(v)
    return sum((p - mu) * (q - mv) for p, q in zip(u, v)) / math.sqrt(sum((p - mu) ** 2 for p in u) * sum((q - mv) ** 2 for q in v))
d = [p - q for p, q in pairs]
print(f"{len(pairs)} aligned 1-s windows; SD log ms/step cpu0 {100*st.stdev(xs):.1f}%, cpu1 {100*st.stdev(ys):.1f}%; "
      f"correlation {corr(xs, ys):+.2f}; SD of the same-time difference {100*st.stdev(d):.1f}%")
# 5-s means (a process's measured window is ~6 s)
def means(v, k=5): return [st.mean(v[i:i+k]) for i in range(0, len(v) - k + 1, k)]
mx, my = means(xs), means(ys)
dd = [p - q for p, q in zip(mx, my)]
print(f"5-s means: SD cpu0 {100*st.stdev(mx):.1f}%, cpu1 {100*st.stdev(my):.1f}%, same-time difference SD {100*st.stdev(dd):.1f}%; "
      f"differences 25 s apart on one vCPU (cpu0 means i vs i+5) SD {100*st.stdev([mx[i]-mx[i+5] for i in range(len(mx)-5)]):.1f}%")
# the two series' time range and their start offset
print(f"windows from {a[0][0]:.1f} to {a[-1][0]:.1f} (epoch s); cpu1 starts {b[0][0] - a[0][0]:+.2f} s after cpu0; "
      f"ms/step cpu0 {min(x for _, x in a):.1f}-{max(x for _, x in a):.1f}, cpu1 {min(x for _, x in b):.1f}-{max(x for _, x in b):.1f}")
for lag in (1, 5, 10, 25):
    print(f"cpu0 1-s windows {lag:>2} s apart: correlation {corr(xs[:-lag], xs[lag:]):+.2f}; cross-vCPU at the same lag {corr(xs[:-lag], ys[lag:]):+.2f}")
