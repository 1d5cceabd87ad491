"""How :mod:`offload_tools.gpu_check_torch` runs and times one stack in one mode (eager, graph, compile).

Step boundary (``step_sync``): ``stream`` (default) waits after each step only for the compute
stream's output, as vLLM's loop waits for the sampled tokens, so copies may cross the step
boundary; ``device`` waits for the whole device (``torch.cuda.synchronize()``), so no copy crosses
it. CUDA graphs: warm-up off the default stream (torch's recipe), ``sync_prev_onload`` before
capture and before every replay, ``join_after_forward`` inside capture, as vLLM 0.32's
``CUDAGraphWrapper`` (``vllm/compilation/cuda_graph.py`` l. 311, 325, 360). After the timed
steps a graph is replayed ``async_replays`` more times with no host synchronisation between
replays (the host running ahead, as with async scheduling); each output is cloned on the compute
stream and all are compared with the reference at the end.

Timing: :func:`time_steps` times every arm (un-offloaded baseline and offloaded stacks alike) on the
device's clock on CUDA (events on the compute stream around each step) and with ``perf_counter``
elsewhere. :func:`prepare` builds a mode's step function once (a compiled stack or a captured graph),
so the un-offloaded baseline is prepared at set-up and timed again at every point (:func:`measure`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

STEP_SYNCS = ("stream", "device")


class StepSync:
    """Wait at the end of a step: the compute stream's output (``stream``) or the whole device (``device``).

    Raises:
        ValueError: ``kind`` not in :data:`STEP_SYNCS`.
    """

    def __init__(self, device: torch.device, kind: str = "stream") -> None:
        if kind not in STEP_SYNCS:
            raise ValueError(f"step_sync ({kind!r}) must be one of {', '.join(STEP_SYNCS)}")
        self.cuda = device.type == "cuda"
        self.kind = kind

    def __call__(self) -> None:
        if not self.cuda:
            return
        if self.kind == "device":
            torch.cuda.synchronize()
        else:
            torch.cuda.current_stream().synchronize()


def measure_h2d_bandwidth(nbytes: int, device: torch.device, repeats: int = 5) -> float:
    """Pinned host -> ``device`` copy bandwidth in bytes/s (median of ``repeats`` copies of ``nbytes``)."""
    pin = device.type == "cuda"
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    sync = StepSync(device, "device")
    times = []
    for _ in range(repeats + 1):
        sync()
        t = time.perf_counter()
        dst.copy_(src, non_blocking=pin)
        sync()
        times.append(time.perf_counter() - t)
    del src, dst
    return nbytes / statistics.median(times[1:])


def time_steps(fn: Callable[[], torch.Tensor], steps: int, sync: Callable[[], None],
               device: torch.device | None = None) -> tuple[list[float], torch.Tensor]:
    """Seconds of each of ``steps`` calls of ``fn`` (one untimed call first) and the last output.

    On CUDA each step is timed on the device's clock: CUDA events recorded on the compute stream
    before and after ``fn`` (what the host issues in between, ``sync_prev_onload`` and the launches,
    is inside), read after ``sync``; elsewhere with ``time.perf_counter`` around ``fn`` and ``sync``.
    Every arm of the check (protocols and the un-offloaded baseline) is timed by this one function.
    """
    out = fn()
    sync()
    cuda = device is not None and device.type == "cuda"
    times = []
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            sync()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            out = fn()
            sync()
            times.append(time.perf_counter() - t)
    return times, out


@dataclass
class ModeResult:
    """Median step seconds, every step's seconds, last output, and (graph) the unsynchronised replays' outputs."""

    step_s: float
    step_times_s: list[float]
    out: torch.Tensor
    async_outs: list[torch.Tensor]


def emulate_precision_casts() -> bool:
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


def _graph(stack: torch.nn.Module, x: torch.Tensor, off: Any) -> Callable[[], torch.Tensor]:
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

    return replay


def prepare(mode: str, stack: torch.nn.Module, x: torch.Tensor, off: Any,
            compile_backend: str = "inductor") -> Callable[[], torch.Tensor]:
    """The step function of ``stack`` under ``mode``: a call (eager), a compiled call, or a captured graph's replay.

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode == "eager":
        return lambda: stack(x)
    if mode == "compile":
        emulate_precision_casts()
        _allow_recompiles()
        compiled = torch.compile(stack, backend=compile_backend, dynamic=False, fullgraph=True)
        return lambda: compiled(x)
    if mode == "graph":
        return _graph(stack, x, off)
    raise ValueError(f"mode ({mode!r}) must be one of eager, graph, compile")


def _allow_recompiles() -> None:
    """Each stack of a check is one more compiled entry of ``Stack.forward``: lift dynamo's per-code limit (8)."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(64, getattr(dynamo_config, name)))


def measure(fn: Callable[[], torch.Tensor], steps: int, device: torch.device, step_sync: str = "stream",
            async_replays: int = 0) -> ModeResult:
    """Time ``steps`` steps of ``fn`` (:func:`time_steps`); then ``async_replays`` more with no host sync between them.

    Raises:
        ValueError: unknown ``step_sync``.
    """
    sync = StepSync(device, step_sync)
    with torch.no_grad():
        times, out = time_steps(fn, steps, sync, device)
        outs = [fn().clone() for _ in range(async_replays)]  # no host sync in between
        if device.type == "cuda":
            torch.cuda.synchronize()
    return ModeResult(statistics.median(times), times, out, outs)


def run_mode(mode: str, stack: torch.nn.Module, x: torch.Tensor, off: Any, steps: int, device: torch.device,
             compile_backend: str, step_sync: str = "stream", async_replays: int = 0) -> ModeResult:
    """Run ``stack`` under ``mode`` (eager / graph / compile) with offloader ``off`` (or None).

    ``async_replays`` applies to graph mode only.

    Raises:
        ValueError: unknown ``mode`` or ``step_sync``.
    """
    with torch.no_grad():
        fn = prepare(mode, stack, x, off, compile_backend)
    return measure(fn, steps, device, step_sync, async_replays if mode == "graph" else 0)


class Baselines:
    """The un-offloaded stack, prepared once per mode; timed at every point before and after the protocols.

    ``ref[mode]`` is the output every offloaded run must equal bitwise; ``setup_step_s[mode]`` the
    median step when it was prepared.
    """

    def __init__(self, args: argparse.Namespace, modes: list[str], stack: torch.nn.Module,
                 x: torch.Tensor, device: torch.device) -> None:
        self.args, self.device = args, device
        self.fns: dict[str, Any] = {}
        self.ref: dict[str, torch.Tensor] = {}
        self.setup_step_s: dict[str, float] = {}
        for mode in modes:
            if mode == "compile" and not args.compile_points:
                continue
            with torch.no_grad():
                self.fns[mode] = prepare(mode, stack, x, None, args.compile_backend)
            r = measure(self.fns[mode], args.steps, device, args.step_sync)
            self.ref[mode], self.setup_step_s[mode] = r.out.clone(), r.step_s

    def block(self, modes: Sequence[str]) -> dict[str, ModeResult]:
        """One timed block of the un-offloaded stack in each of ``modes`` it was prepared for (outputs cloned:
        a graph's output buffer is overwritten by the next block's replays)."""
        out = {}
        for m in modes:
            if m in self.fns:
                r = measure(self.fns[m], self.args.steps, self.device, self.args.step_sync)
                out[m] = ModeResult(r.step_s, r.step_times_s, r.out.clone(), r.async_outs)
        return out
