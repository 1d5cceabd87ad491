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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
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


def time_steps(fn: Callable[[], torch.Tensor], steps: int, sync: Callable[[], None]) -> tuple[float, torch.Tensor]:
    """Median seconds of ``steps`` calls of ``fn`` (one untimed call first) and the last output."""
    out = fn()
    sync()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


@dataclass
class ModeResult:
    """Median step seconds, last output, and (graph) the outputs of the unsynchronised replays."""

    step_s: float
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


def run_mode(mode: str, stack: torch.nn.Module, x: torch.Tensor, off: Any, steps: int, device: torch.device,
             compile_backend: str, step_sync: str = "stream", async_replays: int = 0) -> ModeResult:
    """Run ``stack`` under ``mode`` (eager / graph / compile) with offloader ``off`` (or None).

    Raises:
        ValueError: unknown ``mode`` or ``step_sync``.
    """
    sync = StepSync(device, step_sync)
    with torch.no_grad():
        if mode == "eager":
            t, out = time_steps(lambda: stack(x), steps, sync)
            return ModeResult(t, out, [])
        if mode == "compile":
            torch._dynamo.reset()
            emulate_precision_casts()
            compiled = torch.compile(stack, backend=compile_backend, dynamic=False, fullgraph=True)
            t, out = time_steps(lambda: compiled(x), steps, sync)
            return ModeResult(t, out, [])
        if mode == "graph":
            replay = _graph(stack, x, off)
            t, out = time_steps(replay, steps, sync)
            outs = [replay().clone() for _ in range(async_replays)]  # no host sync in between
            torch.cuda.synchronize()
            return ModeResult(t, out, outs)
    raise ValueError(f"mode ({mode!r}) must be one of eager, graph, compile")
