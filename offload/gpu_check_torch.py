"""Torch-only GPU check of the ``current`` offloader: no vLLM, one command, a JSON summary.

``python -m offload.gpu_check_torch [--device cuda] [--out FILE.json]`` builds a synthetic
decoder stack with Qwen2.5-7B layer shapes (28 layers; hidden 3584, intermediate 18944,
28 query / 4 KV heads of 128, q/k/v bias; 233,057,792 parameters = 466,115,584 bytes per
layer in bf16, vLLM's parameter names ``self_attn.qkv_proj``, ``mlp.gate_up_proj``, ...),
and runs it through :class:`offload.prefetch.CurrentPrefetchOffloader` directly
(``wrap_modules`` + ``post_init``, the hooks and custom ops of :mod:`offload.ops`):

* ``eager``: every (G, N) point;
* ``graph`` (cuda only): capture one full forward in a CUDA graph (``sync_prev_onload``
  before capture and before every replay, ``join_after_forward`` inside capture, as vLLM
  0.32's ``CUDAGraphWrapper``), replay it;
* ``compile``: ``torch.compile`` (Inductor) of the whole stack for ``--compile-points``.

Per point and mode it checks that the output of the offloaded stack is **bitwise equal**
to the un-offloaded stack's (same mode, same input), and times ``--steps`` forward steps
(median). The transfer-bound ceiling of a step is ``max(t_base, L * b / BW)``: ``t_base``
the un-offloaded step time (same mode), ``L * b`` the bytes of the offloaded layers,
``BW`` the pinned host-to-device bandwidth measured in the same run (one layer's bytes
per copy, median of 5). ``ratio = ceiling / step time``; the goal (P2) is ``>= 0.95`` for
``G <= 4``, judged on cuda only (on cpu the copies are synchronous, so the ceiling is not
reachable by design and ``goal_met`` is ``null``). Per point it also reports the pinned
host bytes the offloader holds and device memory (allocated after set-up, peak during
the run).

Exit status: 0 when every output is bitwise equal and (cuda) the goal holds; 1 when an
output differs or the goal is missed; 2 for bad arguments. The summary is printed as one
``GPU_CHECK_TORCH <json>`` line (and written to ``--out``).

Sizes on one H200 (default points): 13.05 GB of weights on the device for the
un-offloaded stack, at most 14 layers (6.5 GB) of pinned host memory per point.
``--layers`` and ``--width-divisor`` shrink the stack (the CPU test uses 4 layers, width
/ 32). Needs only torch (>= 2.4; checked on 2.13 CPU; written for 2.11 / Python 3.12).
Not modelled: the KV cache and paged attention (attention here is causal over the step's
tokens), tensor parallelism.
"""


from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from offload.prefetch import CurrentPrefetchOffloader
from offload.selection import select_offload_layers
from offload.synthetic_stack import QWEN25_7B, QWEN25_7B_LAYER_BYTES_BF16, DecoderLayer, Shapes, Stack, build_reference

__all__ = ["QWEN25_7B", "QWEN25_7B_LAYER_BYTES_BF16", "DecoderLayer", "Shapes", "Stack", "build_reference", "main",
           "measure_h2d_bandwidth", "run_check", "run_mode"]


DEFAULT_POINTS = ((28, 1), (14, 1), (28, 2), (8, 1), (7, 1), (14, 2), (8, 2), (4, 1), (2, 1), (4, 2))
"""The same_runtime matrix points (docs: conf/matrix)."""

GOAL_RATIO = 0.95
GOAL_MAX_GROUP = 4



class _Sync:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def measure_h2d_bandwidth(nbytes: int, device: torch.device, repeats: int = 5) -> float:
    """Pinned host -> ``device`` copy bandwidth in bytes/s (median of ``repeats`` copies of ``nbytes``)."""
    pin = device.type == "cuda"
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    sync = _Sync(device)
    times = []
    for _ in range(repeats + 1):
        sync()
        t = time.perf_counter()
        dst.copy_(src, non_blocking=pin)
        sync()
        times.append(time.perf_counter() - t)
    del src, dst
    return nbytes / statistics.median(times[1:])


def _time_steps(fn: Callable[[], torch.Tensor], steps: int, sync: _Sync) -> tuple[float, torch.Tensor]:
    out = fn()
    sync()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def run_mode(mode: str, stack: Stack, x: torch.Tensor, off: CurrentPrefetchOffloader | None, steps: int,
             device: torch.device, compile_backend: str) -> tuple[float, torch.Tensor]:
    """Median step seconds and the last output of ``stack`` under ``mode`` (eager/graph/compile)."""
    sync = _Sync(device)
    with torch.no_grad():
        if mode == "eager":
            return _time_steps(lambda: stack(x), steps, sync)
        if mode == "compile":
            torch._dynamo.reset()
            _emulate_precision_casts()
            compiled = torch.compile(stack, backend=compile_backend, dynamic=False, fullgraph=True)
            return _time_steps(lambda: compiled(x), steps, sync)
        if mode == "graph":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the default stream (torch's recipe)
                for _ in range(2):
                    stack(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            if off is not None:
                off.sync_prev_onload()
            with torch.cuda.graph(graph):
                static_out = stack(x)
                if off is not None:
                    off.join_after_forward()

            def replay() -> torch.Tensor:
                if off is not None:
                    off.sync_prev_onload()
                graph.replay()
                return static_out

            return _time_steps(replay, steps, sync)
    raise ValueError(f"mode ({mode!r}) must be one of eager, graph, compile")


def _emulate_precision_casts() -> bool:
    """Make Inductor round fused intermediates as eager does (the offload ops split fusions
    at wrapped layers, so without it the two compiled stacks may round differently)."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:  # pragma: no cover
        return False
    if not hasattr(inductor_config, "emulate_precision_casts"):
        return False
    inductor_config.emulate_precision_casts = True
    return True


def _device_mem(device: torch.device) -> dict[str, int | None]:
    if device.type != "cuda":
        return {"device_allocated_bytes": None, "device_peak_bytes": None}
    return {"device_allocated_bytes": torch.cuda.memory_allocated(device),
            "device_peak_bytes": torch.cuda.max_memory_allocated(device)}


def _host_pinned_allocator_bytes(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    try:
        return int(torch.cuda.host_memory_stats()["allocated_bytes.current"])
    except (AttributeError, KeyError, RuntimeError):
        return None


def _baselines(args: argparse.Namespace, modes: list[str], ref_layers: list[DecoderLayer], x: torch.Tensor,
               device: torch.device) -> dict[str, dict[str, Any]]:
    """Per mode: the un-offloaded stack's median step seconds and output."""
    base: dict[str, dict[str, Any]] = {}
    for mode in modes:
        if mode == "compile" and not args.compile_points:
            continue
        t, out = run_mode(mode, Stack(ref_layers), x, None, args.steps, device, args.compile_backend)
        base[mode] = {"step_s": t, "out": out.clone()}
    return base


def _setup_point(args: argparse.Namespace, g: int, n: int, s: Shapes,
                 ref_layers: list[DecoderLayer]) -> tuple[CurrentPrefetchOffloader, Stack]:
    """The offloader of point (G, N) over copies of the selected reference layers, and its stack."""
    sel = select_offload_layers(s.layers, g, n)
    off = CurrentPrefetchOffloader(g, n, args.prefetch_step)
    layers = off.wrap_modules(copy.deepcopy(ref_layers[i]) if i in sel else ref_layers[i] for i in range(s.layers))
    off.post_init()
    if args.negative_control:  # corrupt the host copy: the bitwise check must then fail
        for w in off.wrapped:
            assert w.host_flat is not None
            w.host_flat.zero_()
        off._initial_loads()
    return off, Stack(layers)


def _run_point(args: argparse.Namespace, g: int, n: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """One point's record: offloader sizes, device memory and, per mode, equality and timing."""
    device, s, base, layer_bytes, bw = ctx["device"], ctx["shapes"], ctx["base"], ctx["layer_bytes"], ctx["bw"]
    t_point = time.perf_counter()
    sel = select_offload_layers(s.layers, g, n)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    off, stack = _setup_point(args, g, n, s, ctx["ref_layers"])
    rec: dict[str, Any] = {
        "group_size": g, "num_in_group": n, "prefetch_step": args.prefetch_step,
        "offloaded_layers": list(sel), "offloaded_bytes": off.evidence_state()["offloaded_bytes"],
        "static_buffer_bytes": off.evidence_state()["static_buffer_bytes"],
        "pinned_host_bytes": off.pinned_host_bytes,
        "host_pinned_allocator_bytes": _host_pinned_allocator_bytes(device), "modes": {},
    }
    rec.update({f"{k}_after_setup": v for k, v in _device_mem(device).items() if k == "device_allocated_bytes"})
    for mode in ctx["modes"]:
        if mode not in base or (mode == "compile" and (g, n) not in args.compile_points):
            continue
        t, out = run_mode(mode, stack, x=ctx["x"], off=off, steps=args.steps, device=device,
                          compile_backend=args.compile_backend)
        ceiling = max(base[mode]["step_s"], len(sel) * layer_bytes / bw)
        ratio = ceiling / t
        judged = device.type == "cuda" and g <= GOAL_MAX_GROUP
        rec["modes"][mode] = {
            "bitwise_equal": bool(torch.equal(out, base[mode]["out"])), "step_s": t,
            "baseline_step_s": base[mode]["step_s"],
            "transfer_s": len(sel) * layer_bytes / bw, "ceiling_step_s": ceiling, "ratio": ratio,
            "meets_goal": (ratio >= GOAL_RATIO) if judged else None,
            "fallback_loads": off.fallback_loads,
        }
    rec["device_peak_bytes"] = _device_mem(device)["device_peak_bytes"]
    rec["elapsed_s"] = time.perf_counter() - t_point
    off.shutdown()
    del stack, off
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Run every mode and point; return the summary dict (see module docstring)."""
    t_start = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16
    s = Shapes.qwen25_7b(args.layers, args.width_divisor)
    layer_bytes = s.layer_params() * torch.empty((), dtype=dtype).element_size()
    modes = list(args.modes)
    if device.type != "cuda" and "graph" in modes:
        modes.remove("graph")
    torch.manual_seed(0)
    ref_layers = build_reference(s, device, dtype)
    x = torch.randn(args.tokens, s.hidden, device=device, dtype=dtype)
    bw = measure_h2d_bandwidth(layer_bytes, device)
    base = _baselines(args, modes, ref_layers, x, device)
    ctx = {"device": device, "shapes": s, "base": base, "layer_bytes": layer_bytes, "bw": bw, "modes": modes,
           "ref_layers": ref_layers, "x": x}
    points_out = []
    baseline_s = time.perf_counter() - t_start
    for g, n in args.points:
        points_out.append(_run_point(args, g, n, ctx))
        if device.type == "cuda" and time.perf_counter() - t_start > args.budget_s:
            points_out.append({"stopped": f"time budget {args.budget_s}s spent before the remaining points"})
            break
    runs = [m for p in points_out for m in p.get("modes", {}).values()]
    all_equal = all(m["bitwise_equal"] for m in runs)
    goal_checked = [m["meets_goal"] for m in runs if m["meets_goal"] is not None]
    goal_met = (all(goal_checked) if goal_checked else None) if device.type == "cuda" else None
    return {
        "check": "gpu_check_torch", "ok": bool(all_equal and goal_met is not False
                                              and not any("stopped" in p for p in points_out)),
        "all_bitwise_equal": all_equal, "goal": f"ratio >= {GOAL_RATIO} for G <= {GOAL_MAX_GROUP} (cuda)",
        "goal_met": goal_met, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "python": sys.version.split()[0],
        "shapes": dataclasses.asdict(s), "bytes_per_layer": layer_bytes,
        "qwen25_7b_layer_bytes": layer_bytes == QWEN25_7B_LAYER_BYTES_BF16,
        "tokens": args.tokens, "steps": args.steps, "modes": modes,
        "compile_backend": args.compile_backend, "h2d_bandwidth_bytes_s": bw,
        "emulate_precision_casts": _emulate_precision_casts() if "compile" in base else None,
        "negative_control": bool(args.negative_control),
        "baseline_step_s": {m: b["step_s"] for m, b in base.items()}, "points": points_out,
        "elapsed_s": time.perf_counter() - t_start, "setup_and_baseline_s": baseline_s,
    }


def _point(text: str) -> tuple[int, int]:
    try:
        g, n = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"point {text!r} must be G,N (two integers)") from None
    if not (g >= 1 and 1 <= n <= g):
        raise argparse.ArgumentTypeError(f"point {text!r}: need G >= 1 and 1 <= N <= G")
    return g, n


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m offload.gpu_check_torch", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--layers", type=int, default=QWEN25_7B["layers"])
    ap.add_argument("--width-divisor", type=int, default=1, help="divide head_dim and intermediate (1 = 7B shapes)")
    ap.add_argument("--points", nargs="+", type=_point, default=list(DEFAULT_POINTS), help="G,N pairs")
    ap.add_argument("--compile-points", nargs="*", type=_point, default=[(4, 1)],
                    help="points also run under torch.compile (compiling is slow; none = skip)")
    ap.add_argument("--modes", nargs="+", default=["eager", "graph", "compile"], choices=("eager", "graph", "compile"))
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile backend (inductor, aot_eager, eager)")
    ap.add_argument("--prefetch-step", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=16, help="tokens per forward step")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per point and mode (median)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting points after this (cuda)")
    ap.add_argument("--out", help="also write the JSON summary here")
    ap.add_argument("--negative-control", action="store_true",
                    help="zero the offloaded host copies after post_init (outputs must then differ, exit 1)")
    a = ap.parse_args(argv)
    for name in ("layers", "width_divisor", "prefetch_step", "tokens", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} ({getattr(a, name)}) must be >= 1")
    if a.width_divisor > QWEN25_7B["head_dim"]:
        ap.error(f"--width-divisor ({a.width_divisor}) must be <= {QWEN25_7B['head_dim']}")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False (use --device cpu for the CPU run)")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    summary = run_check(args)
    line = json.dumps(summary, sort_keys=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    print("GPU_CHECK_TORCH " + line, flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
