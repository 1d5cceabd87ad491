"""Placement checks and table: did two cases of one comparison share a node at the same time?

What is modelled: every attempt line of ``<phase>-placements.jsonl``
(``results_schema.records.placement.CasePlacement``). A comparison pairs the cases of one phase,
so two attempts of one phase overlap when they ran on the same node (Ray node id) and
their ``[start_unix_s, end_unix_s)`` intervals intersect (both times from that node's
clock, or the driver's for a lost node). For performance attempts that is an error
(``placement_overlap``) under the ``per_node`` and ``sequential`` rules, and a warning
(``shared_node``) under the opt-in ``per_accelerator`` rule unless the two were granted
the same accelerator id (then an error; CPU cases hold distinct CPU slots). A phase whose attempts ran under different sharing rules
is an error (``mixed_sharing``): its cases must not be compared. Accuracy attempts may
overlap freely.

What is deliberately not modelled: contention between different phases (phases run
one after another), clock skew between nodes (only same-node pairs are compared).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Sequence

from results_schema.records.placement import CasePlacement, NodeIdentity

SHARING_NOTE = ("**Parallel placement (executor.ray.performance_sharing=per_accelerator)**: performance cases "
                "ran at the same time on one node, one per accelerator; they shared the node's host-to-device "
                "links and host memory bandwidth, so an offload case's cost depends on its neighbours. Compare "
                "only cases placed under the same rule.")


@dataclass(frozen=True)
class PlacementFinding:
    """One overlap or sharing finding: ``code`` placement_overlap | shared_node | mixed_sharing."""

    code: str
    severity: Literal["error", "warning"]
    message: str
    phase: str
    label: str | None = None
    repeat: int | None = None


def load_placements(run_dir: Path | str) -> tuple[list[CasePlacement], list[str]]:
    """Every placement line of a run directory, and one message per unreadable line.

    Returns:
        ``(placements, errors)``; a run without placement files gives ``([], [])``.
    """
    from results_schema.codec.io import read_jsonl

    out: list[CasePlacement] = []
    errors: list[str] = []
    for path in sorted(Path(run_dir).glob("*-placements.jsonl")):
        try:
            out += read_jsonl(path, CasePlacement)
        except (ValueError, OSError) as exc:
            errors.append(f"{path.name}: {exc}")
    return out, errors


def load_nodes(run_dir: Path | str) -> list[NodeIdentity]:
    """The per-node identity lines of ``cluster-manifest.jsonl`` (empty for a local run).

    Raises:
        results_schema.codec.io errors (ValueError) on an unreadable line.
    """
    from results_schema.codec.io import read_jsonl

    path = Path(run_dir) / "cluster-manifest.jsonl"
    return read_jsonl(path, NodeIdentity) if path.is_file() else []


def _name(p: CasePlacement) -> str:
    return f"{p.label} r{p.repeat}" + (f" attempt {p.attempt}" if p.attempt else "")


def check_placements(placements: Sequence[CasePlacement]) -> list[PlacementFinding]:
    """Overlap and sharing findings over the placement lines (see module docstring)."""
    out: list[PlacementFinding] = []
    by_phase: dict[str, list[CasePlacement]] = defaultdict(list)
    for p in placements:
        by_phase[p.phase].append(p)
    for phase, ps in by_phase.items():
        perf = [p for p in ps if p.kind == "performance"]
        modes = sorted({p.sharing for p in perf})
        if len(modes) > 1:
            out.append(PlacementFinding("mixed_sharing", "error", f"phase {phase}: performance cases ran under "
                                        f"different sharing rules {modes}; they must not be compared", phase))
        perf.sort(key=lambda p: (p.node_id, p.start_unix_s))
        for i, a in enumerate(perf):
            for b in perf[i + 1:]:
                if b.node_id != a.node_id or b.start_unix_s >= a.end_unix_s:
                    if b.node_id != a.node_id:
                        break
                    continue
                both = f"{_name(a)} [{a.device}] and {_name(b)} [{b.device}]"
                secs = min(a.end_unix_s, b.end_unix_s) - b.start_unix_s
                where = f"node {a.hostname} ({a.node_id[:12]})"
                same_accel = bool(set(a.accelerator_ids) & set(b.accelerator_ids))
                if a.sharing == b.sharing == "per_accelerator" and not same_accel:
                    out.append(PlacementFinding("shared_node", "warning", f"phase {phase}: {both} overlapped "
                                                f"{secs:.1f} s on {where} under performance_sharing=per_accelerator "
                                                "(shared host links)", phase, b.label, b.repeat))
                else:
                    out.append(PlacementFinding("placement_overlap", "error", f"phase {phase}: {both} overlapped "
                                                f"{secs:.1f} s on {where} (rule {a.sharing}: one performance case "
                                                "per node at a time); their timings competed", phase, b.label,
                                                b.repeat))
    return out


def _t(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).strftime("%H:%M:%S.%f")[:-4]


def placement_markdown(placements: Sequence[CasePlacement], nodes: Sequence[NodeIdentity] = ()) -> list[str]:
    """Markdown lines of the summary's "Placement" section (empty when there is no placement file).

    ``nodes``: the cluster identity gate's lines; listed with what the gate decided per node.
    """
    if not placements and not nodes:
        return []
    modes = sorted({p.sharing for p in placements if p.kind == "performance"})
    used = sorted({(p.hostname, p.node_id) for p in placements})
    lines = ["## Placement (where and when each case ran)", ""]
    if "per_accelerator" in modes:
        lines += ["> " + SHARING_NOTE, ""]
    rule = {"per_node": "at most one performance case per node at a time",
            "sequential": "one case at a time on this host (local executor)",
            "per_accelerator": "one performance case per accelerator (nodes shared)"}
    lines.append(f"Rule: {'; '.join(f'{m} ({rule[m]})' for m in modes) or 'accuracy cases only (no rule)'}; "
                 f"{len(used)} node(s): " + ", ".join(f"{h} {n[:12]}" for h, n in used) + ".")
    findings = check_placements(placements)
    errs = [f for f in findings if f.severity == "error"]
    lines.append(f"Overlap check: {'FAILED, ' + str(len(errs)) + ' overlap(s)' if errs else 'passed'}"
                 + (f", {len(findings) - len(errs)} shared-node warning(s)" if len(findings) > len(errs) else "")
                 + ".")
    lines += ["", "| phase | label | repeat | attempt | kind | host | node | device | start (UTC) | end (UTC) | "
              "wall s | sharing | outcome |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(placements, key=lambda p: (p.start_unix_s, p.phase, p.label)):
        outcome = p.outcome if p.cause is None else f"{p.outcome}: {p.cause[:80]}"
        lines.append(f"| {p.phase} | {p.label} | {p.repeat} | {p.attempt} | {p.kind} | {p.hostname} | "
                     f"{p.node_id[:12]} | {p.device} | {_t(p.start_unix_s)} | {_t(p.end_unix_s)} | "
                     f"{p.wall_s:.1f} | {p.sharing} | {outcome} |")
    if nodes:
        lines += ["", "Cluster identity gate (`cluster-manifest.jsonl`):", ""]
        for n in nodes:
            lines.append(f"- {n.checked_utc} {n.hostname} {n.node_id[:12]}: {n.action}"
                         + (f" ({'; '.join(n.problems)})" if n.problems else ""))
    return lines + [""]
