"""The physical device behind a case's logical device: NPU index and chip, or CUDA index.

What is modelled: the values of the placeholders ``{physical_index}`` and ``{chip}`` of a health
command and of the device-memory probe. The NPU mapping comes from ``npu-smi info -m`` (rows
``NPU ID  Chip ID  Chip Logic ID  Chip Name``), the logical id from ``ASCEND_RT_VISIBLE_DEVICES``
(first entry, default 0); ``NPU_INDEX`` / ``NPU_CHIP`` override. CUDA: the first entry of
``CUDA_VISIBLE_DEVICES`` (default 0).

What is deliberately not modelled: the health gate itself (``runners.identity.health``).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping


def parse_npu_chips(text: str) -> dict[int, tuple[int, int]]:
    """``npu-smi info -m`` -> ``{chip logic id: (NPU ID, Chip ID)}`` (rows with logic id ``-`` skipped)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+(\d+|-)\s+(.+?)\s*$", line)
        if m and m.group(3) != "-":
            out[int(m.group(3))] = (int(m.group(1)), int(m.group(2)))
    return out


def device_placeholders(device: str, env: Mapping[str, str] | None = None,
                        npu_smi_output: str | None = None) -> dict[str, str]:
    """Values of ``{physical_index}`` and ``{chip}`` for the case device.

    Raises:
        ValueError: the logical NPU is not in ``npu-smi info -m`` or ``npu-smi`` failed (message names it).
    """
    env = os.environ if env is None else env
    if device == "npu":
        if "NPU_INDEX" in env:
            return {"physical_index": str(int(env["NPU_INDEX"])), "chip": str(int(env.get("NPU_CHIP", "0")))}
        raw = env.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
        logical = int(raw.split(",")[0]) if raw else 0
        if npu_smi_output is None:
            try:
                r = subprocess.run(["npu-smi", "info", "-m"], capture_output=True, text=True, timeout=60, check=False)
            except FileNotFoundError:
                raise ValueError("npu-smi is not on PATH: cannot name the NPU of the health gate") from None
            if r.returncode != 0:
                raise ValueError(f"npu-smi info -m exited {r.returncode}: {r.stderr.strip()[-300:]}")
            npu_smi_output = r.stdout
        table = parse_npu_chips(npu_smi_output)
        if logical not in table:
            raise ValueError(f"logical NPU {logical} not in npu-smi info -m (logic ids {sorted(table)})")
        npu, chip = table[logical]
        return {"physical_index": str(npu), "chip": str(chip)}
    raw = env.get("CUDA_VISIBLE_DEVICES", "").strip().split(",")[0].strip()
    return {"physical_index": raw if raw.isdigit() else "0", "chip": "0"}
