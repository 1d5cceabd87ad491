"""Device identity and the logical -> physical device mapping, per runtime.

What is modelled:
* Ascend: the physical NPU index of the visible logical device comes from
  ``npu-smi info -m`` (rows ``NPU ID  Chip ID  Chip Logic ID  Chip Name``), matching
  the logical id taken from ``ASCEND_RT_VISIBLE_DEVICES`` (first entry; default 0);
  an explicit ``NPU_INDEX`` overrides.
* CUDA: the physical index is the first entry of ``CUDA_VISIBLE_DEVICES`` when it is
  numeric, else the row of ``nvidia-smi --query-gpu=index,uuid,name`` whose UUID
  matches; default 0.
* CPU: the CPU model name and logical core count.

What is deliberately not modelled: multi-device cases (one case = one device).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Mapping

from results_schema.records.base import Device
from results_schema.records.manifest import DeviceIdentity


class DeviceError(RuntimeError):
    """The device mapping could not be determined."""


def parse_npu_smi_mapping(text: str) -> dict[int, tuple[int, str]]:
    """Parse ``npu-smi info -m`` into ``{chip logic id: (NPU ID, chip name)}``.

    Rows whose logic id is ``-`` (MCU entries) are skipped.
    """
    out: dict[int, tuple[int, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+(\d+|-)\s+(.+?)\s*$", line)
        if m and m.group(3) != "-":
            out[int(m.group(3))] = (int(m.group(1)), m.group(4))
    return out


def _first_visible(env: Mapping[str, str], var: str) -> str | None:
    raw = env.get(var, "").strip()
    return raw.split(",")[0].strip() if raw else None


def npu_identity(env: Mapping[str, str] | None = None, npu_smi_output: str | None = None) -> DeviceIdentity:
    """Identity of the NPU the cases use (see module docstring).

    Raises:
        DeviceError: ``npu-smi`` missing/failing or the logical id absent from its table.
    """
    env = os.environ if env is None else env
    logical = int(_first_visible(env, "ASCEND_RT_VISIBLE_DEVICES") or 0)
    if npu_smi_output is None:
        if shutil.which("npu-smi") is None:
            raise DeviceError("npu-smi is not on PATH: cannot map the logical NPU to a physical one")
        r = subprocess.run(["npu-smi", "info", "-m"], capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise DeviceError(f"npu-smi info -m failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        npu_smi_output = r.stdout
    table = parse_npu_smi_mapping(npu_smi_output)
    if "NPU_INDEX" in env:
        name = table.get(logical, (0, "Ascend NPU"))[1]
        return DeviceIdentity(kind=Device.npu, name=name, logical_index=logical, physical_index=int(env["NPU_INDEX"]),
                              source="NPU_INDEX", count=len(table))
    if logical not in table:
        raise DeviceError(f"logical NPU {logical} not in npu-smi info -m (logic ids {sorted(table)})")
    physical, name = table[logical]
    return DeviceIdentity(kind=Device.npu, name=name, logical_index=logical, physical_index=physical,
                          source="npu-smi info -m", count=len(table))


def cuda_identity(env: Mapping[str, str] | None = None, nvidia_smi_output: str | None = None) -> DeviceIdentity:
    """Identity of the GPU the cases use (see module docstring).

    Raises:
        DeviceError: ``nvidia-smi`` missing/failing, or the visible device unknown to it.
    """
    env = os.environ if env is None else env
    first = _first_visible(env, "CUDA_VISIBLE_DEVICES")
    if nvidia_smi_output is None:
        if shutil.which("nvidia-smi") is None:
            raise DeviceError("nvidia-smi is not on PATH: cannot identify the GPU")
        r = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60, check=False)
        if r.returncode != 0:
            raise DeviceError(f"nvidia-smi failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        nvidia_smi_output = r.stdout
    rows = [[p.strip() for p in line.split(",")] for line in nvidia_smi_output.splitlines() if line.strip()]
    if first is None or first.isdigit():
        physical = int(first or 0)
        match = [r for r in rows if r and r[0] == str(physical)]
        source = "CUDA_VISIBLE_DEVICES" if first is not None else "default device 0"
    else:
        match = [r for r in rows if len(r) > 1 and r[1] == first]
        physical = int(match[0][0]) if match else -1
        source = "CUDA_VISIBLE_DEVICES uuid + nvidia-smi"
    if not match:
        raise DeviceError(f"visible GPU {first or 0} not listed by nvidia-smi")
    return DeviceIdentity(kind=Device.cuda, name=match[0][2] if len(match[0]) > 2 else "GPU", logical_index=0,
                          physical_index=physical, source=source, count=len(rows))


def cpu_identity() -> DeviceIdentity:
    """CPU model name (``/proc/cpuinfo``) and logical core count."""
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return DeviceIdentity(kind=Device.cpu, name=name, logical_index=None, physical_index=None, source="/proc/cpuinfo",
                          count=os.cpu_count() or 0)


def device_identity(device: str, env: Mapping[str, str] | None = None) -> DeviceIdentity:
    """Identity for a runtime's device kind (``cpu``, ``cuda``, ``npu``). Raises ``DeviceError``."""
    if device == "cpu":
        return cpu_identity()
    if device == "cuda":
        return cuda_identity(env)
    if device == "npu":
        return npu_identity(env)
    raise DeviceError(f"unknown device kind {device!r} (cpu, cuda, npu)")
