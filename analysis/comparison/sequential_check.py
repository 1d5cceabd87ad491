"""``analysis validate`` of a sequential phase: every recorded look recomputed from the recorded processes, and held
to the design the run declared.

What is modelled: the lines of ``sequential-decisions.jsonl`` (``results_schema.records.sequential``) of one phase,
in order, per look series (one per phase; a choose run's verify phase has one per decision, ``first_block``), against
the processes of ``<phase>-runs.jsonl`` (``recheck_looks``): each line follows its design (look number, blocks =
``looks[k]``, the look's spent alpha), looks at exactly the labels the previous line left open, adds the blocks the
design gives (``looks[k+1] - looks[k]`` while a label is open, else 0), and each label's verdict, interval and
interval method (``Welch t`` / ``pooled t``, or ``paired t`` under ``pairing: block``) are what
``analysis.comparison.sequential.look_verdict`` gives on the values ``look_values`` takes under the recorded pairing
(its processes of blocks ``1..blocks`` against the baseline's, or the complete blocks paired; bounds within
``TOL_PCT``). The MDE of an inconclusive label is not recomputed (a simulation; its seed is fixed, so it would agree,
but it costs 400 ``decide`` calls per label).

The design a line records is then held to what the run declared (``recheck_declared``): its looks, target, alpha,
spending and pairing are the saved config's for the phase (``EnvironmentManifest.config``, the data
``config_sha256`` pins: ``phases.<phase>.sequential``; a choose run's verify phase: ``choose.verify_looks``, the
verify series' alpha, spending and pairing, a target never below ``choose.verify_target_floor_pct``, and each
decision's ``verify_design`` declaring the same), its baseline is the phase's planned baseline (``plan.json``), and
each series' first look looks at the labels planned for it (``plan.json``'s other cases of the phase; a verify
series: its decision's chosen settings). So lines that agree with themselves under another design than the declared
one (other looks, another alpha) fail. That the manifest's config is the one its ``config_sha256`` names is check
``manifest``'s (code ``config_hash_mismatch``, ``analysis.validation.checks.check_config_hash``: the runner's hash
rule, ``results_schema.rules.config_rule``), so a config edited to agree with forged lines fails there.

What is deliberately not modelled: whether the runner ran the blocks in ABBA order (the schedule is in the logs);
a verify decision's target against its predictions (``analysis.model.choice``, check ``choice``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from analysis.comparison.sequential import SequentialDesign, line_design, look_values, look_verdict
from results_schema.records.choice import DEFAULT_VERIFY_TARGET_FLOOR_PCT, ChoiceDecision
from results_schema.records.plan import PlannedPhase, RunPlan
from results_schema.records.sequential import (DEFAULT_ALPHA, DEFAULT_PAIRING, DEFAULT_SPENDING, FILE_NAME,
                                               LabelLook, LookDecision, series_repeats)
from results_schema.records.serving_looks import ServingLookDecision

TOL_PCT = 1e-6
"""Bound tolerance (percent points): the recorded JSON holds full float precision."""


def _same(x: float | None, y: float) -> bool:
    return (x is None and not math.isfinite(y)) or (x is not None and math.isfinite(y) and abs(x - y) <= TOL_PCT)


def _label(x: LabelLook, a: list[float], b: list[float], design: SequentialDesign, k: int) -> str | None:
    last = k == len(design.looks) - 1
    if not a or not b:
        want = "inconclusive" if last else "open"
        return None if x.verdict == want and x.ci_low_pct is None else (
            f"{x.label}: recorded {x.verdict} with no process on a side ({len(a)} vs {len(b)}); expected {want}")
    lv = look_verdict(a, b, design, k, with_mde=False)
    d = lv.decision
    if lv.verdict == x.verdict and _same(x.ci_low_pct, d.ci_low_pct) and _same(x.ci_high_pct, d.ci_high_pct) and (
            x.processes, x.reference_processes) == (len(a), len(b)) and x.method == d.method:
        return None
    return (f"{x.label}: recorded {x.verdict} ({x.method or 'no interval'} {x.ci_low_pct}..{x.ci_high_pct}%, "
            f"{x.processes} vs {x.reference_processes}), recomputed {lv.verdict} ({d.method} {d.ci_low_pct:+.4f}.."
            f"{d.ci_high_pct:+.4f}%, {len(a)} vs {len(b)})")


AnyLook = TypeVar("AnyLook", LookDecision, ServingLookDecision)
"""A look line of either kind (``results_schema.records.sequential.LookLine``'s two records)."""


def recheck_each_look(lines: Sequence[AnyLook], check: Callable[[int, AnyLook, SequentialDesign], list[str]]
                      ) -> list[str]:
    """The differences of one look series (file order), in order: each line's design against its first line's
    (``line_design``), and for each line that follows it ``check(k, line, design)`` (``k`` its 0-based look). A
    design difference reads ``the recorded design is not valid: ...`` (the first line's; nothing follows), ``look N:
    another design than look 1's`` (that line is not checked), ``look N: the design has M looks`` (a line past the
    design's last look; nothing follows). The throughput (``recheck_series``) and the serving validation
    (``analysis.serving.sequential_check.recheck_serving_looks``) both check a series this way."""
    if not lines:
        return []
    try:
        design = line_design(lines[0])
    except ValueError as exc:
        return [f"the recorded design is not valid: {exc}"]
    out: list[str] = []
    for k, line in enumerate(lines):
        if line.design_values != lines[0].design_values:
            out.append(f"look {line.look}: another design than look 1's")
        elif k >= len(design.looks):
            out.append(f"look {line.look}: the design has {len(design.looks)} looks")
            break
        else:
            out += check(k, line, design)
    return out


def look_place_diffs(line: AnyLook, k: int, design: SequentialDesign, prev: AnyLook | None) -> list[str]:
    """Where look ``k`` (0-based) of a series differs from its design and the look before it: its number and blocks
    (``looks[k]``), its spent alpha, and the labels it looks at (exactly those ``prev`` left open). Empty: none."""
    out = []
    if line.look != k + 1 or line.blocks != design.looks[k]:
        out.append(f"look {line.look} after {line.blocks} blocks: the design's look {k + 1} is after {design.looks[k]}")
    if abs(line.look_alpha - design.look_alphas()[k]) > 1e-12:
        out.append(f"look {line.look}: alpha {line.look_alpha} recorded, the design spends {design.look_alphas()[k]}")
    if prev is not None and tuple(x.label for x in line.labels) != prev.still_open:
        out.append(f"look {line.look} looks at {[x.label for x in line.labels]}, the previous look left "
                   f"{list(prev.still_open)} open")
    return out


def next_blocks_diffs(line: AnyLook, k: int, design: SequentialDesign) -> list[str]:
    """The blocks look ``k`` adds against the design's (``looks[k+1] - looks[k]`` while a label is open, else 0);
    empty when they agree."""
    want = design.looks[k + 1] - design.looks[k] if line.still_open and k + 1 < len(design.looks) else 0
    if line.next_blocks != want:
        return [f"look {line.look}: adds {line.next_blocks} block(s), the design gives {want}"]
    return []


def recheck_looks(lines: Sequence[LookDecision], values: Mapping[tuple[str, str], Mapping[int, float]]) -> list[str]:
    """One line per difference between one phase's recorded looks and their recomputation (empty: all agree).

    A phase holds one look series, or (a choose run's verify phase) one per decision, told apart by
    ``LookDecision.first_block``: each series is checked on its own (``recheck_series``), and each starts where the one
    before it ended (``first_block`` = the earlier series' last blocks).

    Args:
        lines: the phase's look lines, in file order.
        values: ``(phase, label) -> {repeat: tok/s}`` of every recorded process (block ``b`` of a series is repeat
            ``first_block + b - 1``).
    """
    series: dict[int, list[LookDecision]] = {}
    for line in lines:
        series.setdefault(line.first_block, []).append(line)
    out: list[str] = []
    end = 0
    for first, mine in series.items():
        head = f"series from block {first + 1}: " if len(series) > 1 else ""
        if first != end:
            out.append(f"{head}starts after block {first}, the series before it ended after block {end}")
        out += [head + diff for diff in recheck_series(mine, values)]
        end = first + mine[-1].blocks
    return out


def recheck_series(lines: Sequence[LookDecision], values: Mapping[tuple[str, str], Mapping[int, float]]) -> list[str]:
    """``recheck_looks`` of one look series (its lines share ``first_block``, in file order)."""
    def look(k: int, line: LookDecision, design: SequentialDesign) -> list[str]:
        base = series_repeats(values.get((line.phase, line.baseline), {}), line.first_block)
        labels = [f"look {line.look}: {diff}" for x in line.labels
                  if (diff := _label(x, *look_values(series_repeats(values.get((line.phase, x.label), {}),
                                                                    line.first_block), base, design, k), design,
                                     k)) is not None]
        return look_place_diffs(line, k, design, lines[k - 1] if k else None) + next_blocks_diffs(line, k, design) + labels

    return recheck_each_look(lines, look)


LOOK_HEADER = ["phase", "label", "look", "blocks", "processes", "interval (the look's verdict interval)", "verdict",
               "MDE"]
"""Columns of ``look_rows`` / ``look_table``."""


def look_rows(lines: Sequence[LookDecision]) -> list[list[str]]:
    """Each label's interval per look, one row per label and look (columns ``LOOK_HEADER``): the blocks, processes
    (label vs baseline), the interval of ``(label - baseline) / baseline`` at the look's confidence (the verdict's own
    interval, named ``CI<level> <method>``), the look's verdict (``open``: looked at again), the MDE of a label
    inconclusive at the budget."""
    rows = []
    for line in lines:
        level = f"CI{100 * (1 - line.look_alpha):.3g}"
        for x in line.labels:
            ci = ("no interval" if x.ci_low_pct is None or x.ci_high_pct is None
                  else f"{level} {x.method} {x.ci_low_pct:+.1f}%..{x.ci_high_pct:+.1f}%")
            mde = "" if x.verdict != "inconclusive" else "none below 100%" if x.mde_pct is None else f"{x.mde_pct:.1f}%"
            rows.append([line.phase, x.label, str(line.look), str(line.blocks),
                         f"{x.processes} vs {x.reference_processes}", ci, x.verdict, mde])
    return rows


def look_table(lines: Sequence[LookDecision]) -> list[str]:
    """``look_rows`` as a Markdown table (the summary and the console print it; empty: no look)."""
    if not lines:
        return []
    return ["| " + " | ".join(LOOK_HEADER) + " |", "|" + "---|" * len(LOOK_HEADER),
            *("| " + " | ".join(r) + " |" for r in look_rows(lines))]


Declared = dict[str, tuple[Any, str]]
"""``LookDecision`` field -> (the value the run declared, where it declared it): what ``declared_design`` gives."""


def declared_design(config: Mapping[str, Any], phase: str) -> Declared | None:
    """The look design the run's saved config declares for ``phase`` (None: the phase is not sequential).

    ``config`` is the plain config the run saved (``EnvironmentManifest.config``). A throughput phase:
    ``phases.<phase>.sequential``, sequential when its ``looks`` are set (its ``pairing``, an added field, is left out
    of the saved config while it is ``DEFAULT_PAIRING``). A choose run's verify phase (``choose.probe_phase`` set,
    ``phase`` = ``choose.verify_phase``; ``choose`` is left out of a run without a choice): ``choose.verify_looks``
    (left out while empty: the fixed design), the alpha, spending and pairing every decision's series runs
    (``DEFAULT_ALPHA``, ``DEFAULT_SPENDING``, ``DEFAULT_PAIRING``: ``runners.orchestration.choose_decide``), and, in
    place of one target, ``target_floor_pct``: ``choose.verify_target_floor_pct`` (left out while
    ``DEFAULT_VERIFY_TARGET_FLOOR_PCT``), the floor of every decision's target.

    Raises:
        KeyError, TypeError, AttributeError: ``config`` lacks a key that every config the runner saves holds.
    """
    choose = config.get("choose") or {}
    if choose.get("probe_phase") is not None and phase == choose["verify_phase"]:
        looks = choose.get("verify_looks") or []
        if not looks:
            return None
        series = "every verify series' design: runners.orchestration.choose_decide"
        return {"looks": (tuple(int(n) for n in looks), "choose.verify_looks"), "alpha": (DEFAULT_ALPHA, series),
                "spending": (DEFAULT_SPENDING, series), "pairing": (DEFAULT_PAIRING, series),
                "target_floor_pct": (choose.get("verify_target_floor_pct", DEFAULT_VERIFY_TARGET_FLOOR_PCT),
                                     "choose.verify_target_floor_pct")}
    seq = config["phases"][phase].get("sequential") if phase in config["phases"] else None
    if not seq or not seq.get("looks"):
        return None
    key = f"phases.{phase}.sequential"
    return {"looks": (tuple(int(n) for n in seq["looks"]), f"{key}.looks"),
            "target_pct": (seq["target_pct"], f"{key}.target_pct"), "alpha": (seq["alpha"], f"{key}.alpha"),
            "spending": (seq["spending"], f"{key}.spending"),
            "pairing": (seq.get("pairing", DEFAULT_PAIRING), f"{key}.pairing")}


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _where(line: LookDecision) -> str:
    return f"look {line.look}" + (f" of the series from block {line.first_block + 1}" if line.first_block else "")


def _field_diffs(lines: Sequence[LookDecision], name: str, value: Any, source: str) -> list[str]:
    """One line per recorded value of ``name`` that differs from ``value`` (``target_floor_pct``: a target below it),
    naming the looks that record it."""
    field = "target_pct" if name == "target_floor_pct" else name
    bad: dict[Any, list[str]] = {}
    for x in lines:
        got = getattr(x, field)
        if (got < value) if name == "target_floor_pct" else (got != value):
            bad.setdefault(got, []).append(_where(x))
    rule = "at least " if name == "target_floor_pct" else ""
    return [f"{field} {_show(got)} recorded ({', '.join(where)}); declared {rule}{_show(value)} ({source})"
            for got, where in bad.items()]


def _decision_diffs(decisions: Sequence[ChoiceDecision], declared: Declared) -> list[str]:
    """A verify phase: each decision's declared series (``verify_design``) against the saved config."""
    out = []
    for d in decisions:
        vd = d.verify_design
        if vd is None:
            continue
        for name, got in (("looks", tuple(vd.looks)), ("alpha", vd.alpha), ("spending", vd.spending),
                          ("target_floor_pct", vd.floor_pct)):
            value, source = declared[name]
            if got != value:
                field = "floor_pct" if name == "target_floor_pct" else name
                out.append(f"decision {d.stage}'s verify_design (series from block {vd.first_block + 1}): {field} "
                           f"{_show(got)}; declared {_show(value)} ({source})")
    return out


def _first_labels(lines: Sequence[LookDecision], planned: PlannedPhase, decisions: Sequence[ChoiceDecision],
                  verify: bool) -> list[str]:
    """Each series' first look against the labels planned for it (module docstring)."""
    want = [(0, [c.label for c in planned.cases[1:]], "plan.json plans beside the baseline")]
    if verify:
        want = [(d.verify_design.first_block, [c.label for c in d.chosen], f"decision {d.stage} chose")
                for d in decisions if d.verify_design is not None]
    out = []
    for first, labels, source in want:
        head = next((x for x in lines if x.first_block == first and x.look == 1), None)
        got = sorted(x.label for x in head.labels) if head is not None else []
        if head is not None and got != sorted(labels):
            out.append(f"{_where(head)} looks at {got}; {source} {sorted(labels)}")
    return out


def recheck_declared(lines: Sequence[LookDecision], declared: Declared | None, planned: PlannedPhase | None,
                     decisions: Sequence[ChoiceDecision] = ()) -> list[str]:
    """One line per difference between one phase's look lines and what the run declared for it (empty: all agree).

    Every line's ``looks``, ``target_pct``, ``alpha``, ``spending`` and ``pairing`` equal ``declared`` (a verify
    phase: a target at or above its floor, and each decision's ``verify_design`` declares the same looks, alpha,
    spending and floor), its ``baseline`` is the phase's first planned case (the baseline a sequential phase needs,
    planned first: ``runners.planning.plan``), a throughput phase has one series (``first_block`` 0), and each
    series' first look looks at the labels planned for it (module docstring).

    Args:
        lines: one phase's look lines, in file order.
        declared: ``declared_design`` of the phase (None: the saved config declares none, which a recorded line
            contradicts).
        planned: the phase in ``plan.json`` (None: it has none).
        decisions: the run's choice decisions (a choose run's verify phase; else unused).
    """
    if not lines:
        return []
    if declared is None:
        return [f"{len(lines)} look line(s) recorded; the saved config declares no sequential design for the phase"]
    if planned is None:
        return ["plan.json has no such phase: its baseline and planned labels are unknown"]
    verify = "target_floor_pct" in declared
    want = {**declared, "baseline": (planned.cases[0].label, "plan.json's first case of the phase")}
    if not verify:
        want["first_block"] = (0, "a throughput phase has one look series")
    out = [diff for name, (value, source) in want.items() for diff in _field_diffs(lines, name, value, source)]
    if verify:
        out += _decision_diffs(decisions, declared)
    return out + _first_labels(lines, planned, decisions, verify)


def recheck_declarations(lines: Sequence[LookDecision], config: Mapping[str, Any], plan: RunPlan,
                         decisions: Sequence[ChoiceDecision] = ()) -> list[tuple[str, str]]:
    """``(phase, difference)`` of every phase's look lines against what the run declared (``recheck_declared``).

    Args:
        lines: the run's look lines, in file order.
        config: the run's saved config (``EnvironmentManifest.config``).
        plan: the run's ``plan.json`` as written (``RunPlan``).
        decisions: the run's ``choose-decisions.jsonl`` lines (empty: not a choose run).
    """
    planned = {p.name: p for p in plan.phases}
    out: list[tuple[str, str]] = []
    for phase in dict.fromkeys(x.phase for x in lines):
        try:
            declared = declared_design(config, phase)
        except (KeyError, TypeError, AttributeError) as exc:
            out.append((phase, f"the saved config's design of the phase cannot be read ({exc!r})"))
            continue
        out += [(phase, diff) for diff in recheck_declared([x for x in lines if x.phase == phase], declared,
                                                           planned.get(phase), decisions)]
    return out


def recheck_unlooked(lines: Sequence[LookDecision], config: Mapping[str, Any],
                     processes: Mapping[str, int]) -> list[tuple[str, str]]:
    """``(phase, difference)`` of every phase the saved config declares sequential (``declared_design``) whose
    processes were recorded with no look line (a run stopped before its first look, or its lines lost): its verdicts
    would fall back to the fixed rule the design does not allow.

    Args:
        lines: the run's look lines.
        config: the run's saved config (``EnvironmentManifest.config``).
        processes: phase -> recorded processes (``<phase>-runs.jsonl`` lines).
    """
    looked = {x.phase for x in lines}
    out: list[tuple[str, str]] = []
    for phase, n in processes.items():
        if phase in looked:
            continue
        try:
            declared = declared_design(config, phase)
        except (KeyError, TypeError, AttributeError):
            continue  # a config without its phases: check manifest names it
        if declared is not None:
            looks, key = declared["looks"]
            out.append((phase, f"the run declared looks {list(looks)} ({key}) but recorded no look line over its "
                               f"{n} process(es) ({FILE_NAME}): the phase has no verdict of record"))
    return out
