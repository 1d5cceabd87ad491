"""Device memory of the case's physical device, as the published runner sampled it: ``npu-smi info`` HBM.

What is modelled:

* ``parse_npu_smi_hbm``: the ``npu-smi info`` table -> ``{(NPU ID, Chip ID): (used MB, total MB)}``
  from its ``HBM-Usage(MB)`` column (``used / total``; npu-smi's MB are MiB: 65536 MB = 64 GiB HBM).
  The table has, per NPU, one NPU row (``| <NPU ID> <Name> | <Health> | ...``) followed by one
  row per chip (``| <Chip ID> [<Phy-ID>|<Device>] | <Bus-Id> | AICore(%) Memory-Usage(MB)
  HBM-Usage(MB) |``); HBM-Usage is the last ``used / total`` pair of a chip row, and ``used``
  may touch the slash (``59356/ 65536``). Written against real outputs: Atlas A2 (910B, one
  chip per NPU, header ``Chip``) and Atlas A3 (``Ascend910``, two chips per NPU, the NPU row
  repeated per chip, header ``Chip  Phy-ID``) posted in vllm-project/vllm-ascend issues #2035
  and #2534 (https://gh.072103.xyz/vllm-project/vllm-ascend/issues/2534); the process table
  below the device table (``| NPU  Chip | Process id | ...``) is skipped (its second cell is a
  PID, not a bus id). A table without an ``HBM-Usage(MB)`` column (e.g. DDR cards) is an error.
* ``npu_hbm_probe``: runs ``npu-smi info`` and returns the used HBM of one (NPU, chip), bytes;
* ``nvidia_memory_probe``: ``nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i <index>``
  (MiB), bytes;
* ``device_probe``: the probe, source and device name for a case's device kind; the physical
  NPU / chip come from ``runners.incase.device_index.device_placeholders`` (``ASCEND_RT_VISIBLE_DEVICES`` +
  ``npu-smi info -m``, or ``NPU_INDEX`` / ``NPU_CHIP``), the same device the health gate checks.
* every probe keeps the device's total memory from the same reading (``DeviceProbe.total_bytes``: HBM total of the
  NPU chip, ``memory.total`` of the GPU; ``BenchRecord.device_memory_total_bytes``: free memory beside the used);
* ``process_tree_cuda_bytes``: the CUDA memory of this process tree after load
  (``BenchRecord.device_memory_bytes``, ``nvidia-smi --query-compute-apps``).

Every failure raises ``DeviceMemoryError`` naming the command and what was wrong; the bench
records it as ``device_memory_error`` (null values, never 0).

What is deliberately not modelled: per-process HBM on NPU (``npu-smi info`` process rows);
sampling (``runners.incase.memory_sampler``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping

MIB = 2**20
"""Bytes per npu-smi MB / nvidia-smi MiB."""

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")


class DeviceMemoryError(RuntimeError):
    """Device memory could not be read (tool missing or failing, table unparsable, device not listed)."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_npu_smi_hbm(text: str) -> dict[tuple[int, int], tuple[int, int]]:
    """``npu-smi info`` -> ``{(NPU ID, Chip ID): (HBM used MB, HBM total MB)}`` (see the module docstring).

    Raises:
        DeviceMemoryError: no ``HBM-Usage(MB)`` column, or no chip row with an HBM value.
    """
    if "HBM-Usage(MB)" not in text:
        raise DeviceMemoryError("npu-smi info has no HBM-Usage(MB) column")
    out: dict[tuple[int, int], tuple[int, int]] = {}
    npu: int | None = None
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) < 3:
            continue
        first = cells[0].split()
        if not first or not first[0].isdigit():
            continue
        if _BUS_ID.match(cells[1]):
            pairs = _PAIR.findall(cells[2])
            if npu is not None and pairs:
                used, total = pairs[-1]
                out[(npu, int(first[0]))] = (int(used), int(total))
        elif len(first) >= 2 and not cells[1].isdigit():
            npu = int(first[0])  # an NPU row: "<NPU ID> <Name>" | "<Health>"
    if not out:
        raise DeviceMemoryError("npu-smi info lists no chip row with an HBM-Usage(MB) value")
    return out


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise DeviceMemoryError(f"{argv[0]} is not on PATH")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        raise DeviceMemoryError(f"{' '.join(argv)} timed out after 30 s") from None
    if r.returncode != 0:
        raise DeviceMemoryError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return r.stdout


class DeviceProbe:
    """``() -> used bytes`` of one device, keeping the total bytes of the same reading in ``total_bytes``."""

    def __init__(self, read: Callable[[], tuple[int, int]]) -> None:
        self._read = read
        self.total_bytes: int | None = None

    def __call__(self) -> int:
        used, self.total_bytes = self._read()
        return used


def npu_hbm_probe(physical_index: int, chip: int) -> DeviceProbe:
    """``() -> used HBM bytes`` of NPU ``physical_index`` chip ``chip``, one ``npu-smi info`` run per call.

    The probe raises ``DeviceMemoryError`` when npu-smi is missing or fails, the table cannot be
    parsed, or the (NPU, chip) is not in it (the message lists the pairs it has).
    """
    def read() -> tuple[int, int]:
        table = parse_npu_smi_hbm(_run(["npu-smi", "info"]))
        if (physical_index, chip) not in table:
            raise DeviceMemoryError(f"NPU {physical_index} chip {chip} not in npu-smi info (NPU, chip): "
                                    f"{sorted(table)}")
        used, total = table[(physical_index, chip)]
        return used * MIB, total * MIB
    return DeviceProbe(read)


def nvidia_memory_probe(index: int) -> DeviceProbe:
    """``() -> used memory bytes`` of GPU ``index`` (``nvidia-smi ... memory.used,memory.total``, MiB)."""
    def read() -> tuple[int, int]:
        out = _run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                    "-i", str(index)])
        values = [v.strip() for v in (out.strip().splitlines() or [""])[0].split(",")]
        if len(values) != 2 or not all(v.isdigit() for v in values):
            raise DeviceMemoryError(f"nvidia-smi memory.used,memory.total of GPU {index} are not two numbers: "
                                    f"{values!r}")
        return int(values[0]) * MIB, int(values[1]) * MIB
    return DeviceProbe(read)


def device_probe(device: str, env: Mapping[str, str] | None = None) -> tuple[DeviceProbe, str, str] | None:
    """``(probe, source, device name)`` for a case device kind; None on CPU (no device memory).

    Raises:
        DeviceMemoryError: the physical NPU / chip cannot be named (npu-smi info -m failed or lacks the device).
    """
    from runners.incase.device_index import device_placeholders

    if device == "cpu":
        return None
    env = os.environ if env is None else env
    try:
        where = device_placeholders(device, env)
    except ValueError as exc:
        raise DeviceMemoryError(str(exc)) from None
    index, chip = int(where["physical_index"]), int(where["chip"])
    if device == "npu":
        return npu_hbm_probe(index, chip), "npu-smi", f"npu {index} chip {chip}"
    return nvidia_memory_probe(index), "nvidia-smi", f"cuda {index}"


def process_tree_cuda_bytes(device: str) -> int | None:
    """CUDA memory used by this process tree (bytes); None on other devices or when nvidia-smi is unavailable.

    Sum of the ``nvidia-smi --query-compute-apps=pid,used_memory`` entries (MiB) of this process and its descendants.
    """
    if device != "cuda" or shutil.which("nvidia-smi") is None:
        return None
    import psutil

    me = psutil.Process()
    pids = {me.pid, *(c.pid for c in me.children(recursive=True))}
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0:
        return None
    total = 0
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids:
            total += int(parts[1]) * MIB
    return total
