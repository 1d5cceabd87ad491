"""The host-to-device copy bench: repeated readings timed by device events, median with spread, one JSON line.

A fake :class:`offload_tools.h2d_bench.DeviceOps` on CPU tensors stands in for the device: its events return
scripted elapsed times, so every expected bandwidth is known exactly, and it logs every pin request, copy,
event record and synchronize, so the order of the measurement is checked too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable

import pytest
import torch
from pydantic import ValidationError

from offload_tools.h2d_bench import LINE_PREFIX, BadArgument, main, measure, parse_args
from results_schema.records.copy_bench import H2DBench

NBYTES = 1_000_000


class FakeEvent:
    """Records into the fake's log; ``elapsed_time`` pops the next scripted time (ms)."""

    def __init__(self, fake: FakeOps, name: str) -> None:
        self.fake, self.name = fake, name

    def record(self) -> None:
        self.fake.log.append(f"record {self.name}")

    def synchronize(self) -> None:
        self.fake.log.append(f"sync {self.name}")

    def elapsed_time(self, end_event: FakeEvent) -> float:
        assert (self.name, end_event.name) == ("start", "end")
        return self.fake.times_ms.pop(0)


class FakeDst:
    """The "device" tensor: a CPU uint8 tensor whose ``copy_`` is logged (source pinned? non_blocking?)."""

    def __init__(self, fake: FakeOps, nbytes: int) -> None:
        self.fake, self.data = fake, torch.zeros(nbytes, dtype=torch.uint8)

    def copy_(self, src: torch.Tensor, non_blocking: bool = False) -> FakeDst:
        pinned = any(src is p for p in self.fake.pinned)
        self.fake.log.append(f"copy pinned={pinned} non_blocking={non_blocking} bytes={src.numel()}")
        self.data.copy_(src)
        return self


class FakeOps:
    """A :class:`offload_tools.h2d_bench.DeviceOps` on CPU tensors with scripted event times (ms)."""

    device = "cuda"

    def __init__(self, times_ms: Iterable[float]) -> None:
        self.times_ms = list(times_ms)
        self.log: list[str] = []
        self.pinned: list[torch.Tensor] = []
        self.events = 0

    def pin(self, host: torch.Tensor) -> torch.Tensor:
        assert host.dtype == torch.uint8 and host.device.type == "cpu"
        self.log.append(f"pin bytes={host.numel()}")
        self.pinned.append(host.clone())  # pin_memory() returns a new tensor too
        return self.pinned[-1]

    def empty(self, nbytes: int) -> FakeDst:
        self.log.append(f"empty bytes={nbytes}")
        return FakeDst(self, nbytes)

    def event(self) -> FakeEvent:
        self.events += 1
        return FakeEvent(self, "start" if self.events % 2 else "end")

    def synchronize(self) -> None:
        self.log.append("sync device")

    def device_name(self) -> str:
        return "Fake H2D 1"


# per repeat, 5 copies (ms): medians 2, 4, 1 ms -> 5e8, 2.5e8, 1e9 B/s
TIMES_MS = [1.0, 2.0, 2.0, 3.0, 9.0] + [4.0, 4.0, 3.0, 8.0, 5.0] + [1.0, 0.5, 1.0, 7.0, 1.0]


def test_readings_are_medians_of_event_times_and_the_figure_their_median_with_spread() -> None:
    fake = FakeOps(TIMES_MS)
    r = measure(fake, NBYTES, repeats=3, copies=5, warmup=2)
    assert fake.times_ms == []  # every timed copy read exactly one elapsed time
    assert [x["median_copy_s"] for x in r["readings"]] == pytest.approx([2e-3, 4e-3, 1e-3], rel=1e-12)
    assert [x["bandwidth_bytes_s"] for x in r["readings"]] == pytest.approx([5e8, 2.5e8, 1e9], rel=1e-12)
    assert r["bandwidth_bytes_s"] == pytest.approx(5e8, rel=1e-12)
    assert r["bandwidth_min_bytes_s"] == pytest.approx(2.5e8, rel=1e-12)
    assert r["bandwidth_max_bytes_s"] == pytest.approx(1e9, rel=1e-12)
    assert r["spread_pct"] == pytest.approx(150.0, rel=1e-12)  # (1e9 - 2.5e8) / 5e8 x 100
    assert {k: r[k] for k in ("schema_version", "device", "bytes_per_copy", "pinned", "repeats", "copies",
                              "torch_version", "device_name")} == {
        "schema_version": 1, "device": "cuda", "bytes_per_copy": NBYTES, "pinned": True, "repeats": 3, "copies": 5,
        "torch_version": torch.__version__, "device_name": "Fake H2D 1"}
    H2DBench.model_validate(r)


def test_each_repeat_makes_warmup_untimed_then_copies_timed_pinned_copies() -> None:
    warmup, copies, repeats = 3, 4, 2
    fake = FakeOps([1.0] * (copies * repeats))
    measure(fake, NBYTES, repeats=repeats, copies=copies, warmup=warmup)
    copy = f"copy pinned=True non_blocking=True bytes={NBYTES}"
    one_repeat = [copy] * warmup + ["sync device"] + ["record start", copy, "record end", "sync end"] * copies
    assert fake.log == [f"pin bytes={NBYTES}", f"empty bytes={NBYTES}"] + one_repeat * repeats
    assert sum(1 for x in fake.log if x.startswith("copy ")) == repeats * (warmup + copies)


def test_the_printed_line_is_one_json_record_that_validates(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOps(TIMES_MS)
    argv = ["--bytes", str(NBYTES), "--device", "cuda", "--repeats", "3", "--copies", "5", "--warmup", "1"]
    assert main(argv, builders={"cuda": lambda: fake}) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(LINE_PREFIX)
    rec = H2DBench.model_validate(json.loads(out[0].removeprefix(LINE_PREFIX)))
    assert rec.repeats == len(rec.readings) == 3 and rec.copies == 5 and rec.pinned is True
    assert rec.bandwidth_bytes_s == pytest.approx(5e8, rel=1e-12) and rec.spread_pct == pytest.approx(150.0)


def test_defaults_are_5_readings_of_20_copies_after_3_warmup() -> None:
    a = parse_args(["--bytes", "7", "--device", "npu"])
    assert (a.device, a.nbytes, a.repeats, a.copies, a.warmup) == ("npu", 7, 5, 20, 3)
    fake = FakeOps([1.0] * 100)
    r = measure(fake, 7)
    assert r["repeats"] == 5 and r["copies"] == 20 and fake.times_ms == []
    assert sum(1 for x in fake.log if x.startswith("copy ")) == 5 * (3 + 20)


def test_a_copy_timed_at_zero_gives_no_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="timed nothing"):
        measure(FakeOps([0.0] * 3), NBYTES, repeats=1, copies=3, warmup=0)
    assert main(["--bytes", "5", "--device", "cuda", "--repeats", "1", "--copies", "1"],
                builders={"cuda": lambda: FakeOps([0.0])}) == 1
    assert "timed nothing" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs", [{"nbytes": 0}, {"repeats": 0}, {"copies": 0}, {"warmup": -1}, {"nbytes": 1.5}])
def test_measure_refuses_counts_out_of_range(kwargs: dict) -> None:
    args = {"nbytes": NBYTES, "repeats": 1, "copies": 1, "warmup": 0} | kwargs
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        measure(FakeOps([1.0]), **args)


@pytest.mark.parametrize(("argv", "named"), [
    (["--bytes", "0", "--device", "cuda"], ["--bytes", "'0'", ">= 1"]),
    (["--bytes", "-3", "--device", "cuda"], ["--bytes", "'-3'", ">= 1"]),
    (["--bytes", "1e6", "--device", "cuda"], ["--bytes", "'1e6'", "integer"]),
    (["--bytes", "10", "--device", "tpu"], ["--device", "'tpu'", "cuda", "npu"]),
    (["--bytes", "10", "--device", "cuda", "--repeats", "0"], ["--repeats", "'0'", ">= 1"]),
    (["--bytes", "10", "--device", "cuda", "--copies", "0"], ["--copies", "'0'", ">= 1"]),
    (["--bytes", "10", "--device", "cuda", "--warmup", "-1"], ["--warmup", "'-1'", ">= 0"]),
    (["--device", "cuda"], ["--bytes"]),
    (["--bytes", "10", "--device", "cuda", "--pinned", "no"], ["--pinned"]),
])
def test_a_bad_argument_exits_2_with_one_line_naming_it(argv: list[str], named: list[str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadArgument) as exc:
        parse_args(argv)
    assert all(n in str(exc.value) for n in named), str(exc.value)
    assert main(argv, builders={}) == 2  # no builder is looked up: the arguments are checked first
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.splitlines() == [f"error: {exc.value}"]


def test_a_bad_argument_exits_2_before_torch_is_imported() -> None:
    code = ("import runpy, sys\n"
            "sys.argv = ['offload_tools.h2d_bench', '--bytes', '0', '--device', 'cuda']\n"
            "try:\n"
            "    runpy.run_module('offload_tools.h2d_bench', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as exc:\n"
            "    print('EXIT', exc.code, 'torch' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "EXIT 2 False", (p.stdout, p.stderr)
    assert p.stderr.splitlines() == ["error: argument --bytes: '0' is not allowed: must be an integer >= 1"]


def test_a_record_whose_readings_disagree_is_refused() -> None:
    r = measure(FakeOps(TIMES_MS), NBYTES, repeats=3, copies=5, warmup=0)
    H2DBench.model_validate(dict(r, bandwidth_bytes_s=r["bandwidth_bytes_s"] * (1 + 5e-7)))  # within 1e-6
    with pytest.raises(ValidationError, match="not the median of the readings"):
        H2DBench.model_validate(dict(r, bandwidth_bytes_s=r["bandwidth_bytes_s"] * (1 + 2e-6)))
    with pytest.raises(ValidationError, match="repeats 4 disagrees with the 3 readings"):
        H2DBench.model_validate(dict(r, repeats=4))
    with pytest.raises(ValidationError, match="pinned"):
        H2DBench.model_validate(dict(r, pinned=False))
    with pytest.raises(ValidationError, match="extra"):
        H2DBench.model_validate(dict(r, warmup=3))


@pytest.mark.heavy  # imports torch in a child process
def test_cuda_on_a_machine_without_it_exits_3_naming_the_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = subprocess.run([sys.executable, "-m", "offload_tools.h2d_bench", "--bytes", "1024", "--device", "cuda"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert LINE_PREFIX.strip() not in p.stdout
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: device cuda is not available: torch.cuda.is_available() is False "
                      f"(torch {torch.__version__})"], p.stderr
