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
Per point the un-offloaded stack and the protocols run on the same layers and input, in the order
baseline, protocols (ABBA: current first at even points, upstream first at odd ones), baseline again;
every step of every arm is timed by one function on one clock (CUDA events on the compute stream on
cuda, ``perf_counter`` elsewhere: :func:`offload_tools.gpu_check_modes.time_steps`). The JSON gives
per protocol and mode every step time, the ratios of :mod:`offload_tools.gpu_check_ratios` and, per
point and mode, the speedup ``upstream step / current step``.

* ``eager``: every (G, N) point;
* ``graph`` (cuda only): capture one full forward in a CUDA graph and replay it
  (:mod:`offload_tools.gpu_check_modes`); then ``--async-replays`` replays with no host sync between
  them must all be bitwise equal too;
* ``compile``: ``torch.compile`` (Inductor) of the whole stack for ``--compile-points``.

Per point and mode it checks that the output of the offloaded stack is **bitwise equal**
to the un-offloaded stack's (same mode, same input; the interleaved baselines' too), and times
``--steps`` forward steps (median; ``--step-sync stream`` waits for the compute stream's output after
each step, as vLLM; ``device`` for the whole device). Against what (:mod:`offload_tools.gpu_check_ratios`):
``ceiling_ratio`` first, ``max(t_base, M_c * b / BW) / step`` (``t_base`` the interleaved
un-offloaded step, same mode; ``M_c`` the layers copied per step; ``BW`` the pinned host-to-device
bandwidth measured in the same run, one layer per copy, median of 5), ``None`` with
``ceiling_note`` "ceiling n/a: nothing copied" where nothing is copied; ``bound_ratio = bound / step``
with the event model's bound for the protocol's step boundary (:mod:`offload_tools.step_model`; the
crossing refill owed to the next replay starts with it), built from the device's layer time (graph
mode's un-offloaded step / L; launch-bound eager and compiled steps: no faster than their own
``t_base`` either); ``model_step_s`` the event model's prediction. Goals (cuda only; on cpu copies are
synchronous, the host is shared, and ``goal_met`` is ``null``): ``current`` in graph mode
``bound_ratio >= 0.97`` at every point, in eager mode with stream sync ``>= 0.95`` for ``G <= 4``;
speedup over upstream ``>= 1.6`` at (28,1), ``>= 1.25`` at (28,2), ``>= 1.12`` at (14,1) when both
run; no offloaded step below its interleaved baseline by more than the baselines' step-to-step spread
(at least 1 %; ``faster_than_baseline`` names each such point). Per point it also reports pinned host
bytes and device memory (allocated after set-up, peak during the run), and the stale-read counter
of the crossing protocol (must be 0). ``--skip-refill-control`` skips one owed refill after the
first replay (crossing protocol): the counter and the bitwise check must then fail (exit 1).

Budget (``--budget-s``): a point starts only when its estimate (the event model's steps plus the
run's own set-up time per offloaded layer, pooled over the points run so far) fits in what is left; otherwise it is listed in
``not_run`` with the reason, and ``ok`` is false. The summary is rewritten to ``--out`` after every
point (``complete: false`` and the ``pending`` points until the end). Offloaders keep torch's pinned
host cache (:func:`keep_host_cache`), so the points reuse the pinned blocks of the points before.

Exit status (:func:`offload_tools.gpu_check_rules.verdict`): 0 when every output is bitwise equal, no stale
read was counted, every point ran and
(cuda) the goals hold; 1 otherwise; 2 for bad arguments. One ``GPU_CHECK_POINT`` line per point,
protocol and mode (ceiling ratio first, :func:`offload_tools.gpu_check_report.point_lines`), then the
summary as one ``GPU_CHECK_TORCH <json>`` line (and written to ``--out``).

Sizes on one H200 (default points): 13.05 GB of weights on the device for the
un-offloaded stack, at most 14 layers (6.5 GB) of pinned host memory per point.
``--layers`` and ``--width-divisor`` shrink the stack (the CPU test uses 4 layers, width
/ 32). Needs only torch (>= 2.4; checked on 2.13 CPU; written for 2.11 / Python 3.12); the command
(``python -m``) keeps vLLM out even where it is installed, as on the device hosts (``offloader_base`` in the JSON
names the class the offloaders subclass).
Not modelled: the KV cache and paged attention (attention here is causal over the step's
tokens), tensor parallelism.
"""


from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from offload.backend import DeviceBackend, backend_for_device
from offload.selection import select_offload_layers
from offload_tools.gpu_check_modes import STEP_SYNCS, Baselines, ModeResult, emulate_precision_casts, \
    measure_h2d_bandwidth, run_mode
from offload_tools.gpu_check_ratios import faster_than_baseline, mode_ratios
from offload_tools.gpu_check_report import point_lines
from offload_tools.gpu_check_rules import GOAL_MAX_GROUP, GRAPH_GOAL_RATIO, EAGER_GOAL_RATIO, SETUP_S_PER_LAYER, \
    SPEEDUP_GOALS, estimate_point_s, judged, verdict
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


def keep_host_cache(device: torch.device) -> DeviceBackend:
    """The device's backend (:func:`offload.backend.backend_for_device`) with ``release_host_cache`` a no-op.

    The offloader returns torch's cached pinned blocks to the OS after ``post_init`` (right for a
    serving process). The check sets up 20 offloaders one after the other: keeping the cache lets
    each reuse the pinned blocks of the one before (pinning cost 0.4-0.45 s per layer and protocol
    on the H200 of 2026-12-04), so only the largest point's blocks are pinned, once.
    """
    backend = backend_for_device(device)
    setattr(backend, "release_host_cache", lambda: None)  # noqa: B010 - an instance attribute shadows the method
    return backend


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
    off = _protocol_class(protocol)(g, n, args.prefetch_step, backend_factory=keep_host_cache)
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


def _mode_record(args: argparse.Namespace, mode: str, off: CurrentPrefetchOffloader, stack: Stack,
                 ctx: dict[str, Any]) -> dict[str, Any]:
    """One protocol's raw record in one mode: equality and per-step times (ratios come with the baselines)."""
    ref = ctx["baselines"].ref[mode]
    r = run_mode(mode, stack, x=ctx["x"], off=off, steps=args.steps, device=ctx["device"],
                 compile_backend=args.compile_backend, step_sync=args.step_sync,
                 async_replays=args.async_replays if mode == "graph" else 0)
    return {
        "bitwise_equal": bool(torch.equal(r.out, ref)), "step_s": r.step_s, "step_times_s": r.step_times_s,
        "fallback_loads": off.fallback_loads, "stale_reads": off.stale_reads, "async_replays": len(r.async_outs),
        "async_replays_bitwise_equal": all(torch.equal(o, ref) for o in r.async_outs),
    }


def _point_modes(args: argparse.Namespace, g: int, n: int, ctx: dict[str, Any]) -> list[str]:
    return [m for m in ctx["modes"] if m in ctx["baselines"].fns and (m != "compile" or (g, n) in args.compile_points)]


def _run_protocol(args: argparse.Namespace, g: int, n: int, protocol: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """One protocol at one point: offloader sizes, device memory and, per mode, its raw record."""
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
    for mode in _point_modes(args, g, n, ctx):
        rec["modes"][mode] = _mode_record(args, mode, off, stack, ctx)
    rec["device_peak_bytes"] = _device_mem(device)["device_peak_bytes"]
    rec["elapsed_s"] = time.perf_counter() - t0
    off.shutdown()
    del stack, off
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def _finish_point(args: argparse.Namespace, rec: dict[str, Any], base: dict[str, list[ModeResult]],
                  ctx: dict[str, Any]) -> None:
    """Add to every protocol's mode record its interleaved baseline, ceiling, bound, model and goal."""
    times = {m: [t for r in rs for t in r.step_times_s] for m, rs in base.items()}
    med = {m: statistics.median(ts) for m, ts in times.items()}
    rec["baseline"] = {m: {"step_s": med[m], "step_times_s": times[m],
                           "bitwise_equal": all(torch.equal(r.out, ctx["baselines"].ref[m]) for r in rs)}
                       for m, rs in base.items()}
    dev_base = med.get("graph")
    g = rec["group_size"]
    for name, prec in rec["protocols"].items():
        for mode, m in prec["modes"].items():
            r = mode_ratios(mode=mode, copy_protocol=prec["copy_protocol"], skip_resident=name == "current",
                            num_layers=ctx["shapes"].layers, offloaded=rec["offloaded_layers"],
                            prefetch_step=args.prefetch_step, step_sync=args.step_sync, t_base_s=med[mode],
                            device_t_base_s=dev_base if dev_base is not None else med[mode],
                            copy_s=ctx["copy_s"], step_s=m["step_s"])
            fast = faster_than_baseline(m["step_s"], times[mode])
            goal = GRAPH_GOAL_RATIO if mode == "graph" else EAGER_GOAL_RATIO
            m.update(r, baseline_step_s=fast["baseline_step_s"], baseline_spread=fast["spread"],
                     below_baseline=fast["below_baseline"], faster_than_baseline=fast["faster"],
                     meets_goal=(r["bound_ratio"] >= goal) if judged(args, ctx["device"].type, name, mode, g) else None)


def _run_point(args: argparse.Namespace, k: int, g: int, n: int, ctx: dict[str, Any]) -> dict[str, Any]:
    """Point (G, N): baseline, every protocol (ABBA order), baseline again; speedups ``upstream / current``."""
    sel = select_offload_layers(ctx["shapes"].layers, g, n)
    order = list(args.protocols) if k % 2 == 0 else list(reversed(args.protocols))
    modes = _point_modes(args, g, n, ctx)
    rec: dict[str, Any] = {"group_size": g, "num_in_group": n, "prefetch_step": args.prefetch_step,
                           "offloaded_layers": list(sel), "offloaded_bytes": len(sel) * ctx["layer_bytes"],
                           "order": ["baseline", *order, "baseline"], "protocols": {}}
    before = ctx["baselines"].block(modes)
    for protocol in order:
        rec["protocols"][protocol] = _run_protocol(args, g, n, protocol, {**ctx, "sel": sel})
    after = ctx["baselines"].block(modes)
    _finish_point(args, rec, {m: [before[m], after[m]] for m in before}, ctx)
    p = rec["protocols"]
    if "current" in p and "upstream" in p:
        rec["speedup"] = {m: p["upstream"]["modes"][m]["step_s"] / p["current"]["modes"][m]["step_s"]
                          for m in p["current"]["modes"] if m in p["upstream"]["modes"]}
    return rec


def _header(args: argparse.Namespace, ctx: dict[str, Any]) -> dict[str, Any]:
    """The run's fixed fields: what ran, on what, with which goals."""
    device, s, base = ctx["device"], ctx["shapes"], ctx["baselines"]
    return {
        "check": "gpu_check_torch",
        "goal": (f"current: graph bound ratio >= {GRAPH_GOAL_RATIO} at every point, eager (stream sync) >= "
                 f"{EAGER_GOAL_RATIO} for G <= {GOAL_MAX_GROUP}; speedup over upstream in graph mode >= "
                 + ", ".join(f"{v} at {k}" for k, v in SPEEDUP_GOALS.items())
                 + "; no offloaded step faster than the interleaved un-offloaded step beyond its spread (cuda)"),
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "python": sys.version.split()[0],
        "offloader_base": _offloader_base(),
        "shapes": dataclasses.asdict(s), "bytes_per_layer": ctx["layer_bytes"],
        "qwen25_7b_layer_bytes": ctx["layer_bytes"] == QWEN25_7B_LAYER_BYTES_BF16,
        "tokens": args.tokens, "steps": args.steps, "modes": ctx["modes"], "protocols": list(args.protocols),
        "step_sync": args.step_sync, "async_replays": args.async_replays, "budget_s": args.budget_s,
        "step_clock": "cuda_events" if device.type == "cuda" else "perf_counter",
        "compile_backend": args.compile_backend, "h2d_bandwidth_bytes_s": ctx["bw"],
        "emulate_precision_casts": emulate_precision_casts() if "compile" in base.fns else None,
        "negative_control": bool(args.negative_control), "skip_refill_control": bool(args.skip_refill_control),
        "baseline_step_s": dict(base.setup_step_s),
    }


def _offloader_base() -> str:
    """The class the offloaders subclass: vLLM's ``BaseOffloader``, or ``offload.base``'s stand-in without vLLM."""
    from offload.base import BaseOffloader

    return f"{BaseOffloader.__module__}.{BaseOffloader.__qualname__}"


def _write(path: str | None, summary: dict[str, Any]) -> None:
    """Write ``summary`` to ``path`` atomically (a run killed at its time limit leaves the last point's state)."""
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(summary, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _setup(args: argparse.Namespace) -> dict[str, Any]:
    """Reference stack, input, bandwidth and prepared baselines (the context every point shares)."""
    device = torch.device(args.device)
    dtype = torch.bfloat16
    s = Shapes.qwen25_7b(args.layers, args.width_divisor)
    layer_bytes = s.layer_params() * torch.empty((), dtype=dtype).element_size()
    modes = [m for m in args.modes if device.type == "cuda" or m != "graph"]
    torch.manual_seed(0)
    ref_layers = build_reference(s, device, dtype)
    x = torch.randn(args.tokens, s.hidden, device=device, dtype=dtype)
    bw = measure_h2d_bandwidth(layer_bytes, device)
    baselines = Baselines(args, modes, Stack(ref_layers), x, device)
    return {"device": device, "shapes": s, "baselines": baselines, "layer_bytes": layer_bytes, "bw": bw,
            "copy_s": layer_bytes / bw, "modes": modes, "ref_layers": ref_layers, "x": x}


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Run every point, protocol and mode; return the summary dict (see module docstring).

    A point starts only when its estimate (:func:`estimate_point_s`) fits in what is left of
    ``--budget-s``; a point that does not is listed in ``not_run`` with the reason and the run
    goes on with the next. The summary is rewritten to ``--out`` after every point (``complete`` false,
    ``pending`` the points still to run), so a run killed at its time limit names what it did not run.
    """
    t_start = time.perf_counter()
    ctx = _setup(args)
    head = _header(args, ctx)
    judged = ctx["device"].type == "cuda"
    points_out: list[dict[str, Any]] = []
    not_run: list[dict[str, Any]] = []
    setup_s_per_layer, overhead_s, layer_runs = SETUP_S_PER_LAYER, 0.0, 0
    baseline_s = time.perf_counter() - t_start
    for k, (g, n) in enumerate(args.points):
        sel = select_offload_layers(ctx["shapes"].layers, g, n)
        est = estimate_point_s(args, sel, ctx, setup_s_per_layer)
        left = args.budget_s - (time.perf_counter() - t_start)
        if est > left:
            not_run.append({"group_size": g, "num_in_group": n, "reason": f"not started: predicted {est:.1f} s, "
                            f"{left:.1f} s left of the {args.budget_s:g} s point budget"})
            continue
        t0 = time.perf_counter()
        rec = _run_point(args, k, g, n, ctx)
        rec["elapsed_s"], rec["predicted_s"] = time.perf_counter() - t0, est
        points_out.append(rec)
        if sel:  # pooled over the points run: the large points, which the budget is about, weigh most
            overhead_s += max(0.0, rec["elapsed_s"] - estimate_point_s(args, sel, ctx, 0.0))
            layer_runs += len(sel) * len(args.protocols)
            setup_s_per_layer = overhead_s / layer_runs
        pending = [list(p) for p in args.points[k + 1:]]
        _write(args.out, {**head, **verdict(points_out, judged, not_run, complete=False), "points": points_out,
                          "not_run": not_run, "pending": pending, "complete": False,
                          "elapsed_s": time.perf_counter() - t_start, "setup_and_baseline_s": baseline_s})
    return {**head, **verdict(points_out, judged, not_run), "points": points_out, "not_run": not_run,
            "pending": [], "complete": True, "elapsed_s": time.perf_counter() - t_start,
            "setup_and_baseline_s": baseline_s}


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
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="seconds for set-up and points: a point whose estimate does not fit is listed as not run")
    ap.add_argument("--out", help="also write the JSON summary here")
    ap.add_argument("--negative-control", action="store_true",
                    help="zero the offloaded host copies after post_init (outputs must then differ, exit 1)")
    ap.add_argument("--skip-refill-control", action="store_true",
                    help="crossing protocol: skip one owed refill after the first replay (must fail, exit 1)")
    a = ap.parse_args(argv)
    for name in ("layers", "width_divisor", "prefetch_step", "tokens", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} ({getattr(a, name)}) must be >= 1")
    if not a.budget_s > 0:
        ap.error(f"--budget-s ({a.budget_s}) must be > 0")
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
    _write(args.out, summary)
    for line in point_lines(summary):
        print(line, flush=True)
    print("GPU_CHECK_TORCH " + json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    # The command runs torch only, as on the device hosts, which have no vLLM: vLLM is kept out even where it is
    # installed (``offload.base`` then uses its stand-in ``BaseOffloader``, ``offload.backend`` pins whenever
    # torch sees CUDA), so a run's numbers do not depend on whether vLLM happens to be importable, and the CPU
    # plumbing run (tests/offload/test_gpu_protocols_script.py) takes the device's path without paying the
    # vLLM import (about 4 CPU-s) in each of its five check processes.
    sys.modules.setdefault("vllm", None)  # type: ignore[arg-type]
    sys.exit(main())
