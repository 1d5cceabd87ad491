"""Independent recomputation of the per-label summary from the raw JSONL.

What is modelled: every number of ``summary/comparison-summary.json``'s
``rows`` that is a statistic or an evidence value, recomputed with the Python
standard library only (``json`` with a strict ``parse_constant``,
``statistics``, a hand-written type-7 percentile) straight from
``<phase>-runs.jsonl`` -- no pandas, no ``analysis.aggregate`` code path. Lines
are accepted when they validate as ``CaseRun`` (the shared contract), as the
loader does. Each value is compared with the summary at the precision the
report prints (``analysis.report.tables.PRECISION``; integers exactly); the maximum
absolute difference is reported both raw and at printed precision, and the
latter must be 0.

The current-vs-official rows' medians, delta and delta percent are
recomputed too (at 2 decimals), and so is every Pareto flag (strict dominance per
phase and implementation, baseline included). A choose run's decisions (``choose-decisions.jsonl``) are
recomputed from their recorded inputs with the runner's own rule (predictions, form, chosen settings). What is deliberately not modelled: the
verdict rule's intervals (``analysis.comparison.verdict_rule``'s own computation;
their inputs are the per-process values checked here) and the plots.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from results_schema.codec.io import RecordError, read_json
from results_schema.records.models import CaseRun
from results_schema.records.summary import ComparisonSummary

PRECISION_FALLBACK = 6


def _reject(name):
    raise ValueError(f"non-finite constant {name}")


def _pct7(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return math.nan
    h = (len(v) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def _median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def recompute(run_dir: Path | str) -> dict[tuple[str, str], dict]:
    """Per (phase, label) statistics from the raw runs files (stdlib only)."""
    procs = _valid_runs(Path(run_dir))
    base_thr: dict[str, list[float]] = defaultdict(list)
    base_kv: dict[str, list] = defaultdict(list)
    base_kvg: dict[str, list] = defaultdict(list)
    for (phase, _label), items in procs.items():
        for o in items:
            if o["record"]["implementation"] == "baseline":
                base_thr[phase].append(o["record"]["throughput_tok_s"])
                base_kv[phase].append(o["kv_cache"]["kv_cache_tokens"])
                base_kvg[phase].append(o["kv_cache"]["kv_cache_gib"])
    out: dict[tuple[str, str], dict] = {}
    for (phase, label), items in procs.items():
        row = _label_stats(items)
        b = statistics.median(base_thr[phase]) if base_thr.get(phase) else None
        row["baseline_throughput_median_tok_s"] = b
        row["retention"] = None if b is None else row["throughput_median_tok_s"] / b
        row["throughput_change_pct"] = None if b is None else (row["throughput_median_tok_s"] / b - 1.0) * 100.0
        bk, bg = _median(base_kv.get(phase, [])), _median(base_kvg.get(phase, []))
        k, g = row["kv_cache_tokens_median"], row["kv_cache_gib_median"]
        row["kv_gain_tokens"] = None if k is None or bk is None else k - bk
        row["kv_gain_gib"] = None if g is None or bg is None else g - bg
        out[(phase, label)] = row
    return out


def _valid_runs(run_dir: Path) -> dict[tuple[str, str], list[dict]]:
    """The raw ``CaseRun`` lines of every ``*-runs.jsonl`` that validate, per (phase, label)."""
    procs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in sorted(run_dir.glob("*-runs.jsonl")):
        with open(path) as fh:
            for line in fh:
                try:
                    obj = json.loads(line, parse_constant=_reject)
                    CaseRun.model_validate(obj)
                except (ValueError, ValidationError):
                    continue
                procs[(obj["record"]["phase"], obj["record"]["label"])].append(obj)
    return procs


def _label_stats(items: list[dict]) -> dict:
    """Process and round statistics and evidence values of one label's raw lines (stdlib only)."""
    thr = [o["record"]["throughput_tok_s"] for o in items]
    rnd = [r for o in items for r in o["record"]["rounds"]]
    rthr = [r["throughput_tok_s"] for r in rnd]
    lat = [r["elapsed_s"] for r in rnd]
    ev = items[0]["evidence"]
    return {
        "processes": len(items),
        "throughput_median_tok_s": statistics.median(thr),
        "throughput_mean_tok_s": statistics.fmean(thr),
        "throughput_stdev_tok_s": statistics.stdev(thr) if len(thr) > 1 else None,
        "throughput_min_tok_s": min(thr),
        "throughput_max_tok_s": max(thr),
        "pooled_round_throughput_median_tok_s": statistics.median(rthr),
        "pooled_round_throughput_stdev_tok_s": statistics.stdev(rthr) if len(rthr) > 1 else None,
        "rounds": len(rnd),
        "round_latency_p50_s": _pct7(lat, 0.50),
        "round_latency_p95_s": _pct7(lat, 0.95),
        "load_seconds_median": statistics.median(o["record"]["load_seconds"] for o in items),
        "kv_cache_tokens_median": _median([o["kv_cache"]["kv_cache_tokens"] for o in items]),
        "kv_cache_gib_median": _median([o["kv_cache"]["kv_cache_gib"] for o in items]),
        "peak_rss_bytes_median": statistics.median(o["record"]["peak_rss_bytes"] for o in items),
        "device_memory_bytes_median": _median([o["record"]["device_memory_bytes"] for o in items]),
        "selected_layers": ",".join(str(i) for i in ev["selected_layers"]),
        "wrapped_count": ev["wrapped_count"],
        "offloaded_bytes": ev["offloaded_bytes"],
        "static_buffer_bytes": ev["static_buffer_bytes"],
        "released_bytes": ev["released_bytes"],
    }


def _read_summary(path: Path) -> tuple[list[dict], dict[str, int] | None, list[dict]]:
    """``(rows, precision, comparison rows)`` of a ``comparison-summary.json``.

    Read through ``results_schema.records.summary.ComparisonSummary``; a summary written before that
    model existed (it fails the model, e.g. a missing column) is read as strict JSON instead,
    so that older runs stay verifiable.

    Raises:
        ValueError: the file is not strict JSON (a NaN/Infinity constant).
    """
    try:
        cs = read_json(path, ComparisonSummary)
    except RecordError:
        doc = json.loads(path.read_text(), parse_constant=_reject)
        return doc["rows"], doc.get("precision"), doc.get("comparison", [])
    return [r.model_dump() for r in cs.rows], dict(cs.precision), [dict(r) for r in cs.comparison]


@dataclass
class VerifyResult:
    compared: int = 0
    max_abs_diff: float = 0.0
    max_abs_diff_printed: float = 0.0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.max_abs_diff_printed == 0.0


def verify(run_dir: Path | str, summary_rows: list[dict] | None = None,
           precision: dict[str, int] | None = None) -> VerifyResult:
    """Compare the recomputation with the summary rows.

    Args:
        run_dir: run directory.
        summary_rows: rows to check; default: ``summary/comparison-summary.json``'s ``rows``
            (computed in memory by ``analysis.report.tables.build`` when the file does not exist).
        precision: decimals per column; default: the file's ``precision`` (or ``analysis.report.tables.PRECISION``).
    """
    run_dir = Path(run_dir)
    path = run_dir / "summary" / "comparison-summary.json"
    comparison_rows = None
    if summary_rows is None:
        if path.is_file():
            summary_rows, file_precision, comparison_rows = _read_summary(path)
            precision = precision or file_precision
        else:
            from analysis.report.tables import PRECISION, build, records

            tables = build(run_dir)
            summary_rows, precision = records(tables["summary"]), precision or PRECISION
            comparison_rows = records(tables["comparison"])
    if precision is None:
        from analysis.report.tables import PRECISION

        precision = PRECISION
    ref = recompute(run_dir)
    res = VerifyResult()
    _compare_rows(res, summary_rows, ref, precision)
    _compare_pareto(res, summary_rows, ref)
    _compare_comparison(res, comparison_rows or [], ref)
    _compare_choice(res, run_dir)
    return res


def _compare_choice(res: VerifyResult, run_dir: Path) -> None:
    """A choose run: every decision's predictions and choice recomputed from its recorded inputs
    (``analysis.model.choice.recompute``, the runner's own rule ``offload_tools.choice``)."""
    from analysis.model.choice import read_decisions, recompute

    for d in read_decisions(run_dir):
        res.compared += len(d.predictions) + len(d.chosen)
        res.mismatches += [f"choice: {m}" for m in recompute(d)]


def _compare_rows(res: VerifyResult, summary_rows: list[dict], ref: dict[tuple[str, str], dict],
                  precision: dict[str, int]) -> None:
    """Every recomputed per-label value vs the summary's, at printed precision (integers exactly)."""
    seen = set()
    for row in summary_rows:
        key = (row["phase"], row["label"])
        seen.add(key)
        if key not in ref:
            res.mismatches.append(f"{key[0]}/{key[1]}: in the summary but not in the raw runs")
            continue
        for col, want in ref[key].items():
            got = row.get(col)
            res.compared += 1
            if want is None or got is None or isinstance(want, str):
                if want != got:
                    res.mismatches.append(f"{key[0]}/{key[1]} {col}: summary {got!r}, recomputed {want!r}")
                continue
            diff = abs(float(got) - float(want))
            res.max_abs_diff = max(res.max_abs_diff, diff)
            d = precision.get(col, PRECISION_FALLBACK if isinstance(want, float) else 0)
            pdiff = abs(round(float(got), d) - round(float(want), d))
            res.max_abs_diff_printed = max(res.max_abs_diff_printed, pdiff)
            if pdiff != 0.0:
                res.mismatches.append(f"{key[0]}/{key[1]} {col}: summary {got!r}, recomputed {want!r} "
                                      f"(differ at {d} decimals)")
    for key in sorted(set(ref) - seen):
        res.mismatches.append(f"{key[0]}/{key[1]}: in the raw runs but missing from the summary")


def _want_front(summary_rows: list[dict], ref: dict[tuple[str, str], dict]) -> dict[tuple[str, str], bool]:
    """Pareto flags per phase and implementation, with the phase baseline as the zero point.

    Points the summary excluded from fronts (validation errors, tokens differing) must not be on
    one; the front is recomputed over the others.
    """
    impl_of = {(row["phase"], row["label"]): row.get("implementation") for row in summary_rows}
    excl = {(row["phase"], row["label"]) for row in summary_rows
            if isinstance(row.get("front_excluded"), str) and row["front_excluded"]}
    want_front: dict[tuple[str, str], bool] = {}
    for phase in {p for p, _ in ref}:
        labels = [lb for (p, lb) in ref if p == phase]
        for lb in labels:
            if (phase, lb) in excl:
                want_front[(phase, lb)] = False
        base = [lb for lb in labels if impl_of.get((phase, lb)) == "baseline" and (phase, lb) not in excl]
        for impl in {impl_of.get((phase, lb)) for lb in labels} - {"baseline", None}:
            group = base + [lb for lb in labels if impl_of.get((phase, lb)) == impl and (phase, lb) not in excl]
            for lb in group:
                want_front[(phase, lb)] = want_front.get((phase, lb), False) or not _dominated(ref, phase, lb, group)
        if not [lb for lb in labels if impl_of.get((phase, lb)) != "baseline"]:
            for lb in base:
                want_front[(phase, lb)] = True
    return want_front


def _dominated(ref: dict[tuple[str, str], dict], phase: str, lb: str, group: list[str]) -> bool:
    """Whether another label of ``group`` releases and yields at least as much, and more of one."""
    c, t = ref[(phase, lb)]["released_bytes"], ref[(phase, lb)]["throughput_median_tok_s"]
    return any(ref[(phase, o)]["released_bytes"] >= c and ref[(phase, o)]["throughput_median_tok_s"] >= t
               and (ref[(phase, o)]["released_bytes"] > c or ref[(phase, o)]["throughput_median_tok_s"] > t)
               for o in group if o != lb)


def _compare_pareto(res: VerifyResult, summary_rows: list[dict], ref: dict[tuple[str, str], dict]) -> None:
    want_front = _want_front(summary_rows, ref)
    for row in summary_rows:
        key = (row["phase"], row["label"])
        if key in want_front and "pareto" in row:
            res.compared += 1
            if bool(row["pareto"]) != want_front[key]:
                res.mismatches.append(f"{key[0]}/{key[1]} pareto: summary {row['pareto']}, recomputed {want_front[key]}")


def _compare_comparison(res: VerifyResult, comparison_rows: list[dict], ref: dict[tuple[str, str], dict]) -> None:
    """Current-vs-official medians, delta and delta percent at 2 decimals."""
    for row in comparison_rows:
        a = ref.get((row["phase"], row["a_label"]))
        b = ref.get((row["phase"], row["b_label"]))
        if a is None or b is None:
            res.mismatches.append(f"comparison {row['phase']}/{row['a_label']} vs {row['b_label']}: label missing")
            continue
        am, bm = a["throughput_median_tok_s"], b["throughput_median_tok_s"]
        for col, want, d in (("a_median_tok_s", am, 2), ("b_median_tok_s", bm, 2), ("delta_tok_s", am - bm, 2),
                             ("delta_pct", (am - bm) / bm * 100.0, 2)):
            res.compared += 1
            got = float(row[col])
            res.max_abs_diff = max(res.max_abs_diff, abs(got - want))
            pdiff = abs(round(got, d) - round(want, d))
            res.max_abs_diff_printed = max(res.max_abs_diff_printed, pdiff)
            if pdiff != 0.0:
                res.mismatches.append(f"comparison {row['phase']}/{row['a_label']} vs {row['b_label']} {col}: "
                                      f"summary {got!r}, recomputed {want!r}")
