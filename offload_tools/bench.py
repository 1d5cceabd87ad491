"""CPU benchmark: per-forward onload time of a wrapped layer vs a plain torch copy of the same bytes.

``python -m offload_tools.bench [--hidden 1024 --intermediate 2816 --layers 8 --group-size 2
--num-in-group 1 --prefetch-step 1 --forwards 60 --dtype bfloat16]``

A stack of decoder-shaped layers (q/k/v with bias, o, gate_up, down, two norm weights;
Qwen2 shapes) is wrapped by :class:`offload.prefetch.CurrentPrefetchOffloader` on the CPU
backend and run forward. Every onload the offloader does inside those forwards
(``_wait_for_layer`` before + ``_start_prefetch`` after a wrapped layer) is timed. In the
same run, on alternate forwards, the offloader's onload is replaced at the same moment by a
plain ``dst.copy_(src)`` of the same bytes between the same host and buffer tensors (same
cache state), which is the reference. The reported ratio is
median(ours) / median(plain); the target is <= 1.3.

The measurement is repeated (``--repeats``, default 5; each repeat a fresh stack): each repeat
is one reading (its plain copy bandwidth and its onload bandwidth, bytes per onload / median
onload time). A reading whose plain copy bandwidth disagrees with the onload bandwidth measured
in the same repeat by more than ``MAX_DISAGREEMENT`` (10x, either way) measured something else
than a copy of those bytes (a stall, a descheduled thread): it is flagged and not used. The
reported figures are medians over the used readings, with their spread (min, max, and
(max - min) / median in percent); with no usable reading they are null.

What it does not measure: host-to-device bandwidth or overlap on a real accelerator (see
``scripts/gpu_check.sh``); on CPU every copy is synchronous.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence

import torch
import torch.nn as nn

from offload.prefetch import CurrentPrefetchOffloader

TARGET_RATIO = 1.3
MAX_DISAGREEMENT = 10.0
"""A reading whose plain copy and onload bandwidths differ by more than this factor is not used."""


class DecoderLike(nn.Module):
    """Qwen2-shaped decoder layer (parameters only matter; compute is a cheap stand-in)."""

    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.input_layernorm = nn.Parameter(torch.ones(hidden, dtype=dtype), requires_grad=False)
        self.qkv_proj = nn.Linear(hidden, 3 * hidden, bias=True, dtype=dtype).requires_grad_(False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype).requires_grad_(False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(hidden, dtype=dtype), requires_grad=False)
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False, dtype=dtype).requires_grad_(False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.input_layernorm
        h = self.o_proj(self.qkv_proj(h)[..., : h.shape[-1]])
        g, u = self.gate_up_proj(h * self.post_attention_layernorm).chunk(2, dim=-1)
        return x + self.down_proj(torch.nn.functional.silu(g) * u)


class _OnloadTimer:
    """Times every onload of ``off`` (its ``_start_prefetch`` / ``_wait_for_layer``), in ns.

    ``mode`` ``ours``: the offloader's own copy and wait are timed; ``plain``: the same runs
    are copied with ``Tensor.copy_`` instead (the same bytes, same tensors, same moment).
    """

    def __init__(self, off: CurrentPrefetchOffloader) -> None:
        self.off = off
        self.start, self.wait = off._start_prefetch, off._wait_for_layer
        self.pending: list[int] = []
        self.mode = "ours"
        # instance attributes shadow the methods: every hook of the offloader now calls these
        setattr(off, "_start_prefetch", self.timed_start)  # noqa: B010
        setattr(off, "_wait_for_layer", self.timed_wait)  # noqa: B010

    def timed_start(self, idx: int) -> None:
        if self.mode == "ours":
            t0 = time.perf_counter_ns()
            self.start(idx)
            self.pending.append(time.perf_counter_ns() - t0)
            return
        w = self.off.wrapped[idx]
        t0 = time.perf_counter_ns()
        for dst, src in w.runs:  # the plain reference: the same bytes, same tensors, same moment
            dst.copy_(src)
        self.pending.append(time.perf_counter_ns() - t0)
        self.off._slot_owner[w.slot] = idx

    def timed_wait(self, idx: int) -> None:
        t0 = time.perf_counter_ns()
        self.wait(idx)
        if self.mode == "ours":
            self.pending.append(time.perf_counter_ns() - t0)


def run(hidden: int, intermediate: int, layers: int, group_size: int, num_in_group: int, prefetch_step: int,
        forwards: int, dtype: torch.dtype, warmup: int = 5) -> dict:
    """Run the benchmark; returns the measured figures (seconds are medians per onload)."""
    off = CurrentPrefetchOffloader(group_size, num_in_group, prefetch_step)
    stack = off.wrap_modules(DecoderLike(hidden, intermediate, dtype) for _ in range(layers))
    off.post_init()
    assert off.buffer_pool is not None
    resident = [w.layer for w in off.wrapped if w.next_index == w.index]
    if resident or not off.wrapped:
        raise ValueError(f"nothing to time: layers {resident or '(none wrapped)'} sit alone in their slot and are "
                         f"loaded once (G={group_size}, N={num_in_group}, prefetch_step={prefetch_step}, "
                         f"{len(off.wrapped)} wrapped); the bench needs more wrapped layers than prefetch_step")
    ours: list[float] = []
    plain: list[float] = []
    timer = _OnloadTimer(off)
    nbytes = [sum(dst.numel() for dst, _ in w.runs) for w in off.wrapped]
    x = torch.randn(4, hidden, dtype=dtype)
    with torch.inference_mode():
        for f in range(2 * (warmup + forwards)):
            timer.mode = "ours" if f % 2 == 0 else "plain"
            timer.pending.clear()
            y = x
            for layer in stack:
                y = layer(y)
            if f < 2 * warmup:
                continue
            if timer.mode == "ours":
                # per wrapped layer and forward: wait (before it runs) + start (refill after it ran)
                waits, starts = timer.pending[0::2], timer.pending[1::2]
                ours.extend(a + b for a, b in zip(waits, starts, strict=False))
            else:
                plain.extend(timer.pending)
    med_ours = statistics.median(ours) / 1e9
    med_plain = statistics.median(plain) / 1e9
    return {
        "hidden": hidden,
        "intermediate": intermediate,
        "layers": layers,
        "wrapped": len(off.wrapped),
        "slots": off.buffer_pool.num_slots,
        "dtype": str(dtype).removeprefix("torch."),
        "bytes_per_onload": int(statistics.median(nbytes)),
        "onloads_measured": len(ours),
        "onload_median_s": med_ours,
        "plain_copy_median_s": med_plain,
        "ratio": med_ours / med_plain,
        "plain_copy_bandwidth_bytes_s": statistics.median(nbytes) / med_plain,
        "target_ratio": TARGET_RATIO,
        "fallback_loads": off.fallback_loads,
        "threads": torch.get_num_threads(),
    }


def reading(r: dict) -> dict:
    """One repeat's reading: its bandwidths, their disagreement, whether it is used (and why not).

    Args:
        r: one ``run`` result.

    Returns:
        ``plain_copy_bandwidth_bytes_s``, ``onload_bandwidth_bytes_s`` (bytes per onload / median
        onload s), ``disagreement`` (the larger of their two ratios, >= 1), ``onload_median_s``,
        ``plain_copy_median_s``, ``used`` and ``flag`` (why not used; null when used).
    """
    plain_bw = float(r["plain_copy_bandwidth_bytes_s"])
    onload_bw = r["bytes_per_onload"] / r["onload_median_s"]
    disagreement = max(plain_bw / onload_bw, onload_bw / plain_bw)
    used = disagreement <= MAX_DISAGREEMENT
    flag = None if used else (
        f"plain copy {plain_bw / 1e9:.4g} GB/s disagrees with the onload measured in the same repeat "
        f"({onload_bw / 1e9:.4g} GB/s) by {disagreement:.1f}x > {MAX_DISAGREEMENT:g}x: not used")
    return {"plain_copy_bandwidth_bytes_s": plain_bw, "onload_bandwidth_bytes_s": onload_bw,
            "disagreement": disagreement, "onload_median_s": r["onload_median_s"],
            "plain_copy_median_s": r["plain_copy_median_s"], "used": used, "flag": flag}


def summarize(runs: Sequence[dict]) -> dict:
    """The figures of repeated ``run`` results: medians over the used readings, their spread, every reading.

    Keeps every field of one ``run`` result (the shapes from the first; ``onloads_measured`` and
    ``fallback_loads`` summed; the timing fields and ``ratio`` are medians over the used readings,
    null when none is usable) and adds ``repeats``, ``readings``, ``readings_used``,
    ``max_disagreement`` and the bandwidth spread (``plain_copy_bandwidth_min_bytes_s``,
    ``..._max_bytes_s``, ``..._spread_pct`` = (max - min) / median x 100).

    Raises:
        ValueError: ``runs`` is empty.
    """
    if not runs:
        raise ValueError("summarize needs at least one run")
    readings = [reading(r) for r in runs]
    used = [x for x in readings if x["used"]]
    out = dict(runs[0])
    out.update(repeats=len(runs), readings=readings, readings_used=len(used), max_disagreement=MAX_DISAGREEMENT,
               onloads_measured=sum(int(r["onloads_measured"]) for r in runs),
               fallback_loads=sum(int(r["fallback_loads"]) for r in runs))
    if not used:
        out.update(onload_median_s=None, plain_copy_median_s=None, ratio=None, plain_copy_bandwidth_bytes_s=None,
                   plain_copy_bandwidth_min_bytes_s=None, plain_copy_bandwidth_max_bytes_s=None,
                   plain_copy_bandwidth_spread_pct=None)
        return out
    bws = [x["plain_copy_bandwidth_bytes_s"] for x in used]
    med_ours = statistics.median(x["onload_median_s"] for x in used)
    med_plain = statistics.median(x["plain_copy_median_s"] for x in used)
    med_bw = statistics.median(bws)
    out.update(onload_median_s=med_ours, plain_copy_median_s=med_plain, ratio=med_ours / med_plain,
               plain_copy_bandwidth_bytes_s=med_bw, plain_copy_bandwidth_min_bytes_s=min(bws),
               plain_copy_bandwidth_max_bytes_s=max(bws),
               plain_copy_bandwidth_spread_pct=(max(bws) - min(bws)) / med_bw * 100.0)
    return out


def _print(r: dict) -> None:
    print(f"wrapped layers: {r['wrapped']} of {r['layers']}, slots: {r['slots']}, "
          f"bytes per onload: {r['bytes_per_onload']:,}, onloads measured: {r['onloads_measured']}, "
          f"repeats: {r['repeats']} ({r['readings_used']} used)")
    for x in r["readings"]:
        if x["flag"]:
            print(f"flagged reading: {x['flag']}")
    if r["ratio"] is None:
        print("no usable reading: every repeat's plain copy disagrees with its onload by more than "
              f"{MAX_DISAGREEMENT:g}x")
        return
    print(f"onload (ours)  median: {r['onload_median_s'] * 1e6:9.1f} us")
    print(f"plain copy_    median: {r['plain_copy_median_s'] * 1e6:9.1f} us, "
          f"{r['plain_copy_bandwidth_bytes_s'] / 1e9:.4g} GB/s (min {r['plain_copy_bandwidth_min_bytes_s'] / 1e9:.4g}, "
          f"max {r['plain_copy_bandwidth_max_bytes_s'] / 1e9:.4g}, spread {r['plain_copy_bandwidth_spread_pct']:.1f}%)")
    print(f"ratio ours/plain: {r['ratio']:.3f} (target <= {TARGET_RATIO})")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m offload_tools.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=2)
    ap.add_argument("--num-in-group", type=int, default=1)
    ap.add_argument("--prefetch-step", type=int, default=1)
    ap.add_argument("--forwards", type=int, default=60)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--repeats", type=int, default=5, help="independent repeats (each a fresh stack); >= 1")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when the ratio exceeds {TARGET_RATIO} "
                                                         "(or no reading is usable)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats}: must be >= 1")
    try:
        r = summarize([run(a.hidden, a.intermediate, a.layers, a.group_size, a.num_in_group, a.prefetch_step,
                           a.forwards, getattr(torch, a.dtype)) for _ in range(a.repeats)])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print(r)
    print("OFFLOAD_BENCH " + json.dumps(r, sort_keys=True, allow_nan=False), flush=True)
    return 1 if a.check and (r["ratio"] is None or r["ratio"] > TARGET_RATIO) else 0


if __name__ == "__main__":
    sys.exit(main())
