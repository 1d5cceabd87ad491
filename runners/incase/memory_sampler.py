"""Memory samplers of one bench process: RSS of the process tree, and a before / peak / after window.

What is modelled:

* ``tree_rss_bytes``: resident set size of this process plus all its descendants (vLLM V1 runs
  the engine core in a child process), summed over ``psutil`` ``memory_info().rss`` (bytes);
* ``WindowSampler``: samples a probe (``() -> bytes``) once on entry (``before``), every
  ``interval_s`` in a background thread, and once on exit (``after``); ``peak`` is the maximum
  of every sample, both ends included, so ``peak >= before`` and ``peak >= after`` always hold.
  A probe that raises stops the sampler: every value becomes None and ``error`` says why
  (missing, never 0);
* ``PeakRSS``: the process-lifetime peak (``BenchRecord.peak_rss_bytes``): the tree RSS sampled
  every ``RSS_INTERVAL_S``, raised to this process's own ``ru_maxrss`` at the end.

The intervals are fixed: ``RSS_INTERVAL_S`` = 0.1 s (a ``/proc`` read per process);
``DEVICE_INTERVAL_S`` = 0.5 s (one ``npu-smi info`` / ``nvidia-smi`` run per sample, each
taking a few hundred ms on a real host). A peak shorter than the interval can be missed.

What is deliberately not modelled: device memory queries (``runners.incase.device_memory``).
"""

from __future__ import annotations

import resource
import threading
from collections.abc import Callable

RSS_INTERVAL_S = 0.1
"""Seconds between RSS samples (process tree, psutil)."""

DEVICE_INTERVAL_S = 0.5
"""Seconds between device-memory samples (one npu-smi / nvidia-smi run each)."""


def tree_rss_bytes() -> int:
    """RSS of this process plus all its descendants (bytes); processes that vanish meanwhile are skipped."""
    import psutil

    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


class WindowSampler:
    """Before / peak / after of ``probe`` over a ``with`` block (bytes; see the module docstring).

    Attributes:
        before, peak, after: bytes, or None when the probe failed (``error`` set) or the block has not ended.
        samples: number of successful probe calls.
        error: the first probe failure (``Type: message``), or None.
    """

    def __init__(self, probe: Callable[[], int], interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s ({interval_s}) must be > 0")
        self.probe = probe
        self.interval_s = interval_s
        self.before: int | None = None
        self.peak: int | None = None
        self.after: int | None = None
        self.samples = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="window-sampler", daemon=True)

    def sample(self) -> int | None:
        """One probe call; updates ``peak``; None (and ``error``) when the probe fails or failed before."""
        if self.error is not None:
            return None
        try:
            value = int(self.probe())
        except Exception as exc:  # noqa: BLE001 - any probe failure is recorded as the reason, never as 0
            with self._lock:
                self.error = self.error or f"{type(exc).__name__}: {exc}"
            return None
        with self._lock:
            self.samples += 1
            self.peak = value if self.peak is None else max(self.peak, value)
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self.error is None:
            self.sample()

    def __enter__(self) -> "WindowSampler":
        self.before = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.after = self.sample()
        if self.error is not None:
            self.before = self.peak = self.after = None


class PeakRSS:
    """Process-lifetime peak RSS of this process plus its descendants (bytes): ``BenchRecord.peak_rss_bytes``."""

    def __init__(self, interval_s: float = RSS_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def sample(self) -> int:
        total = tree_rss_bytes()
        self.peak = max(self.peak, total)
        return total

    def include(self, value: int | None) -> None:
        """Raise the peak to a sample taken elsewhere (e.g. the load window's RSS peak)."""
        if value is not None:
            self.peak = max(self.peak, value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> "PeakRSS":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        self.peak = max(self.peak, own)
