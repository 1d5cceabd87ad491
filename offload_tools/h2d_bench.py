"""Host-to-device copy bench of a CUDA / NPU run: pinned copy bandwidth of one layer's bytes, repeated.

``python -m offload_tools.h2d_bench --bytes N --device cuda|npu [--repeats 5 --copies 20 --warmup 3]``

The bench a choose-then-confirm run uses on the CUDA and NPU runtimes (the CPU runtime has
:mod:`offload_tools.bench`). It copies ``--bytes`` bytes (one layer's weights) from a pinned host
``uint8`` tensor (``pin_memory()``) into a device ``uint8`` tensor with
``dst.copy_(src, non_blocking=True)``. Each of ``--repeats`` independent readings makes
``--warmup`` untimed copies, synchronizes the device, then times ``--copies`` copies with device
events (``torch.<dev>.Event(enable_timing=True)``, recorded on the current stream just before and
just after the copy; the end event is synchronized before the next copy). A reading is the
median of its timed copies (s) and its bandwidth bytes / that median (B/s). The reported
bandwidth is the median over the readings, with their spread: min, max and
(max - min) / median x 100 (%).

Output: exactly one line ``OFFLOAD_H2D_BENCH {json}`` on stdout (the record
:class:`results_schema.records.copy_bench.H2DBench` models). Exit status: 0 measured; 1 the measurement
gave no usable time (a copy timed at 0 s); 2 a bad argument (one line on stderr, before torch is
imported); 3 the device is not available (one line on stderr naming it).

The device boundary is :class:`DeviceOps` (:func:`cuda_ops`, :func:`npu_ops`); :func:`measure`
holds every step of the measurement, so tests drive it with a fake on CPU tensors.

What it does not measure: device-to-host copies, copies of many small tensors (one layer's
parameters one by one), overlap with compute (see :mod:`offload_tools.gpu_check_torch`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

if TYPE_CHECKING:  # torch is imported only once the arguments are checked
    import torch

__all__ = ["DEVICES", "LINE_PREFIX", "SCHEMA_VERSION", "BadArgument", "DeviceOps", "DeviceUnavailable",
           "H2DArgs", "TimingEvent", "cuda_ops", "main", "measure", "npu_ops", "parse_args"]

SCHEMA_VERSION = 1
LINE_PREFIX = "OFFLOAD_H2D_BENCH "
"""The printed line: this prefix, then the JSON record."""
DEVICES = ("cuda", "npu")
"""``--device`` choices."""


class BadArgument(ValueError):
    """A command-line argument that is not allowed (the message is one line naming it)."""


class DeviceUnavailable(RuntimeError):
    """The requested device cannot be used in this process (the message is one line naming it)."""


class TimingEvent(Protocol):
    """A device timing event (``torch.cuda.Event(enable_timing=True)`` or its NPU twin)."""

    def record(self) -> None:
        """Record the event on the current stream."""

    def synchronize(self) -> None:
        """Block the host until the event has completed."""

    def elapsed_time(self, end_event: Any) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded and completed)."""


class DeviceOps(Protocol):
    """The device boundary of :func:`measure`: everything it asks of the device runtime."""

    @property
    def device(self) -> str:
        """The device kind, ``"cuda"`` or ``"npu"``."""

    def pin(self, host: torch.Tensor) -> torch.Tensor:
        """Return a page-locked (pinned) copy of the host tensor ``host`` (``host.pin_memory()``)."""

    def empty(self, nbytes: int) -> torch.Tensor:
        """Return an uninitialised ``uint8`` tensor of ``nbytes`` elements on the device."""

    def event(self) -> TimingEvent:
        """Return a new timing event (``enable_timing=True``)."""

    def synchronize(self) -> None:
        """Block the host until all work queued on the device has finished."""

    def device_name(self) -> str:
        """The current device's name as the runtime reports it (e.g. ``NVIDIA H200``)."""


@dataclass(frozen=True)
class _TorchDeviceOps:
    """:class:`DeviceOps` over a ``torch.cuda``-like namespace (``torch.cuda`` or ``torch.npu``)."""

    device: str
    ns: Any

    def pin(self, host: torch.Tensor) -> torch.Tensor:
        return host.pin_memory()

    def empty(self, nbytes: int) -> torch.Tensor:
        import torch

        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def event(self) -> TimingEvent:
        event: TimingEvent = self.ns.Event(enable_timing=True)
        return event

    def synchronize(self) -> None:
        self.ns.synchronize()

    def device_name(self) -> str:
        return str(self.ns.get_device_name())


def cuda_ops() -> DeviceOps:
    """Build the CUDA device boundary (``torch.cuda``, the current device).

    Returns:
        A :class:`DeviceOps` whose ``device`` is ``"cuda"``.

    Raises:
        DeviceUnavailable: ``torch.cuda.is_available()`` is false (e.g. a CPU build of torch).
    """
    import torch

    if not torch.cuda.is_available():
        raise DeviceUnavailable(f"device cuda is not available: torch.cuda.is_available() is False "
                                f"(torch {torch.__version__})")
    return _TorchDeviceOps("cuda", torch.cuda)


def npu_ops() -> DeviceOps:
    """Build the Ascend NPU device boundary (``torch.npu`` via ``torch_npu``, the current device).

    Returns:
        A :class:`DeviceOps` whose ``device`` is ``"npu"``.

    Raises:
        DeviceUnavailable: ``torch_npu`` cannot be imported, or ``torch.npu.is_available()`` is false.
    """
    import torch

    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except ImportError as exc:
        raise DeviceUnavailable(f"device npu is not available: torch_npu cannot be imported ({exc})") from None
    ns = getattr(torch, "npu", None)
    if ns is None or not ns.is_available():
        raise DeviceUnavailable(f"device npu is not available: torch.npu.is_available() is False "
                                f"(torch {torch.__version__})")
    return _TorchDeviceOps("npu", ns)


OPS_BUILDERS: Mapping[str, Callable[[], DeviceOps]] = {"cuda": cuda_ops, "npu": npu_ops}
"""``--device`` value -> its :class:`DeviceOps` builder."""


def _timed_copies(ops: DeviceOps, dst: torch.Tensor, src: torch.Tensor, copies: int, warmup: int) -> list[float]:
    """``warmup`` untimed copies, a device sync, then the seconds of each of ``copies`` event-timed copies."""
    for _ in range(warmup):
        dst.copy_(src, non_blocking=True)
    ops.synchronize()
    start, end = ops.event(), ops.event()
    seconds = []
    for _ in range(copies):
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    return seconds


def _check_counts(nbytes: int, repeats: int, copies: int, warmup: int) -> None:
    for name, value, low in (("nbytes", nbytes, 1), ("repeats", repeats, 1), ("copies", copies, 1),
                             ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} {value!r}: must be an integer >= {low}")


def measure(ops: DeviceOps, nbytes: int, repeats: int = 5, copies: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Measure the pinned host -> device copy bandwidth of ``nbytes`` bytes, repeated.

    One pinned host ``uint8`` tensor and one device ``uint8`` tensor of ``nbytes`` elements serve
    every reading. Each of ``repeats`` readings makes ``warmup`` untimed copies, synchronizes the
    device, then times ``copies`` copies with the device's events; its ``median_copy_s`` is the
    median of those times (s) and its ``bandwidth_bytes_s`` is ``nbytes / median_copy_s`` (B/s).

    Args:
        ops: the device boundary (:func:`cuda_ops`, :func:`npu_ops`, or a test fake).
        nbytes: bytes per copy (one layer's bytes), >= 1.
        repeats: independent readings, >= 1.
        copies: timed copies per reading, >= 1.
        warmup: untimed copies before the timed ones of each reading, >= 0.

    Returns:
        The record :class:`results_schema.records.copy_bench.H2DBench` models: ``schema_version``,
        ``device``, ``bytes_per_copy`` (B), ``pinned`` (true), ``repeats``, ``copies``,
        ``readings`` (each ``{"bandwidth_bytes_s", "median_copy_s"}``), ``bandwidth_bytes_s`` (median
        over the readings, B/s), ``bandwidth_min_bytes_s`` / ``bandwidth_max_bytes_s`` (B/s),
        ``spread_pct`` ((max - min) / median x 100, %), ``torch_version``, ``device_name``.

    Raises:
        ValueError: a count is not an integer in its range, or a reading's median copy time is not
            positive (the events timed nothing: no bandwidth can be given).
    """
    _check_counts(nbytes, repeats, copies, warmup)
    import torch

    src = ops.pin(torch.ones(nbytes, dtype=torch.uint8))
    dst = ops.empty(nbytes)
    readings = []
    for r in range(repeats):
        median_s = statistics.median(_timed_copies(ops, dst, src, copies, warmup))
        if not median_s > 0:
            raise ValueError(f"reading {r}: median copy time of {nbytes} bytes is {median_s} s; the device events "
                             f"timed nothing, so no bandwidth can be given")
        readings.append({"bandwidth_bytes_s": nbytes / median_s, "median_copy_s": median_s})
    del src, dst
    bws = [x["bandwidth_bytes_s"] for x in readings]
    med = statistics.median(bws)
    return {"schema_version": SCHEMA_VERSION, "device": ops.device, "bytes_per_copy": nbytes, "pinned": True,
            "repeats": repeats, "copies": copies, "readings": readings, "bandwidth_bytes_s": med,
            "bandwidth_min_bytes_s": min(bws), "bandwidth_max_bytes_s": max(bws),
            "spread_pct": (max(bws) - min(bws)) / med * 100.0, "torch_version": str(torch.__version__),
            "device_name": ops.device_name()}


@dataclass(frozen=True)
class H2DArgs:
    """The checked command line: ``--device``, ``--bytes`` (B), ``--repeats``, ``--copies``, ``--warmup``."""

    device: str
    nbytes: int
    repeats: int
    copies: int
    warmup: int


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadArgument(message)


def _int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: must be an integer >= {low}")
        return value

    return convert


def parse_args(argv: Sequence[str] | None = None) -> H2DArgs:
    """Check the command line (imports no torch).

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns:
        The checked arguments.

    Raises:
        BadArgument: an argument is missing, unknown or out of range; the one-line message names the
            argument, the value given and what is allowed (``--bytes`` >= 1, ``--repeats`` >= 1,
            ``--copies`` >= 1, ``--warmup`` >= 0, ``--device`` one of :data:`DEVICES`).
        SystemExit: ``--help`` (status 0, after printing the usage).
    """
    ap = _Parser(prog="python -m offload_tools.h2d_bench", description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--bytes", dest="nbytes", type=_int_at_least(1), required=True,
                    help="bytes per copy (one layer's bytes), >= 1")
    ap.add_argument("--device", required=True, choices=DEVICES, help="device runtime")
    ap.add_argument("--repeats", type=_int_at_least(1), default=5, help="independent readings, >= 1 (default 5)")
    ap.add_argument("--copies", type=_int_at_least(1), default=20,
                    help="timed copies per reading, >= 1 (default 20); a reading is their median")
    ap.add_argument("--warmup", type=_int_at_least(0), default=3,
                    help="untimed copies before each reading's timed ones, >= 0 (default 3)")
    a = ap.parse_args(argv)
    return H2DArgs(a.device, a.nbytes, a.repeats, a.copies, a.warmup)


def main(argv: Sequence[str] | None = None, builders: Mapping[str, Callable[[], DeviceOps]] | None = None) -> int:
    """Run the bench from the command line and print its ``OFFLOAD_H2D_BENCH`` line.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.
        builders: ``--device`` value -> :class:`DeviceOps` builder; defaults to :data:`OPS_BUILDERS`
            (tests inject fakes here).

    Returns:
        The exit status: 0 measured and printed; 1 no usable time was measured; 2 a bad argument
        (torch not imported); 3 the device is not available. Every error is one ``error: ...``
        line on stderr.
    """
    try:
        a = parse_args(argv)
    except BadArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        ops = (builders or OPS_BUILDERS)[a.device]()
    except DeviceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    try:
        record = measure(ops, a.nbytes, a.repeats, a.copies, a.warmup)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(LINE_PREFIX + json.dumps(record, sort_keys=True, allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
