"""runners.incase.memory_sampler: before / peak / after windows, failure as missing, process-tree RSS."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from runners.incase.memory_sampler import PeakRSS, WindowSampler, tree_rss_bytes


def test_window_catches_a_peak_between_before_and_after() -> None:
    level = {"v": 100}
    with WindowSampler(lambda: level["v"], 0.01) as w:
        time.sleep(0.05)
        level["v"] = 1000  # a transient peak inside the block, gone by the end
        time.sleep(0.1)
        level["v"] = 300
    assert (w.before, w.peak, w.after) == (100, 1000, 300)
    assert w.error is None and w.samples >= 4


def test_peak_includes_the_end_samples() -> None:
    values = iter([5, 7])
    with WindowSampler(lambda: next(values), 10.0) as w:  # no background sample within the block
        pass
    assert (w.before, w.peak, w.after, w.samples) == (5, 7, 7, 2)
    values = iter([9, 2])
    with WindowSampler(lambda: next(values), 10.0) as w:
        pass
    assert (w.before, w.peak, w.after) == (9, 9, 2)


def test_a_failing_probe_leaves_every_value_missing_with_the_reason() -> None:
    calls = {"n": 0}

    def probe() -> int:
        calls["n"] += 1
        if calls["n"] >= 2:
            raise RuntimeError("npu-smi exited 1")
        return 10
    with WindowSampler(probe, 0.01) as w:
        time.sleep(0.05)
    assert (w.before, w.peak, w.after) == (None, None, None)
    assert w.error == "RuntimeError: npu-smi exited 1"
    with pytest.raises(ValueError, match="interval_s"):
        WindowSampler(lambda: 0, 0)


def test_tree_rss_counts_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(200 * 2**20); "
                              "b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"
        import psutil

        own = psutil.Process().memory_info().rss
        assert tree_rss_bytes() >= own + 200 * 2**20
        with PeakRSS(interval_s=0.01) as rss:
            pass
        assert rss.peak >= own + 200 * 2**20
        rss.include(rss.peak + 1)
        assert rss.include(None) is None and rss.peak >= own + 200 * 2**20 + 1
    finally:
        child.kill()
        child.wait()


def test_rss_window_of_an_allocation_in_this_process() -> None:
    with WindowSampler(tree_rss_bytes, 0.01) as w:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        time.sleep(0.05)
        del block
    assert w.before is not None and w.peak is not None and w.after is not None
    assert w.peak >= w.before + 60 * 2**20
    assert w.peak >= w.after
