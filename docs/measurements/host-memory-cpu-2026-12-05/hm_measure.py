"""In-process host-memory probe of the current offloader on CPU (no vLLM).

usage: python hm_measure.py G N [--trim-before]
Builds the default's 8 layers (hidden 1024, intermediate 2048, 4 heads / 2 KV heads of 256, bf16:
18,882,560 B per layer) with offload_tools.synthetic_stack, wraps + post_inits the current offloader,
prints RSS (/proc/self/statm), glibc mallinfo2 (arena / free bytes), whether the original parameter
storages are still alive (torch StorageWeakRef) and RSS after malloc_trim(0).
"""
import ctypes
import gc
import json
import os
import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from offload.prefetch import CurrentPrefetchOffloader
from offload_tools.synthetic_stack import Shapes, build_reference

torch.set_num_threads(1)
PAGE = os.sysconf("SC_PAGE_SIZE")
libc = ctypes.CDLL("libc.so.6")


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc.mallinfo2.restype = MallInfo2


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def mi() -> dict:
    m = libc.mallinfo2()
    return {"heap_arena_B": m.arena, "mmapped_B": m.hblkhd, "mmapped_chunks": m.hblks,
            "in_use_heap_B": m.uordblks, "free_heap_B": m.fordblks}


def snap(tag: str, out: dict) -> None:
    gc.collect()
    out[tag] = {"rss_B": rss(), **mi()}


def main() -> None:
    g, n = int(sys.argv[1]), int(sys.argv[2])
    s = Shapes(hidden=1024, intermediate=2048, heads=4, kv_heads=2, head_dim=256, layers=8)
    layers = build_reference(s, torch.device("cpu"), torch.bfloat16)
    out: dict = {"G": g, "N": n, "layer_bytes": sum(p.numel() * p.element_size() for p in layers[0].parameters())}
    snap("built", out)
    if "--trim-before" in sys.argv:
        libc.malloc_trim(0)
        snap("built_trimmed", out)
    if g == 0:  # baseline: no offloader
        snap("after", out)
        libc.malloc_trim(0)
        snap("after_trim", out)
        print(json.dumps(out, indent=1))
        return
    off = CurrentPrefetchOffloader(g, n, 1)
    refs = []
    off.wrap_modules(iter(layers))
    for w in off.wrapped:
        for name in w.param_names:
            p = w.module.get_parameter(name)
            refs.append(StorageWeakRef(p.data.untyped_storage()))
    snap("wrapped", out)
    off.post_init()
    snap("after", out)
    out["offloaded_B"] = sum(w.offloaded_bytes for w in off.wrapped)
    out["arena_B"] = off.buffer_pool.total_bytes
    out["original_storages"] = len(refs)
    out["original_storages_alive"] = sum(not r.expired() for r in refs)
    libc.malloc_trim(0)
    snap("after_trim", out)
    x = torch.randn(16, 1024, dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in layers:
            x = layer(x)
    snap("after_forward", out)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
