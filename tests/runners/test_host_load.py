"""The host-load sampler: foreign CPU = host busy - case tree - runner, over the measured window."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.incase.host_load import (CONTENDED_CORES, HostReading, _proc_stat, read_host, window_load)

STAT = "cpu  100 5 50 1000 20 3 2 10 0 0\ncpu0 50 2 25 500 10 1 1 5 0 0\nintr 1 2 3\n"


def test_proc_stat_busy_excludes_idle_and_iowait_and_includes_steal() -> None:
    busy, total, steal = _proc_stat(STAT, 0.01)
    assert busy == pytest.approx((100 + 5 + 50 + 3 + 2 + 10) * 0.01)
    assert total == pytest.approx((100 + 5 + 50 + 1000 + 20 + 3 + 2 + 10) * 0.01)
    assert steal == pytest.approx(0.10)
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        _proc_stat("cpu0 1 2 3 4\n", 0.01)


def _reading(wall: float, busy: float, case: float, runner: float, steal: float = 0.0,
             total: float | None = None) -> HostReading:
    return HostReading(wall_s=wall, host_busy_s=busy, host_total_s=2 * wall if total is None else total,
                       steal_s=steal, case_s=case, runner_s=runner)


def test_foreign_work_is_what_neither_the_case_nor_the_runner_used() -> None:
    load = window_load(_reading(0, 0, 0, 0), _reading(10, 16, 9, 1), cores=2)
    assert load is not None and load.foreign_cpu_s == pytest.approx(6) and load.foreign_cores == pytest.approx(0.6)
    assert load.contended
    quiet = window_load(_reading(0, 0, 0, 0), _reading(10, 10.5, 9.9, 0.2), cores=2)
    assert quiet is not None and quiet.foreign_cores < CONTENDED_CORES and not quiet.contended


def test_steal_alone_makes_a_case_contended() -> None:
    load = window_load(_reading(0, 0, 0, 0, 0, 0), _reading(10, 10, 9.5, 0.5, steal=2, total=20), cores=2)
    assert load is not None and load.foreign_cpu_s == 0 and load.steal_fraction == pytest.approx(0.1)
    assert load.contended


def test_readings_a_few_ticks_apart_never_give_negative_foreign_work() -> None:
    load = window_load(_reading(0, 0, 0, 0), _reading(1, 0.98, 1.0, 0.0))
    assert load is not None and load.foreign_cpu_s == 0.0


def test_no_proc_stat_records_nothing(tmp_path: Path) -> None:
    assert read_host(proc_stat=tmp_path / "absent") is None
    assert window_load(None, None) is None


@pytest.mark.heavy  # a 1.5 s busy loop
@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="Linux /proc/stat")
def test_a_busy_process_outside_the_case_tree_and_the_runner_is_foreign_work() -> None:
    # the "case" is a sleeping child, the "runner" this test process (its own time only); a busy loop
    # started beside the case is neither: it shows as about one core of foreign work
    case = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        time.sleep(0.3)
        start = read_host(case_pid=case.pid, runner_pid=os.getpid())
        busy = subprocess.Popen([sys.executable, "-c",
                                 "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\n"])
        busy.wait()
        end = read_host(case_pid=case.pid, runner_pid=os.getpid())
    finally:
        case.kill()
        case.wait()
    load = window_load(start, end)
    assert load is not None and load.case_cpu_s < 0.2
    assert load.foreign_cpu_s >= 1.0 and load.foreign_cores > CONTENDED_CORES and load.contended


def test_read_host_takes_the_stat_text_and_the_case_tree_and_the_runner_at_the_boundary(tmp_path: Path, monkeypatch):
    # the readings as the case process takes them: /proc/stat text, the case's tree, the runner alone (faked)
    import runners.incase.host_load as hl

    stat = tmp_path / "stat"
    tree = {"case": 1.0, "runner": 0.5}
    monkeypatch.setattr(hl, "_tree_cpu_s", lambda pid: tree["case"] if pid == 11 else 99.0)
    monkeypatch.setattr(hl, "_own_cpu_s", lambda pid: tree["runner"] if pid == 7 else 99.0)
    monkeypatch.setattr(hl.os, "sysconf", lambda name: 100)
    stat.write_text("cpu  1000 0 0 5000 0 0 0 0 0 0\n")
    start = read_host(case_pid=11, runner_pid=7, proc_stat=stat)
    # 10 s later: the case used 9 s, the runner 0.5 s, the host 16 s busy (+ 1 s steal of 20 s)
    stat.write_text("cpu  2500 0 0 5300 0 0 0 100 0 0\n")
    tree.update(case=10.0, runner=1.0)
    end = read_host(case_pid=11, runner_pid=7, proc_stat=stat)
    assert start is not None and end is not None
    end = HostReading(**{**vars(end), "wall_s": start.wall_s + 10.0})
    load = window_load(start, end, cores=2)
    assert load is not None
    assert load.host_busy_cpu_s == pytest.approx(16.0) and load.case_cpu_s == pytest.approx(9.0)
    assert load.foreign_cpu_s == pytest.approx(6.5) and load.foreign_cores == pytest.approx(0.65)
    assert load.steal_fraction == pytest.approx(1.0 / 19.0)
    rec = load.record()
    assert rec.contended and rec.host_cores == 2 and rec.contended_cores_limit == CONTENDED_CORES
    assert rec.foreign_cores == pytest.approx(0.65) and rec.steal_cpu_s == pytest.approx(1.0)


def test_a_quiet_window_records_an_uncontended_host_load() -> None:
    load = window_load(_reading(0, 0, 0, 0), _reading(10, 10.5, 9.9, 0.2), cores=2)
    assert load is not None
    rec = load.record()
    assert not rec.contended and rec.foreign_cores == pytest.approx(0.04)


def test_the_progress_line_of_a_contended_case_says_so() -> None:
    import random

    from runners.kinds.bench import THROUGHPUT
    from runners.outcome.finalized import Line, Outcome
    from tests.support.synthetic import SynthCase, make_case_run

    case = SynthCase("baseline", "baseline", foreign_cores=(0.9, 0.1))
    busy = make_case_run("same_runtime", case, 0, random.Random(0))
    quiet = make_case_run("same_runtime", case, 1, random.Random(0))
    line = THROUGHPUT.progress(Outcome(lines=(Line("same_runtime-runs.jsonl", busy),), failure=None, expected=True))
    assert line.endswith("; CONTENDED: 0.90 foreign cores, steal 0.0% while it measured (verdicts resting on it are "
                         "withheld)")
    assert "CONTENDED" not in THROUGHPUT.progress(Outcome(lines=(Line("same_runtime-runs.jsonl", quiet),), failure=None,
                                                          expected=True))
