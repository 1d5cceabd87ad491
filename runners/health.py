"""Health gate command and verdict of a runtime (the published Ascend gate, issue 15).

What is modelled: a runtime's ``health_command`` may name the case device with the
placeholders ``{physical_index}`` (``npu-smi`` NPU ID / ``nvidia-smi`` index) and ``{chip}``
(``npu-smi`` Chip ID); the published gate is
``npu-smi info -t health -i {physical_index} -c {chip}``. The gate passes when the command
exits 0 and, if the runtime sets ``health_expect`` (a regular expression; published:
``Health Status\\s*:\\s*OK``), its output matches it.

The NPU mapping comes from ``npu-smi info -m`` (rows ``NPU ID  Chip ID  Chip Logic ID  Chip
Name``), the logical id from ``ASCEND_RT_VISIBLE_DEVICES`` (first entry, default 0), as in
``runners.devices``; ``NPU_INDEX`` / ``NPU_CHIP`` override.

What is deliberately not modelled: when the gate runs (``runners.matrix``: before every
phase and after the last one).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

PLACEHOLDERS = ("physical_index", "chip")


def parse_npu_chips(text: str) -> dict[int, tuple[int, int]]:
    """``npu-smi info -m`` -> ``{chip logic id: (NPU ID, Chip ID)}`` (rows with logic id ``-`` skipped)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\d+)\s+(\d+|-)\s+(.+?)\s*$", line)
        if m and m.group(3) != "-":
            out[int(m.group(3))] = (int(m.group(1)), int(m.group(2)))
    return out


def needs_device(command: Sequence[str]) -> bool:
    """True when the command names the device through a placeholder."""
    return any("{" + p + "}" in str(a) for a in command for p in PLACEHOLDERS)


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


def health_argv(command: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The command with ``{physical_index}`` / ``{chip}`` filled in (other text unchanged)."""
    out = []
    for a in command:
        a = str(a)
        for p in PLACEHOLDERS:
            if p in values:
                a = a.replace("{" + p + "}", str(values[p]))
        out.append(a)
    return out


def health_verdict(rc: int, output: str, expect: str | None) -> str | None:
    """None when healthy; else why not (exit status, or the expected pattern missing from the output)."""
    if rc != 0:
        return f"exited {rc}"
    if expect and not re.search(expect, output):
        return f"exited 0 but the output does not match {expect!r}"
    return None
