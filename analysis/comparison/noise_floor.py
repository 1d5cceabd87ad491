"""The run's noise floor: baseline vs baseline, and the verdicts that hold by less than it.

What is modelled: a phase that runs its baseline in two or more processes (rotated with the
other labels) measures how much one unchanged setting moves between processes on this machine
(every undelayed baseline label of the phase, a twin included; a speed control is none of them).
Its *spread* is ``(max - min) / median`` of the baseline processes' throughputs (percent; the one rule,
``results_schema.rules.spread_rule.spread_pct``, re-exported here), and
their token digests must all be equal (same greedy tokens). A verdict's *margin* is how far its
retention interval sits from the verdict's boundary, in percent of the baseline:

* ``slower``: ``(1 - ci_high) * 100`` (the whole interval below "no change");
* ``faster``: ``(ci_low - 1) * 100``;
* ``equivalent``: ``margin_pct - max(|ci_low - 1|, |ci_high - 1|) * 100`` (inside the equivalence margin).

A verdict whose margin is below its phase's spread is flagged: it holds by less than the distance
between two runs of the same setting. The flag is a warning printed beside the verdict; the
verdict rule itself (``analysis.comparison.verdict_rule``) is unchanged.

What is deliberately not modelled: noise sources (load, placement, caches): the floor is what was
measured, not explained; a phase with one baseline process has no floor (printed as such).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from analysis.comparison.variance import reference_mask
from results_schema.rules.spread_rule import spread_pct

FLAGGED_VERDICTS = ("slower", "faster", "equivalent")


def noise_floors(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One ``results_schema.records.summary.NoiseFloor`` dict per phase with a baseline process.

    Args:
        runs: ``RunData.runs`` (columns ``phase``, ``implementation``, ``repeat``, ``throughput_tok_s``,
            ``token_digest``).

    Returns:
        Dicts with ``phase``, ``processes``, ``throughputs_tok_s`` (by repeat), ``spread_pct``
        (percent; None with fewer than 2 processes) and ``tokens_identical`` (None likewise).
    """
    out: list[dict[str, Any]] = []
    if runs.empty:
        return out
    for phase in dict.fromkeys(runs["phase"]):
        b = runs[(runs["phase"] == phase) & reference_mask(runs)].sort_values("repeat")
        if b.empty:
            continue
        thr = [float(x) for x in b["throughput_tok_s"]]
        n = len(thr)
        spread = spread_pct(thr)
        same = (b["token_digest"].nunique() == 1) if n >= 2 else None
        out.append({"phase": str(phase), "processes": n, "throughputs_tok_s": thr, "spread_pct": spread,
                    "tokens_identical": same})
    return out


def verdict_margin_pct(verdict: str, ci_low: float | None, ci_high: float | None, margin_pct: float) -> float | None:
    """How far a verdict's retention interval sits from its boundary (percent; see module docstring).

    Returns None for verdicts without a boundary (baseline, inconclusive, INVALID) or without an interval.
    """
    if ci_low is None or ci_high is None or verdict not in FLAGGED_VERDICTS:
        return None
    if verdict == "slower":
        return (1.0 - ci_high) * 100.0
    if verdict == "faster":
        return (ci_low - 1.0) * 100.0
    return margin_pct - max(abs(ci_low - 1.0), abs(ci_high - 1.0)) * 100.0


def below_floor(decision: Iterable[Any], floors: Sequence[Any], margin_pct: float) -> dict[tuple[str, str], str]:
    """``(phase, label) -> note`` for every verdict whose margin is below its phase's spread.

    Args:
        decision: rows with ``phase``, ``label``, ``verdict``, ``retention_ci_low``, ``retention_ci_high``
            (``DecisionRow`` objects or dicts).
        floors: ``NoiseFloor`` objects or dicts (``noise_floors``).
        margin_pct: equivalence margin of the verdicts (percent).
    """
    spread = {_get(f, "phase"): _get(f, "spread_pct") for f in floors}
    out: dict[tuple[str, str], str] = {}
    for r in decision:
        s = spread.get(_get(r, "phase"))
        m = verdict_margin_pct(_get(r, "verdict"), _get(r, "retention_ci_low"), _get(r, "retention_ci_high"),
                               margin_pct)
        if s is not None and m is not None and m < s:
            out[(_get(r, "phase"), _get(r, "label"))] = (
                f"{_get(r, 'verdict')} by {m:.1f}%, below the noise floor ({s:.1f}% baseline-vs-baseline spread)")
    return out


def floor_lines(floors: Sequence[Any], decision: Iterable[Any], margin_pct: float) -> list[str]:
    """The noise-floor lines every report prints (console, Markdown, HTML), one per phase, then flags.

    Example: ``noise floor same_runtime: 2 baseline processes 151.2, 149.0 tok/s, spread 1.5%, tokens
    identical``; then ``below the noise floor: same_runtime/current_g8_n1 slower by 0.9%, ...``.
    """
    lines = []
    for f in floors:
        thr = ", ".join(f"{t:.1f}" for t in _get(f, "throughputs_tok_s"))
        n = _get(f, "processes")
        if _get(f, "spread_pct") is None:
            lines.append(f"noise floor {_get(f, 'phase')}: 1 baseline process ({thr} tok/s): no baseline-vs-baseline "
                         "spread measured (run the baseline at least twice)")
            continue
        toks = "tokens identical" if _get(f, "tokens_identical") else "TOKENS DIFFER between baseline processes"
        lines.append(f"noise floor {_get(f, 'phase')}: {n} baseline processes {thr} tok/s, spread "
                     f"{_get(f, 'spread_pct'):.1f}% (max - min over median), {toks}")
    flags = below_floor(decision, floors, margin_pct)
    lines += [f"below the noise floor: {p}/{lb} {note}" for (p, lb), note in flags.items()]
    if floors:
        lines.append("verdict margin = distance of the retention interval from the verdict's boundary (slower: "
                     "below 1.0; faster: above 1.0; equivalent: inside the equivalence margin); flagged when "
                     "smaller than the phase's baseline-vs-baseline spread")
    return lines


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)
