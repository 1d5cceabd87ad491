"""Host memory per offloaded and per released byte, per label: what a setting cost in host memory.

What is modelled (input: the validated ``CaseRun`` records of a run): per (phase, label), the median
host memory of its processes minus the phase baseline's median (``host_delta_bytes``), against the
bytes the offloader says it holds in host storage (``offloaded_bytes``, runtime evidence; on an
accelerator those are the pinned host copies) and the device bytes it released (``released_bytes``
= offloaded - static device buffers, evidence):

* ``host_per_offloaded`` = host_delta_bytes / offloaded_bytes, ``host_per_released`` =
  host_delta_bytes / released_bytes (NULL for the baseline or when the denominator is 0);
* ``flagged`` when host_per_offloaded > ``FLAG_HOST_PER_OFFLOADED`` (1.2): the setting costs clearly more
  than one host byte per byte it offloads (public reports show an offload backend pinning 1.15-1.87 times
  the bytes asked for);
* ``host_source`` names the measured figure: ``rss_after_load_bytes`` (RSS of the case process and its
  descendants right after ``LLM(...)`` returned) when every process of the label and of the baseline
  recorded it, else ``peak_rss_bytes`` (whole-process peak; records written before the load-window
  samples), and ``offloaded_source`` the accounted one (runtime evidence).

On CPU host and device are one memory: the offloaded weights stay in the same RAM, so the figure is the
offloader's extra host copies and buffers per offloaded byte (about 0 when it adds none), not memory moved
off a device (``CPU_HOST_NOTE``).

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
"""Host bytes per offloaded byte above which a point is flagged."""

CPU_HOST_NOTE = ("CPU runtime: host and device are one memory. The offloaded weights stay in the same RAM, so "
                 "host bytes per offloaded byte measure the offloader's extra host copies and buffers (about 0 "
                 "when it adds none), not memory moved off a device; released bytes are accounted, not freed.")

COLUMNS = ["phase", "label", "implementation", "processes", "host_source", "host_bytes_median",
           "baseline_host_bytes_median", "host_delta_bytes", "offloaded_bytes", "released_bytes", "offloaded_source",
           "host_per_offloaded", "host_per_released", "flagged"]

RSS_AFTER = "rss_after_load_bytes (measured: RSS of the case process + descendants right after LLM(...))"
RSS_PEAK = "peak_rss_bytes (measured: whole-process peak RSS; load-window RSS not recorded)"
EVIDENCE = "runtime evidence offloaded_bytes / released_bytes (accounted)"


def _ratio(num: float | None, den: float) -> float | None:
    return None if num is None or den <= 0 else num / den


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
        rows.append({"phase": phase, "label": label, "implementation": crs[0].record.implementation,
                     "processes": len(crs), "host_source": RSS_AFTER if use_after else RSS_PEAK,
                     "host_bytes_median": host, "baseline_host_bytes_median": bhost, "host_delta_bytes": delta,
                     "offloaded_bytes": off, "released_bytes": rel, "offloaded_source": EVIDENCE,
                     "host_per_offloaded": per_off, "host_per_released": _ratio(delta, rel),
                     "flagged": per_off is not None and per_off > FLAG_HOST_PER_OFFLOADED})
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
           "| host B / offloaded B | host B / released B | flag |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['phase']} | {r['label']} | {r['processes']} | {_num(r['host_bytes_median'])} | "
                   f"{_num(r['baseline_host_bytes_median'])} | {_num(r['host_delta_bytes'])} | "
                   f"{_num(r['offloaded_bytes'])} | {_num(r['released_bytes'])} | {_num(r['host_per_offloaded'])} | "
                   f"{_num(r['host_per_released'])} | {'> 1.2 host B per offloaded B' if r['flagged'] else ''} |")
    sources = sorted({r["host_source"] for r in rows})
    out += ["", f"Sources: host bytes = {'; '.join(sources)}; offloaded / released bytes = {EVIDENCE}. Host delta = "
                "label median - phase baseline median. Flag: more than "
                f"{FLAG_HOST_PER_OFFLOADED} host bytes per offloaded byte."]
    if cpu:
        out += ["", CPU_HOST_NOTE]
    return out + [""]
