"""Torch-only GPU check of the ``current`` offloader: no vLLM, one command, a JSON summary.

``python -m offload_tools.gpu_check_torch [--device cuda] [--out FILE.json]`` builds a synthetic
decoder stack with Qwen2.5-7B layer shapes (28 layers; hidden 3584, intermediate 18944,
28 query / 4 KV heads of 128, q/k/v bias; 233,057,792 parameters = 466,115,584 bytes per
layer in bf16, vLLM's parameter names ``self_attn.qkv_proj``, ``mlp.gate_up_proj``, ...),
and runs it through the offloaders of ``--protocols`` directly (``wrap_modules`` + ``post_init``,
the hooks and custom ops of :mod:`offload.ops`): ``current`` =
:class:`offload.prefetch.CurrentPrefetchOffloader` (crossing protocol where torch has external
events, else the captured join: the JSON says which ran), ``upstream`` =
:class:`offload_tools.upstream_protocol.UpstreamProtocolOffloader` (vLLM 0.32's protocol, re-implemented).
Per point the protocols run on the same layers and input, in alternating order (ABBA: current
first at even points, upstream first at odd ones); the JSON gives per protocol and mode the step
time, the ratio to the bound and, per point and mode, the speedup ``upstream step / current step``.

* ``eager``: every (G, N) point;
* ``graph`` (cuda only): capture one full forward in a CUDA graph and replay it
  (:mod:`offload_tools.gpu_check_modes`); then ``--async-replays`` replays with no host sync between
  them must all be bitwise equal too;
* ``compile``: ``torch.compile`` (Inductor) of the whole stack for ``--compile-points``.

Per point and mode it checks that the output of the offloaded stack is **bitwise equal**
to the un-offloaded stack's (same mode, same input), and times ``--steps`` forward steps
(median; ``--step-sync stream`` waits for the compute stream's output after each step, as vLLM;
``device`` for the whole device). ``ceiling_step_s = max(t_base, L * b / BW)`` (``t_base`` the
un-offloaded step time, same mode; ``L * b`` the offloaded bytes; ``BW`` the pinned host-to-device
bandwidth measured in the same run, one layer per copy, median of 5); ``bound_step_s`` knows the
step boundary of the protocol (:mod:`offload_tools.step_model`) and ``model_step_s`` is the event model's
prediction; ``ratio = bound / step time``. Goals (cuda only; on cpu copies are synchronous and
``goal_met`` is ``null``): ``current`` in graph mode ``ratio >= 0.97`` at every point, in eager
mode with stream sync ``>= 0.95`` for ``G <= 4``; speedup over upstream ``>= 1.6`` at (28,1),
``>= 1.25`` at (28,2), ``>= 1.12`` at (14,1) when both run. Per point it also reports pinned host
bytes and device memory (allocated after set-up, peak during the run), and the stale-read counter
of the crossing protocol (must be 0). ``--skip-refill-control`` skips one owed refill after the
first replay (crossing protocol): the counter and the bitwise check must then fail (exit 1).

Exit status: 0 when every output is bitwise equal, no stale read was counted and (cuda) the
goals hold; 1 otherwise; 2 for bad arguments. The summary is printed as one
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
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from offload_tools.gpu_check_modes import STEP_SYNCS, emulate_precision_casts, measure_h2d_bandwidth, run_mode
from offload.selection import select_offload_layers
from offload_tools.step_model import boundary, bound_step_s, simulate_step_s
from offload_tools.synthetic_stack import QWEN25_7B, QWEN25_7B_LAYER_BYTES_BF16, DecoderLayer, Shapes, Stack, build_reference

if TYPE_CHECKING:  # the offloaders are imported after the arguments are checked (_protocol_class)
    from offload.prefetch import CurrentPrefetchOffloader

__all__ = ["QWEN25_7B", "QWEN25_7B_LAYER_BYTES_BF16", "DecoderLayer", "Shapes", "Stack", "build_reference", "main",
           "measure_h2d_bandwidth", "run_check", "run_mode"]


DEFAULT_POINTS = ((28, 1), (14, 1), (28, 2), (8, 1), (7, 1), (14, 2), (8, 2), (4, 1), (2, 1), (4, 2))
"""The same_runtime matrix points (docs: conf/matrix)."""

PROTOCOLS = ("current", "upstream")
"""``--protocols`` choices: ``current`` = :class:`offload.prefetch.CurrentPrefetchOffloader`, ``upstream`` =
:class:`offload_tools.upstream_protocol.UpstreamProtocolOffloader` (:func:`_protocol_class`)."""
GRAPH_GOAL_RATIO = 0.97
EAGER_GOAL_RATIO = 0.95
GOAL_MAX_GROUP = 4
SPEEDUP_GOALS = {(28, 1): 1.6, (28, 2): 1.25, (14, 1): 1.12}
"""Least speedup of ``current`` over ``upstream`` in graph mode at these points (cuda)."""


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
        r = run_mode(mode, Stack(ref_layers), x, None, args.steps, device, args.compile_backend, args.step_sync)
        base[mode] = {"step_s": r.step_s, "out": r.out.clone()}
    return base


def _protocol_class(protocol: str) -> type[CurrentPrefetchOffloader]:
    """The offloader class of ``protocol`` (one of :data:`PROTOCOLS`), imported on first use: the offloaders
    subclass vLLM's ``BaseOffloader`` where vLLM is installed (:mod:`offload.base`), and importing vLLM costs
    about 5 CPU-s here, which a bad argument should not pay before its one-line error."""
    from offload.prefetch import CurrentPrefetchOffloader
    from offload_tools.upstream_protocol import UpstreamProtocolOffloader

    return {"current": CurrentPrefetchOffloader, "upstream": UpstreamProtocolOffloader}[protocol]


def _skip_one_owed_refill(off: CurrentPrefetchOffloader) -> None:
    """Negative control: the first refill owed after a replay is not issued (crossing protocol only)."""
    from offload.crossing import Crossing

    p = off.protocol
    assert isinstance(p, Crossing)
    issue = p._issue_crossing
    state = {"syncs": 0, "skipped": False}
    sync = p.sync_prev_onload

    def counting_sync() -> None:
        state["syncs"] += 1
        sync()

    def skip(s: int, j: int, fork: bool) -> None:
        if not fork and state["syncs"] >= 3 and not state["skipped"]:
            state["skipped"] = True
            return
        issue(s, j, fork)

    setattr(p, "_issue_crossing", skip)  # noqa: B010 - an instance attribute shadows the method
    setattr(p, "sync_prev_onload", counting_sync)  # noqa: B010


def _setup_point(args: argparse.Namespace, g: int, n: int, s: Shapes, ref_layers: list[DecoderLayer],
                 protocol: str = "current") -> tuple[CurrentPrefetchOffloader, Stack]:
    """The offloader of ``protocol`` at point (G, N) over copies of the selected reference layers, and its stack."""
    sel = select_offload_layers(s.layers, g, n)
    off = _protocol_class(protocol)(g, n, args.prefetch_step)
    layers = off.wrap_modules(copy.deepcopy(ref_layers[i]) if i in sel else ref_layers[i] for i in range(s.layers))
    off.post_init()
    if args.negative_control:  # corrupt the host copy: the bitwise check must then fail
        for w in off.wrapped:
            assert w.host_flat is not None
            w.host_flat.zero_()
        off._initial_loads()
    if args.skip_refill_control and off.evidence_state()["copy_protocol"] == "crossing":
        _skip_one_owed_refill(off)
    return off, Stack(layers)


def _mode_record(args: argparse.Namespace, mode: str, g: int, n: int, off: CurrentPrefetchOffloader,
                 stack: Stack, ctx: dict[str, Any]) -> dict[str, Any]:
    """One protocol's record in one mode: equality, timing, ceiling, bound, model, goal."""
    device, base, sel = ctx["device"], ctx["base"][mode], ctx["sel"]
    r = run_mode(mode, stack, x=ctx["x"], off=off, steps=args.steps, device=device,
                 compile_backend=args.compile_backend, step_sync=args.step_sync,
                 async_replays=args.async_replays if mode == "graph" else 0)
    copy_s = ctx["layer_bytes"] / ctx["bw"]
    proto = off.evidence_state()["copy_protocol"]
    skip = not isinstance(off, _protocol_class("upstream"))  # upstream copies a module onto itself too
    kw = boundary(proto, mode, args.step_sync) | {"skip_resident": skip}
    joined = kw["joined_boundary"]
    bound = bound_step_s(ctx["shapes"].layers, sel, base["step_s"], copy_s, args.prefetch_step, **kw)
    ceiling = max(base["step_s"], len(sel) * copy_s)
    ratio = bound / r.step_s
    goal = GRAPH_GOAL_RATIO if mode == "graph" else EAGER_GOAL_RATIO
    judged = device.type == "cuda" and ctx["protocol"] == "current" and mode != "compile" and (
        mode == "graph" or (g <= GOAL_MAX_GROUP and args.step_sync == "stream"))
    return {
        "bitwise_equal": bool(torch.equal(r.out, base["out"])), "step_s": r.step_s,
        "baseline_step_s": base["step_s"], "transfer_s": len(sel) * copy_s, "ceiling_step_s": ceiling,
        "ceiling_ratio": ceiling / r.step_s, "bound_step_s": bound, "ratio": ratio,
        "model_step_s": simulate_step_s(ctx["shapes"].layers, sel, base["step_s"], copy_s, args.prefetch_step, **kw),
        "joined_boundary": joined, "meets_goal": (ratio >= goal) if judged else None,
        "fallback_loads": off.fallback_loads, "stale_reads": off.stale_reads,
        "async_replays": len(r.async_outs),
        "async_replays_bitwise_equal": all(torch.equal(o, base["out"]) for o in r.async_outs),
    }


def _run_protocol(args: argparse.Namespace, g: int, n: int, protocol: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """One protocol at one point: offloader sizes, device memory and, per mode, its record."""
    device = ctx["device"]
    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    off, stack = _setup_point(args, g, n, ctx["shapes"], ctx["ref_layers"], protocol)
    ev = off.evidence_state()
    rec: dict[str, Any] = {
        "copy_protocol": ev["copy_protocol"], "offloader_class": ev["offloader_class"],
        "static_buffer_bytes": ev["static_buffer_bytes"], "pinned_host_bytes": off.pinned_host_bytes,
        "host_pinned_allocator_bytes": _host_pinned_allocator_bytes(device),
        "device_allocated_bytes_after_setup": _device_mem(device)["device_allocated_bytes"], "modes": {},
    }
    for mode in ctx["modes"]:
        if mode not in ctx["base"] or (mode == "compile" and (g, n) not in args.compile_points):
            continue
        rec["modes"][mode] = _mode_record(args, mode, g, n, off, stack, {**ctx, "protocol": protocol})
    rec["device_peak_bytes"] = _device_mem(device)["device_peak_bytes"]
    rec["elapsed_s"] = time.perf_counter() - t0
    off.shutdown()
    del stack, off
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def _run_point(args: argparse.Namespace, k: int, g: int, n: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """Point (G, N): every protocol (ABBA order), speedups ``upstream / current`` per mode."""
    sel = select_offload_layers(ctx["shapes"].layers, g, n)
    order = list(args.protocols) if k % 2 == 0 else list(reversed(args.protocols))
    rec: dict[str, Any] = {"group_size": g, "num_in_group": n, "prefetch_step": args.prefetch_step,
                           "offloaded_layers": list(sel), "offloaded_bytes": len(sel) * ctx["layer_bytes"],
                           "order": order, "protocols": {}}
    for protocol in order:
        rec["protocols"][protocol] = _run_protocol(args, g, n, protocol, {**ctx, "sel": sel})
    p = rec["protocols"]
    if "current" in p and "upstream" in p:
        rec["speedup"] = {m: p["upstream"]["modes"][m]["step_s"] / p["current"]["modes"][m]["step_s"]
                          for m in p["current"]["modes"] if m in p["upstream"]["modes"]}
    return rec


def _verdict(points: list[dict[str, Any]], device: torch.device) -> dict[str, Any]:
    """``all_bitwise_equal``, ``stale_reads``, ``goal_met`` (cuda) and ``speedup_goals_met`` over every point."""
    runs = [m for p in points for pr in p.get("protocols", {}).values() for m in pr["modes"].values()]
    equal = all(m["bitwise_equal"] and m["async_replays_bitwise_equal"] for m in runs)
    stale = sum(m["stale_reads"] for m in runs)
    checked = [m["meets_goal"] for m in runs if m["meets_goal"] is not None]
    speed = [p["speedup"]["graph"] >= SPEEDUP_GOALS[(p["group_size"], p["num_in_group"])]
             for p in points if "graph" in p.get("speedup", {}) and (p["group_size"], p["num_in_group"]) in SPEEDUP_GOALS
             and p["prefetch_step"] == 1]
    cuda = device.type == "cuda"
    goal = (all(checked) if checked else None) if cuda else None
    speed_met = (all(speed) if speed else None) if cuda else None
    stopped = any("stopped" in p for p in points)
    return {"ok": bool(equal and stale == 0 and goal is not False and speed_met is not False and not stopped),
            "all_bitwise_equal": equal, "stale_reads": stale, "goal_met": goal, "speedup_goals_met": speed_met}


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Run every point, protocol and mode; return the summary dict (see module docstring)."""
    t_start = time.perf_counter()
    device = torch.device(args.device)
    dtype = torch.bfloat16
    s = Shapes.qwen25_7b(args.layers, args.width_divisor)
    layer_bytes = s.layer_params() * torch.empty((), dtype=dtype).element_size()
    modes = [m for m in args.modes if device.type == "cuda" or m != "graph"]
    torch.manual_seed(0)
    ref_layers = build_reference(s, device, dtype)
    x = torch.randn(args.tokens, s.hidden, device=device, dtype=dtype)
    bw = measure_h2d_bandwidth(layer_bytes, device)
    base = _baselines(args, modes, ref_layers, x, device)
    ctx = {"device": device, "shapes": s, "base": base, "layer_bytes": layer_bytes, "bw": bw, "modes": modes,
           "ref_layers": ref_layers, "x": x}
    points_out: list[dict[str, Any]] = []
    baseline_s = time.perf_counter() - t_start
    for k, (g, n) in enumerate(args.points):
        points_out.append(_run_point(args, k, g, n, ctx))
        if device.type == "cuda" and time.perf_counter() - t_start > args.budget_s:
            points_out.append({"stopped": f"time budget {args.budget_s}s spent before the remaining points"})
            break
    return {
        "check": "gpu_check_torch", **_verdict(points_out, device),
        "goal": (f"current: graph ratio >= {GRAPH_GOAL_RATIO} at every point, eager (stream sync) >= "
                 f"{EAGER_GOAL_RATIO} for G <= {GOAL_MAX_GROUP}; speedup over upstream in graph mode >= "
                 + ", ".join(f"{v} at {k}" for k, v in SPEEDUP_GOALS.items()) + " (cuda)"),
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "python": sys.version.split()[0],
        "shapes": dataclasses.asdict(s), "bytes_per_layer": layer_bytes,
        "qwen25_7b_layer_bytes": layer_bytes == QWEN25_7B_LAYER_BYTES_BF16,
        "tokens": args.tokens, "steps": args.steps, "modes": modes, "protocols": list(args.protocols),
        "step_sync": args.step_sync, "async_replays": args.async_replays,
        "compile_backend": args.compile_backend, "h2d_bandwidth_bytes_s": bw,
        "emulate_precision_casts": emulate_precision_casts() if "compile" in base else None,
        "negative_control": bool(args.negative_control), "skip_refill_control": bool(args.skip_refill_control),
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
    ap = argparse.ArgumentParser(prog="python -m offload_tools.gpu_check_torch", description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--layers", type=int, default=QWEN25_7B["layers"])
    ap.add_argument("--width-divisor", type=int, default=1, help="divide head_dim and intermediate (1 = 7B shapes)")
    ap.add_argument("--points", nargs="+", type=_point, default=list(DEFAULT_POINTS), help="G,N pairs")
    ap.add_argument("--protocols", nargs="+", default=["current"], choices=PROTOCOLS,
                    help="offloaders to run side by side (ABBA order per point)")
    ap.add_argument("--step-sync", default="stream", choices=STEP_SYNCS,
                    help="end of a timed step: the compute stream's output (as vLLM) or the whole device")
    ap.add_argument("--async-replays", type=int, default=50,
                    help="graph replays without host sync after the timed steps, each checked bitwise (0 = none)")
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
    ap.add_argument("--skip-refill-control", action="store_true",
                    help="crossing protocol: skip one owed refill after the first replay (must fail, exit 1)")
    a = ap.parse_args(argv)
    for name in ("layers", "width_divisor", "prefetch_step", "tokens", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} ({getattr(a, name)}) must be >= 1")
    if a.async_replays < 0:
        ap.error(f"--async-replays ({a.async_replays}) must be >= 0")
    if len(set(a.protocols)) != len(a.protocols):
        ap.error(f"--protocols {' '.join(a.protocols)}: each protocol at most once")
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
