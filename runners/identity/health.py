"""Health gate command and verdict of a runtime (the published Ascend gate).

What is modelled: a runtime's ``health_command`` may name the case device with the
placeholders ``{physical_index}`` (``npu-smi`` NPU ID / ``nvidia-smi`` index) and ``{chip}``
(``npu-smi`` Chip ID); the published gate is
``npu-smi info -t health -i {physical_index} -c {chip}``. The gate passes when the command
exits 0 and, if the runtime sets ``health_expect`` (a regular expression; published:
``Health Status\\s*:\\s*OK``), its output matches it.

The NPU mapping comes from ``npu-smi info -m`` (rows ``NPU ID  Chip ID  Chip Logic ID  Chip
Name``), the logical id from ``ASCEND_RT_VISIBLE_DEVICES`` (first entry, default 0), as in
``runners.identity.devices``; ``NPU_INDEX`` / ``NPU_CHIP`` override.

What is deliberately not modelled: when the gate runs (``runners.matrix``: before every
phase and after the last one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

PLACEHOLDERS = ("physical_index", "chip")


def needs_device(command: Sequence[str]) -> bool:
    """True when the command names the device through a placeholder."""
    return any("{" + p + "}" in str(a) for a in command for p in PLACEHOLDERS)


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
