import sys, numpy as np, time
kind = sys.argv[1]
if kind == "compute":
    s = 0
    while True:
        for i in range(1000000): s += i
elif kind == "membw":
    a = np.ones(64 * 1024 * 1024 // 8 * 8)  # 512 MiB of float64
    b = np.empty_like(a)
    while True:
        np.copyto(b, a)
