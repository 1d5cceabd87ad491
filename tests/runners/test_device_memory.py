"""runners.incase.device_memory: the npu-smi info HBM parser, and the bench's load window through a fake npu-smi on PATH.

The tables follow the layout of real ``npu-smi info`` outputs (Atlas A2 910B: one chip per NPU;
Atlas A3 ``Ascend910``: two chips per NPU, the NPU row repeated per chip; e.g. the outputs posted in
vllm-project/vllm-ascend issues #2035 and #2534), with values of our own. ``npu-smi`` is the device
boundary: the fake executable stands in for it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from results_schema.records.models import BenchRecord
from runners.incase.device_memory import MIB, DeviceMemoryError, device_probe, npu_hbm_probe, parse_npu_smi_hbm

A2_TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 95.2        41                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3305 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 97.0        40                0    / 0             |
| 0                         | 0000:C2:00.0  | 3           0    / 0          41234/ 65536         |
+===========================+===============+====================================================+
| 2     910B3               | OK            | 93.1        39                0    / 0             |
| 0                         | 0000:81:00.0  | 0           0    / 0          3299 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 1       0                 | 424242        | python3                  | 37888                   |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""

A3_TEMPLATE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 25.2.1                   Version: 25.2.1                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 170.2       37                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3120 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           37                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          2880 / 65536         |
+===========================+===============+====================================================+
| 1     Ascend910           | OK            | 171.0       36                0    / 0             |
| 0     2                   | 0000:99:00.0  | 0           0    / 0          3130 / 65536         |
+------------------------------------------------------------------------------------------------+
| 1     Ascend910           | OK            | -           36                0    / 0             |
| 1     3                   | 0000:9B:00.0  | 0           0    / 0          {used} / 65536         |
+===========================+===============+====================================================+
"""

A3_MAPPING = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        0                              0                              0                              Ascend 910
        0                              1                              1                              Ascend 910
        0                              2                              -                              Mcu
        1                              0                              2                              Ascend 910
        1                              1                              3                              Ascend 910
        1                              2                              -                              Mcu
"""


def test_parses_a_multi_npu_a2_table_and_skips_the_process_table() -> None:
    assert parse_npu_smi_hbm(A2_TABLE) == {(0, 0): (3305, 65536), (1, 0): (41234, 65536), (2, 0): (3299, 65536)}


def test_parses_two_chips_per_npu() -> None:
    assert parse_npu_smi_hbm(A3_TEMPLATE.format(used=3100)) == {
        (0, 0): (3120, 65536), (0, 1): (2880, 65536), (1, 0): (3130, 65536), (1, 1): (3100, 65536)}


@pytest.mark.parametrize("text, message", [
    (A2_TABLE.replace("HBM-Usage(MB)", "DDR-Usage(MB)"), "no HBM-Usage(MB) column"),
    ("| NPU Name | Health |\n| Chip | Bus-Id | HBM-Usage(MB) |\n", "no chip row with an HBM-Usage(MB) value"),
])
def test_unparsable_tables_are_errors(text, message) -> None:
    with pytest.raises(DeviceMemoryError, match=re.escape(message)):
        parse_npu_smi_hbm(text)


def _fake_npu_smi(tmp_path: Path, hbm_sequence: list[int], *, info_exit: int = 0) -> Path:
    """A fake ``npu-smi`` on a bin dir: ``info -m`` the A3 mapping; ``info`` the A3 table whose NPU 1
    chip 1 HBM steps through ``hbm_sequence`` (one value per call, the last one repeated)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "table.txt").write_text(A3_TEMPLATE)
    (tmp_path / "mapping.txt").write_text(A3_MAPPING)
    (tmp_path / "seq.json").write_text(json.dumps(hbm_sequence))
    script = bin_dir / "npu-smi"
    script.write_text(f"""#!{sys.executable}
import json, sys
from pathlib import Path
root = Path({str(tmp_path)!r})
args = sys.argv[1:]
if args == ["info", "-m"]:
    print(root.joinpath("mapping.txt").read_text(), end="")
    sys.exit(0)
if args == ["info"]:
    if {info_exit}:
        print("dcmi model initialized failed", file=sys.stderr)
        sys.exit({info_exit})
    seq = json.loads(root.joinpath("seq.json").read_text())
    n = int(root.joinpath("calls").read_text()) if root.joinpath("calls").exists() else 0
    root.joinpath("calls").write_text(str(n + 1))
    print(root.joinpath("table.txt").read_text().format(used=seq[min(n, len(seq) - 1)]), end="")
    sys.exit(0)
sys.exit(2)
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def test_probe_reads_the_case_npu_and_chip_through_npu_smi(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{_fake_npu_smi(tmp_path, [4096])}:{os.environ['PATH']}")
    assert npu_hbm_probe(1, 1)() == 4096 * MIB
    assert npu_hbm_probe(0, 1)() == 2880 * MIB
    with pytest.raises(DeviceMemoryError, match=r"NPU 5 chip 0 not in npu-smi info \(NPU, chip\): \[\(0, 0\)"):
        npu_hbm_probe(5, 0)()
    # logical NPU 3 = NPU 1 chip 1 (npu-smi info -m), as the health gate names it
    probe, source, name = device_probe("npu", {"ASCEND_RT_VISIBLE_DEVICES": "3,2"})  # type: ignore[misc]
    assert (source, name, probe()) == ("npu-smi", "npu 1 chip 1", 4096 * MIB)
    _probe, _source, name = device_probe("npu", {"NPU_INDEX": "0", "NPU_CHIP": "1"})  # type: ignore[misc]
    assert name == "npu 0 chip 1"
    assert device_probe("cpu") is None
    with pytest.raises(DeviceMemoryError, match="logical NPU 7 not in npu-smi info -m"):
        device_probe("npu", {"ASCEND_RT_VISIBLE_DEVICES": "7"})


def test_failing_or_missing_npu_smi_is_an_error_naming_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{_fake_npu_smi(tmp_path, [1], info_exit=3)}:{os.environ['PATH']}")
    with pytest.raises(DeviceMemoryError, match="npu-smi info exited 3: dcmi model initialized failed"):
        npu_hbm_probe(0, 0)()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(DeviceMemoryError, match="npu-smi is not on PATH"):
        npu_hbm_probe(0, 0)()


def _record_with(fields: dict) -> BenchRecord:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "real_tiny_run" / "records" / "same_runtime"
    d = json.loads((path / "baseline-r0.json").read_text())
    d.update(fields)
    d["peak_rss_bytes"] = max(d["peak_rss_bytes"], fields.get("rss_peak_load_bytes", 0))
    return BenchRecord.model_validate(d)


def test_load_window_samples_hbm_before_peak_after_from_npu_smi(tmp_path, monkeypatch, capsys) -> None:
    from runners.incase.bench_one import LoadWindow

    monkeypatch.setattr("runners.incase.bench_one.DEVICE_INTERVAL_S", 0.05)
    monkeypatch.setenv("PATH", f"{_fake_npu_smi(tmp_path, [3000, 20000, 61000, 59000])}:{os.environ['PATH']}")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3")
    monkeypatch.delenv("NPU_INDEX", raising=False)
    with LoadWindow("npu") as load:
        deadline = time.monotonic() + 30
        while int((tmp_path / "calls").read_text().strip() or 0) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the sampler has read the last table value
    fields = load.fields()
    assert fields["device_memory_source"] == "npu-smi" and fields["device_memory_device"] == "npu 1 chip 1"
    assert (fields["device_memory_before_load_bytes"], fields["device_memory_peak_load_bytes"],
            fields["device_memory_after_load_bytes"]) == (3000 * MIB, 61000 * MIB, 59000 * MIB)
    assert fields["device_memory_total_bytes"] == 65536 * MIB  # the same tables' HBM total: free = total - used
    assert fields["rss_before_load_bytes"] > 0 and fields["rss_peak_load_bytes"] >= fields["rss_after_load_bytes"]
    assert "DEVICE_MEMORY" not in capsys.readouterr().err
    assert _record_with(fields).device_memory_peak_load_bytes == 61000 * MIB


def test_load_window_without_npu_smi_records_the_reason_not_zero(tmp_path, monkeypatch, capsys) -> None:
    from runners.incase.bench_one import LoadWindow

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NPU_INDEX", raising=False)
    with LoadWindow("npu") as load:
        pass
    fields = load.fields()
    assert "npu-smi is not on PATH" in fields["device_memory_error"]
    assert not any(k.startswith("device_memory_") and k.endswith("_bytes") for k in fields)
    assert "DEVICE_MEMORY unavailable: npu-smi is not on PATH" in capsys.readouterr().err
    rec = _record_with(fields)
    assert rec.device_memory_peak_load_bytes is None and rec.device_memory_error


def test_load_window_on_cpu_has_rss_only() -> None:
    from runners.incase.bench_one import LoadWindow

    with LoadWindow("cpu") as load:
        pass
    fields = load.fields()
    assert set(fields) == {"rss_before_load_bytes", "rss_peak_load_bytes", "rss_after_load_bytes"}


def test_request_metrics_match_numpy() -> None:
    from runners.incase.bench_one import request_metrics
    from results_schema.records.models import RoundResult

    rounds = [RoundResult(index=i, elapsed_s=s, prompt_tokens=16, output_tokens=8, throughput_tok_s=8 / s,
                          token_digest="0" * 64) for i, s in enumerate([0.5, 0.7, 0.6, 1.9])]
    m = request_metrics(rounds, num_prompts=4)
    assert m["requests"] == 16 and m["requests_per_s"] == pytest.approx(16 / 3.7)
    assert m["round_latency_p50_s"] == pytest.approx(float(np.percentile([0.5, 0.7, 0.6, 1.9], 50)))
    assert m["round_latency_p95_s"] == pytest.approx(float(np.percentile([0.5, 0.7, 0.6, 1.9], 95)))
