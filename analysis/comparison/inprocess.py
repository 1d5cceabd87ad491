"""In-process copy share: paired A/B rounds inside one CPU case process (not the verdict of record).

What is modelled: the measured rounds of an in-process case (``results_schema.records.inprocess``) alternate arm
``A`` (the offloader installed, copies off, parameters read in place from its host buffer) and arm ``B`` (normal
prefetch) in ABBA order; pair ``k`` is rounds ``2k`` and ``2k + 1``. The copy share is the B/A throughput ratio:

* **in one process** (:func:`process_estimate`): the project's paired rule (``analysis.comparison.verdict_rule.
  decide_paired``: the mean per-pair log ratio ``log(B_k / A_k)`` with a t interval over the pairs, ``pairs - 1``
  degrees of freedom) of B against A. Rounds of one process are NOT independent replicates of the process effect
  (they share its memory layout, placement and the host's slow state): this interval describes the copy share in
  this process, not what another process would show;
* **over processes** (:func:`pooled_estimate`): one paired estimate per process (the geometric means of its B and
  of its A rounds, whose log ratio is the mean of its pair log ratios when every process has whole ABBA blocks),
  then the same paired rule over processes (``processes - 1`` degrees of freedom): the process is the unit.

An ``aa`` / ``bb`` case (both rounds of every pair in one mode, arms kept by ABBA position) is the A/A control of
the design: its estimate should call no effect.

Deliberately not modelled, and why this never enters the front, the recommender or the verdict of record: the A
rounds read the offloader's host buffer, not vLLM's own allocation of a plain baseline, and the design is CPU only;
offload against a plain baseline in fresh processes stays the verdict of record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from analysis.comparison.verdict_rule import CONFIDENCE, DEFAULT_MARGIN_PCT, Decision, decide_paired
from results_schema.records.models import BenchRecord

TITLE = "in-process copy share (not the verdict of record)"
"""Heading of every printed in-process estimate."""

NOT_REPLICATES = ("rounds of one process are not independent replicates of the process effect: a per-process "
                  "interval describes the copy share in that process; the pooled row is one paired estimate per "
                  "process, t over processes")
"""The note printed beside the per-process rows."""


def pair_values(arms: Sequence[str], tok_s: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per pair ``k`` (rounds ``2k``, ``2k + 1``): the ``A`` round's and the ``B`` round's throughput.

    Args:
        arms: arm of every measured round (``A`` / ``B``), in round order.
        tok_s: throughput of every measured round (tok/s), same length.

    Returns:
        ``(a, b)``: arrays of one value per pair.

    Raises:
        ValueError: different lengths, an odd or zero count, or a pair that is not one ``A`` and one ``B``.
    """
    if len(arms) != len(tok_s) or not arms or len(arms) % 2:
        raise ValueError(f"in-process rounds: {len(arms)} arms and {len(tok_s)} throughputs; need the same even, "
                         "non-zero count (pairs of rounds)")
    a, b = [], []
    for k in range(0, len(arms), 2):
        pair = {arms[k]: float(tok_s[k]), arms[k + 1]: float(tok_s[k + 1])}
        if set(pair) != {"A", "B"}:
            raise ValueError(f"in-process pair {k // 2} (rounds {k}, {k + 1}) has arms {arms[k]!r}, {arms[k + 1]!r}; "
                             "a pair is one 'A' and one 'B' round")
        a.append(pair["A"])
        b.append(pair["B"])
    return np.asarray(a), np.asarray(b)


def process_estimate(arms: Sequence[str], tok_s: Sequence[float], *, margin_pct: float = DEFAULT_MARGIN_PCT,
                     confidence: float = CONFIDENCE) -> Decision:
    """B against A in one process: ``decide_paired(B, A)`` over its pairs (``(B - A) / A`` in percent).

    ``slower`` means the copies cost throughput in this process. Raises ``ValueError`` as :func:`pair_values` or
    ``decide_paired``.
    """
    a, b = pair_values(arms, tok_s)
    return decide_paired(b, a, margin_pct=margin_pct, confidence=confidence)


def geometric_means(arms: Sequence[str], tok_s: Sequence[float]) -> tuple[float, float]:
    """``(A, B)``: the geometric mean of the process's A rounds and of its B rounds (tok/s).

    Raises:
        ValueError: as :func:`pair_values`, or a value that is not > 0.
    """
    a, b = pair_values(arms, tok_s)
    if not (np.all(a > 0) and np.all(b > 0)):
        raise ValueError("in-process rounds: a throughput is not > 0")
    return float(np.exp(np.log(a).mean())), float(np.exp(np.log(b).mean()))


def pooled_estimate(processes: Sequence[tuple[Sequence[str], Sequence[float]]], *,
                    margin_pct: float = DEFAULT_MARGIN_PCT, confidence: float = CONFIDENCE) -> Decision:
    """B against A over processes: one paired estimate per process, the paired t over processes.

    Args:
        processes: per process, ``(arms, tok_s)`` of its measured rounds.
        margin_pct, confidence: as ``decide_paired``.

    Returns:
        ``decide_paired`` of the processes' B geometric means against their A geometric means (``n_a`` = processes;
        no interval with one process).

    Raises:
        ValueError: no process, or as :func:`geometric_means`.
    """
    if not processes:
        raise ValueError("pooled in-process estimate: no process")
    means = [geometric_means(arms, tok) for arms, tok in processes]
    return decide_paired([m[1] for m in means], [m[0] for m in means], margin_pct=margin_pct, confidence=confidence)


@dataclass(frozen=True)
class InProcessRow:
    """One printed row: a process (``repeat`` set) or a label's processes pooled (``repeat`` None).

    Attributes:
        phase, label, design: the case (``design``: ``abba``, ``aa`` or ``bb``).
        repeat: the process's repeat, None for the pooled row.
        units: pairs (a process row) or processes (the pooled row).
        decision: B against A (``Decision``: verdict, interval of ``(B - A) / A`` in percent).
        tokens_identical: every pair's two rounds generated the same tokens (all processes for the pooled row).
    """

    phase: str
    label: str
    design: str
    repeat: int | None
    units: int
    decision: Decision
    tokens_identical: bool

    @property
    def copy_share_pct(self) -> float:
        """``-(B/A - 1)`` in percent from the interval's centre: the share of A's throughput the copies cost."""
        c = self.decision.center_pct
        return -c if math.isfinite(c) else math.nan


def label_rows(phase: str, label: str, design: str,
               processes: Sequence[tuple[int, Sequence[str], Sequence[float], bool]], *,
               margin_pct: float = DEFAULT_MARGIN_PCT) -> list[InProcessRow]:
    """The rows of one in-process label: one per process (by repeat), then the pooled row.

    Args:
        processes: per process ``(repeat, arms, tok_s, tokens_identical)``.

    Raises:
        ValueError: as :func:`pooled_estimate`.
    """
    rows = [InProcessRow(phase, label, design, rep, len(arms) // 2,
                         process_estimate(arms, tok, margin_pct=margin_pct), same)
            for rep, arms, tok, same in sorted(processes, key=lambda p: p[0])]
    pooled = pooled_estimate([(arms, tok) for _r, arms, tok, _s in processes], margin_pct=margin_pct)
    rows.append(InProcessRow(phase, label, design, None, len(processes), pooled, all(p[3] for p in processes)))
    return rows


def record_rows(records: Iterable[BenchRecord], *, margin_pct: float = DEFAULT_MARGIN_PCT) -> list[InProcessRow]:
    """:func:`label_rows` of every in-process label of these records (records without ``in_process`` are skipped),
    in order of first appearance."""
    groups: dict[tuple[str, str, str], list[tuple[int, Sequence[str], Sequence[float], bool]]] = {}
    for r in records:
        ip = r.in_process
        if ip is None:
            continue
        groups.setdefault((r.phase, r.label, ip.design), []).append(
            (r.repeat, ip.arms, [x.throughput_tok_s for x in r.rounds], ip.tokens_identical))
    out: list[InProcessRow] = []
    for (phase, label, design), procs in groups.items():
        out += label_rows(phase, label, design, procs, margin_pct=margin_pct)
    return out


def row_text(row: InProcessRow) -> str:
    """One line: where, what, the verdict with its interval (B vs A), and the unit the interval counts."""
    who = f"{row.phase}/{row.label}" + (f"-r{row.repeat}" if row.repeat is not None else " pooled")
    unit = "pairs" if row.repeat is not None else "processes"
    tokens = "tokens A == B" if row.tokens_identical else "TOKENS DIFFER between A and B"
    return (f"{who} [{row.design}]: B vs A {row.decision.text} over {row.units} {unit} "
            f"(copy share {row.copy_share_pct:+.1f}%; {tokens})")


def report_lines(rows: Sequence[InProcessRow]) -> list[str]:
    """The console / Markdown block: :data:`TITLE`, :data:`NOT_REPLICATES`, one line per row (empty: no line)."""
    if not rows:
        return []
    return [TITLE, f"({NOT_REPLICATES})", *(row_text(r) for r in rows)]
