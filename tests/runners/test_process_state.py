"""Claims about the per-process memory and placement state a bench process records (candidate noise sources)."""

from __future__ import annotations

import os
import sys

import pytest

from results_schema.records.process_state import ProcessState
from runners.incase.process_state import ProcessStateReader, cpu_list, smaps_kib, thp_mode


def test_cpu_list_is_the_kernel_list_format():
    assert cpu_list({0, 1, 2, 5}) == "0-2,5"
    assert cpu_list([3]) == "3"
    assert cpu_list([0, 2, 4, 5]) == "0,2,4-5"


def test_smaps_and_thp_parsing():
    text = "Rss:              123 kB\nAnonymous:         64 kB\nAnonHugePages:   2048 kB\n"
    assert smaps_kib(text, "AnonHugePages") == 2048 * 1024 and smaps_kib(text, "Anonymous") == 64 * 1024
    assert smaps_kib(text, "ShmemPmdMapped") is None
    assert thp_mode("always [madvise] never\n") == "madvise" and thp_mode("") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_the_reader_counts_faults_over_the_window_and_reads_this_process_placement():
    reader = ProcessStateReader()
    assert reader.finish() is None  # no window started: nothing claimed
    reader.start()
    block = bytearray(64 * 1024 * 1024)  # first touch of 64 MiB: minor faults inside the window
    for i in range(0, len(block), 4096):
        block[i] = 1
    state = reader.finish()
    assert isinstance(state, ProcessState)
    assert state.minor_faults > 0 and state.major_faults >= 0
    assert state.cpus_allowed == cpu_list(os.sched_getaffinity(0))
    assert sum(state.thread_cpus_allowed.values()) >= 1
    assert state.anon_bytes is None or state.anon_bytes > 0
