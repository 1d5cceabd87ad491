"""Paired verdicts of finished ``+experiment=aa_paired`` runs with their contended processes included, loaded runs
against quiet ones (issue 53 item 4; ``docs/measurements/contention-pairing-2026-12-05.md``).

Usage: ``.venv/bin/python scripts/contention_pairing.py RUN_DIR [RUN_DIR ...]``, each a finished run directory of a
phase paired by block (``sequential.pairing: block``). A run is *loaded* when ``scripts/shared_load.py`` left its
record beside it (``<RUN_DIR>.shared-load.json``), else *quiet*.

What it computes, with the project's readers and rules only (``analysis.load.load_run``,
``analysis.comparison.compare.run_sequential_verdicts``, ``analysis.comparison.paired_aa``):

* the comparisons the report makes in each paired phase: its A/A rows (``X_twin`` vs ``X``) and control rows
  (control vs each undelayed baseline label) as ``analysis.comparison.dimensioning.aa_comparisons`` lists them, and
  each offload label against the looks' baseline;
* for each, ``verdict_rule.decide_paired`` on the blocks the report uses (``analysis.comparison.sequential.look_values``
  and ``look_blocks`` under the recorded design: the complete blocks of the look that judged the pair, else of the
  budget), at that look's confidence (``SequentialDesign.confidence``) and the design's target as margin,
  **contended processes included** (what ``analysis.comparison.soundness`` withholds), checked equal to the report's
  own row
  (``paired_aa.paired_row`` on the runs with ``host_contended`` cleared); beside it the verdict as reported
  (withholding applied: ``paired_row`` / ``compare.sequential_row`` on the runs as recorded);
* per block: ``100 ln(a_k / b_k)`` and how many of the pair's two processes were contended; the SD of the per-block
  log ratios paired and unpaired (``analysis.comparison.shared_time.paired_gain``);
* per arm: processes, contended processes, median foreign cores (``host_load.foreign_cores``) and foreign share of the
  host (foreign cores / ``host_load.host_cores``), median tok/s.

The summary, per declared load (the records' kind and process count) against every quiet run: per comparison the
verdicts and centres, whether each loaded run's paired estimate lies inside each quiet run's interval and vice versa,
the pooled SD of the per-block log ratios of each side (descriptive: a wider spread costs power, not soundness:
the paired t interval uses the spread it sees); then each criterion the measurement page declared before the data,
met or not: C0 the load was seen (every loaded process contended, no quiet one); C1 A/A calls in the loaded runs at
most ``AA_MAX_CALLS``; C2 the control ``slower`` in all but at most one loaded control row; C3 the load moved the
paired estimate by less than the target, shown: ``verdict_rule.decide`` on the loaded runs' per-block ratios against
the quiet runs' (95%, the design's target as margin) is ``equivalent``, for each offload label and the control
against the baseline (twins left out: they repeat those).

Bad input (a path that is no run directory, a run directory given twice (it would count as two runs), a run with a
record line that does not validate (``analysis.load.load_run`` sets it aside: the run would be read without it), a
run without a phase paired by block, a shared-load record beside a run that is unreadable or unfinished, a run
without one whose results root holds a shared-load record naming it (``stray_load``: the run was under a load), no
RUN_DIR): one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.comparison.compare import run_sequential_verdicts, sequential_row  # noqa: E402
from analysis.comparison.dimensioning import TWIN_SUFFIX, aa_comparisons  # noqa: E402
from analysis.comparison.paired_aa import GroupedRuns, group_runs, paired_designs, paired_row  # noqa: E402
from analysis.comparison.sequential import SequentialDesign, look_blocks, look_values  # noqa: E402
from analysis.comparison.sequential_verdict import SequentialVerdict  # noqa: E402
from analysis.comparison.shared_time import paired_gain  # noqa: E402
from analysis.comparison.verdict_rule import Decision, decide, decide_paired  # noqa: E402
from analysis.load import RUNS_SUFFIX, RunData, load_run  # noqa: E402
from results_schema.records.sequential import series_repeats  # noqa: E402

RECORD_SUFFIX = ".shared-load.json"
"""``scripts/shared_load.py``'s record beside a run directory: ``<RUN_DIR>`` + this."""
LOAD_KEYS = ("kind", "procs", "started_utc", "stopped_utc")
"""What this script reads of a shared-load record (``stopped_utc`` null: the script was killed before it stopped its
load, so what ran under it is not known)."""
AA_MAX_CALLS = 1
"""C1: A/A calls allowed over every loaded A/A row (issue 53's bar for real A/A runs: at most 1 of 6)."""


@dataclass
class Comparison:
    """One comparison of one run (module docstring)."""

    run: str
    phase: str
    kind: str
    a: str
    b: str
    blocks: list[int]
    a_vals: list[float]
    b_vals: list[float]
    decision: Decision
    reported: str
    same_as_report: bool
    pair_contended: list[int]
    sd_paired: float = math.nan
    sd_unpaired: float = math.nan

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.a, self.b)

    @property
    def log_ratios_pct(self) -> list[float]:
        return [100.0 * math.log(x / y) for x, y in zip(self.a_vals, self.b_vals, strict=True)]


@dataclass
class Run:
    """One run directory: its comparisons, per-arm load, and the shared-load record (None: quiet)."""

    path: Path
    comparisons: list[Comparison]
    arms: pd.DataFrame
    load: dict[str, Any] | None
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def loaded(self) -> bool:
        return self.load is not None


def _fail(message: str) -> NoReturn:
    print(f"contention_pairing.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def compare_pair(data: RunData, g: GroupedRuns, seq: dict[tuple[str, str], SequentialVerdict], phase: str,
                 design: SequentialDesign, kind: str, a: str, b: str, delay: float) -> Comparison | None:
    """``decide_paired`` of ``a`` vs ``b`` on the blocks and at the level the report uses, contended included (None,
    with a line on stderr, when no block holds a process of both); ``g``: the run's processes grouped once
    (``paired_aa.group_runs``)."""
    runs = data.runs
    cleared = GroupedRuns(g.tok_s, frozenset())  # the same processes, none contended
    sv = seq.get((phase, a))
    looked = sv is not None and sv.baseline == b and sv.blocks in design.looks
    first = sv.first_block if sv is not None and looked else 0
    k = design.looks.index(sv.blocks) if sv is not None and looked else len(design.looks) - 1
    am, bm = series_repeats(g.tok_s.get((phase, a), {}), first), series_repeats(g.tok_s.get((phase, b), {}), first)
    av, bv = look_values(am, bm, design, k)
    used = look_blocks(am, bm, design, k)  # the blocks of those values
    if not av:
        print(f"contention_pairing.py: {data.run_dir}: {a} vs {b}: no block with a process of each; left out",
              file=sys.stderr)
        return None
    d = decide_paired(av, bv, margin_pct=design.target_pct, confidence=design.confidence(k))
    own = paired_row(cleared, phase, kind, a, b, design, delay, sv)
    same = own["verdict"] == d.verdict and all(
        (x is None and not math.isfinite(y)) or (x is not None and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9))
        for x, y in ((own["ci_low_pct"], d.ci_low_pct), (own["ci_high_pct"], d.ci_high_pct)))
    if kind == "offload" and sv is not None:
        reported = str(sequential_row(runs, phase, a, sv)[0])
    else:
        reported = str(paired_row(g, phase, kind, a, b, design, delay, sv)["verdict"])
    c = Comparison(data.run_dir.name, phase, kind, a, b, [first + r + 1 for r in used], av, bv, d, reported, same,
                   [sum((phase, lb, first + r) in g.contended for lb in (a, b)) for r in used])
    if len(av) >= 2:
        c.sd_paired, c.sd_unpaired = (100.0 * s for s in paired_gain(np.log(av), np.log(bv)))
    return c


def comparisons(data: RunData) -> list[Comparison]:
    """Every paired phase's comparisons (module docstring), in the report's order, then the offload labels."""
    seq = run_sequential_verdicts(data)
    g = group_runs(data.runs)  # once per run, as the report does
    out: list[Comparison | None] = []
    rows = aa_comparisons(data.runs.assign(host_contended=False), sequential=seq,
                          grouped=GroupedRuns(g.tok_s, frozenset()))
    for phase, (design, base) in paired_designs(seq).items():
        for r in rows:
            if r["phase"] == phase:
                out.append(compare_pair(data, g, seq, phase, design, r["kind"], r["a_label"], r["b_label"],
                                        float(r["step_delay_ms"])))
        pr = data.runs[data.runs["phase"] == phase]
        for label in dict.fromkeys(str(x) for x in pr.loc[pr["implementation"] != "baseline", "label"]):
            if (phase, label) in seq and seq[(phase, label)].baseline == base:
                out.append(compare_pair(data, g, seq, phase, design, "offload", label, base, 0.0))
    return [c for c in out if c is not None]


def arm_table(data: RunData) -> pd.DataFrame:
    """Per phase and arm: processes, contended, median foreign cores and share of the host, median tok/s."""
    runs = data.runs.copy()
    try:
        cores = data.run_table.column("record.host_load.host_cores")
    except KeyError:
        cores = [None] * len(runs)
    foreign = runs["host_foreign_cores"].to_numpy(dtype=float, na_value=np.nan)
    runs["foreign"] = foreign
    runs["share"] = [f / c if c else math.nan for f, c in zip(foreign, cores, strict=True)]
    runs["cont"] = runs["host_contended"].fillna(False).astype(bool)
    g = runs.groupby(["phase", "label"], sort=False)
    return pd.DataFrame({"processes": g.size(), "contended": g["cont"].sum(),
                         "foreign_cores": g["foreign"].median(), "foreign_share": g["share"].median(),
                         "tok_s": g["throughput_tok_s"].median()}).reset_index()


def read_load(rec: Path) -> dict[str, Any] | None:
    """The shared-load record at ``rec`` (None when there is none: a quiet run). ``SystemExit(2)`` with one line when
    it is not a finished ``shared-load/1`` record (unreadable, another schema, or one of ``LOAD_KEYS`` missing or
    null)."""
    if not rec.is_file():
        return None
    try:
        load = json.loads(rec.read_text())
    except (OSError, ValueError) as e:
        _fail(f"{rec}: not a readable JSON record ({e})")
    if not isinstance(load, dict) or load.get("schema") != "shared-load/1" or not all(
            load.get(k) for k in LOAD_KEYS):
        _fail(f"{rec}: not a finished shared-load/1 record (schema shared-load/1 and {', '.join(LOAD_KEYS)} set "
              "needed)")
    return load


def stray_load(path: Path) -> Path | None:
    """A shared-load record in the run's results root (``<root>/.shared-load-*.json``: where ``scripts/shared_load.py``
    leaves it, with a WARNING, when it cannot put it beside one new run) whose ``run_dirs`` names the run directory
    ``path`` (relative ones resolved against the record's ``cwd``); None when there is none."""
    me = path.resolve()
    for rec in sorted(path.resolve().parent.parent.glob(".shared-load-*.json")):
        try:
            load = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(load, dict) and isinstance(load.get("run_dirs"), list) and any(
                (Path(str(load.get("cwd", "."))) / str(d)).resolve() == me for d in load["run_dirs"]):
            return rec
    return None


def read_run(path: Path) -> Run:
    """Load one run directory (``SystemExit(2)`` when it is no paired run)."""
    data = load_run(path)
    if data.line_errors:
        _fail(f"{path}: {len(data.line_errors)} record line(s) do not validate, first {data.line_errors[0]} "
              "(`python -m analysis validate RUN_DIR` names them all)")
    load = read_load(Path(str(path) + RECORD_SUFFIX))
    if load is None and (stray := stray_load(path)) is not None:
        _fail(f"{path}: the shared-load record {stray} names this run but is not beside it (a loaded run would be read "
              f"as quiet): move it to {path}{RECORD_SUFFIX}, or out of the results root if no load ran beside this run")
    comps = comparisons(data)
    if not comps:
        _fail(f"{path}: no phase paired by block (sequential-decisions.jsonl with pairing block): not an aa_paired run")
    man = path / "environment-manifest.json"
    manifest = json.loads(man.read_text()) if man.is_file() else {}
    return Run(path, comps, arm_table(data), load, manifest)


def _ci(d: Decision) -> str:
    if not math.isfinite(d.ci_low_pct):
        return "no interval"
    return f"{d.ci_low_pct:+.1f}%..{d.ci_high_pct:+.1f}%"


def _head(run: Run) -> list[str]:
    git = run.manifest.get("git", {})
    ld = run.load
    what = (f"loaded: {ld['procs']} {ld['kind']} load process(es), {ld.get('load_cores', math.nan):.2f} cores over "
            f"{ld.get('load_wall_s', math.nan):.0f} s ({ld['started_utc']} .. {ld.get('stopped_utc')})" if ld
            else "quiet (no shared-load record beside it)")
    return [f"## {run.path}", "",
            f"{what}; commit {str(git.get('revision', '?'))[:10]}{' (dirty)' if git.get('dirty') else ''}, case code "
            f"{str(run.manifest.get('case_code_sha256', '?'))[:12]}", ""]


def run_markdown(run: Run) -> list[str]:
    """One run's tables: the comparisons, then the arms."""
    out = _head(run)
    out += ["| comparison | kind | blocks | paired verdict, contended included | CI (level) | centre | as reported | "
            "= report's rule | 100 ln(a/b) per block | SD paired / unpaired | contended of the pair per block |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in run.comparisons:
        d = c.decision
        out.append(f"| {c.a} vs {c.b} | {c.kind} | {len(c.blocks)} | {d.verdict} | {_ci(d)} ({100 * d.confidence:.3g}%)"
                   f" | {d.center_pct:+.1f}% | {c.reported} | {'yes' if c.same_as_report else 'NO'} | "
                   f"{', '.join(f'{x:+.1f}' for x in c.log_ratios_pct)} | {c.sd_paired:.1f}% / {c.sd_unpaired:.1f}% | "
                   f"{', '.join(f'b{b}: {n}/2' for b, n in zip(c.blocks, c.pair_contended, strict=True))} |")
    out += ["", "| phase | arm | processes | contended | median foreign cores | median foreign share of host | "
            "median tok/s |", "|---|---|---|---|---|---|---|"]
    for r in run.arms.itertuples(index=False):
        out.append(f"| {r.phase} | {r.label} | {r.processes} | {r.contended} | {r.foreign_cores:.3f} | "
                   f"{100 * r.foreign_share:.1f}% | {r.tok_s:.1f} |")
    return out + [""]


def pooled_sd(cs: list[Comparison]) -> tuple[float, int]:
    """``(pooled SD of the per-block log ratios over the runs' comparisons (percent), its df)``: each run's paired SD
    weighted by its ``blocks - 1`` df."""
    parts = [(len(c.blocks) - 1, c.sd_paired) for c in cs if len(c.blocks) >= 2 and math.isfinite(c.sd_paired)]
    df = sum(n for n, _ in parts)
    return (math.sqrt(sum(n * s * s for n, s in parts) / df) if df else math.nan), df


def _ratios(cs: list[Comparison]) -> list[float]:
    return [x / y for c in cs for x, y in zip(c.a_vals, c.b_vals, strict=True)]


def _inside(x: Comparison, y: Comparison) -> bool:
    d = y.decision
    return math.isfinite(d.ci_low_pct) and d.ci_low_pct <= x.decision.center_pct <= d.ci_high_pct


def _by_key(runs: list[Run]) -> dict[tuple[str, str, str], list[Comparison]]:
    out: dict[tuple[str, str, str], list[Comparison]] = {}
    for r in runs:
        for c in r.comparisons:
            out.setdefault(c.key, []).append(c)
    return out


def _calls(cs: list[Comparison], verdicts: tuple[str, ...]) -> int:
    return sum(c.decision.verdict in verdicts for c in cs)


def _of_kind(runs: list[Run], kind: str) -> list[Comparison]:
    return [c for r in runs for c in r.comparisons if c.kind == kind]


def _processes(runs: list[Run], col: str) -> int:
    return sum(int(r.arms[col].sum()) for r in runs)


def criteria_c0_c2(loaded: list[Run], quiet: list[Run]) -> list[tuple[str, bool]]:
    """C0 (the load was seen), C1 (A/A calls under load), C2 (the control under load): ``(line, met)`` each."""
    n_l, c_l = _processes(loaded, "processes"), _processes(loaded, "contended")
    n_q, c_q = _processes(quiet, "processes"), _processes(quiet, "contended")
    c0 = bool(loaded) and bool(quiet) and c_l == n_l and c_q == 0
    aa, ctl = _of_kind(loaded, "A/A"), _of_kind(loaded, "control")
    calls, slow = _calls(aa, ("slower", "faster")), _calls(ctl, ("slower",))
    c1, c2 = bool(aa) and calls <= AA_MAX_CALLS, bool(ctl) and slow >= len(ctl) - 1
    return [(f"C0 the load was seen: loaded runs {c_l} of {n_l} processes contended (all needed), quiet runs {c_q} of "
             f"{n_q} (none allowed)", c0),
            (f"C1 A/A calls under load, contended included: {calls} of {len(aa)} (at most {AA_MAX_CALLS})", c1),
            (f"C2 control `slower` under load: {slow} of {len(ctl)} (at least {max(0, len(ctl) - 1)})", c2)]


def criterion_c3(ls: list[Comparison], qs: list[Comparison]) -> tuple[str, bool]:
    """C3 for one comparison: ``verdict_rule.decide`` on the loaded runs' per-block ratios against the quiet runs'
    (95%, the design's target as margin); met only when ``equivalent`` (the load moved the paired estimate by less
    than the target, shown)."""
    name = f"C3 the load's shift of {ls[0].a} vs {ls[0].b}"
    lr, qr = _ratios(ls), _ratios(qs)
    if len(lr) < 2 or len(qr) < 2:
        return f"{name}: fewer than 2 blocks on a side", False
    d = decide(lr, qr, margin_pct=ls[0].decision.margin_pct)
    return (f"{name} (per-block ratios a/b, {len(lr)} loaded vs {len(qr)} quiet blocks, decide; `equivalent` "
            f"needed): {d.text}", d.verdict == "equivalent")


def _c3_keys(lk: dict[tuple[str, str, str], list[Comparison]]) -> list[tuple[str, str, str]]:
    return [k for k in lk if k[0] in ("offload", "control") and not k[1].endswith(TWIN_SUFFIX)
            and not k[2].endswith(TWIN_SUFFIX)]


def criteria(loaded: list[Run], quiet: list[Run]) -> tuple[list[str], bool]:
    """The declared criteria C0-C3 (module docstring) as Markdown list lines, and whether all are met."""
    lk, qk = _by_key(loaded), _by_key(quiet)
    got = criteria_c0_c2(loaded, quiet)
    got += [criterion_c3(lk[k], qk[k]) for k in _c3_keys(lk) if k in qk]
    return [f"- {line}: {'met' if ok else 'NOT met'}" for line, ok in got], all(ok for _, ok in got)


def _pct(x: float) -> str:
    return f"{x:.1f}%" if math.isfinite(x) else "-"


def _verdicts(cs: list[Comparison]) -> str:
    return "; ".join(f"{c.decision.verdict} ({c.decision.center_pct:+.1f}%)" for c in cs) or "-"


def load_name(run: Run) -> str:
    """The declared load of a run: ``<kind> x<procs>`` (``quiet`` without a record)."""
    return f"{run.load['kind']} x{run.load['procs']}" if run.load else "quiet"


def comparison_table(loaded: list[Run], quiet: list[Run]) -> list[str]:
    """Per comparison: the verdicts and centres of each side, containment of the centres in the other side's
    intervals, the pooled per-block log-ratio SD of each side and their ratio (descriptive)."""
    out = ["| comparison | kind | loaded: verdict (centre) per run | quiet: verdict (centre) per run | loaded centres "
           "inside quiet CIs | quiet centres inside loaded CIs | per-block SD, pooled: loaded / quiet (df) | ratio |",
           "|---|---|---|---|---|---|---|---|"]
    lk, qk = _by_key(loaded), _by_key(quiet)
    for key in dict.fromkeys([*lk, *qk]):
        ls, qs = lk.get(key, []), qk.get(key, [])
        n = len(ls) * len(qs)
        li, qi = sum(_inside(x, y) for x in ls for y in qs), sum(_inside(y, x) for x in ls for y in qs)
        (sl, dl), (sq, dq) = pooled_sd(ls), pooled_sd(qs)
        ratio = f"{sl / sq:.2f}" if sq > 0 and math.isfinite(sl) else "-"
        out.append(f"| {key[1]} vs {key[2]} | {key[0]} | {_verdicts(ls)} | {_verdicts(qs)} | {li} of {n} | "
                   f"{qi} of {n} | {_pct(sl)} / {_pct(sq)} ({dl} / {dq}) | {ratio} |")
    return out


def _counts(name: str, group: list[Run]) -> str:
    aa, ctl = _of_kind(group, "A/A"), _of_kind(group, "control")
    base = [float(t) for r in group for t in r.arms.loc[r.arms["label"] == "baseline", "tok_s"]]
    return (f"{name}: A/A calls {_calls(aa, ('slower', 'faster'))} of {len(aa)}; control `slower` "
            f"{_calls(ctl, ('slower',))} of {len(ctl)}; baseline median tok/s per run "
            f"{', '.join(f'{b:.1f}' for b in base) or '-'}")


def summary_markdown(runs: list[Run]) -> list[str]:
    """Per declared load (``load_name``) against every quiet run: the comparison table, the counts, the criteria."""
    quiet = [r for r in runs if not r.loaded]
    out: list[str] = []
    groups: dict[str, list[Run]] = {}
    for r in runs:
        if r.loaded:
            groups.setdefault(load_name(r), []).append(r)
    for name, loaded in (groups or {"(no loaded run)": []}).items():
        out += [f"## Summary: load {name} ({len(loaded)} run(s): {', '.join(r.path.name for r in loaded) or '-'}) vs "
                f"quiet ({len(quiet)}: {', '.join(r.path.name for r in quiet) or '-'})", "",
                *comparison_table(loaded, quiet), "", _counts("loaded", loaded), "", _counts("quiet", quiet), ""]
        lines, ok = criteria(loaded, quiet)
        out += ["### The criteria declared before the data (docs/measurements/contention-pairing-2026-12-05.md)", "",
                *lines, "",
                (f"All met: under the declared load {name} the paired rule, contended processes included, kept its "
                 "A/A calls and the control's calls, and the load moved the paired estimates by less than the target."
                 if ok else "Not all met: a verdict resting on a contended process stays withheld."), ""]
    if any(not c.same_as_report for r in runs for c in r.comparisons):
        out.append("WARNING: a row differs from the report's own rule (column '= report's rule': NO).")
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _fail(message)


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="contention_pairing.py", description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    args = ap.parse_args(argv)
    seen: dict[Path, Path] = {}
    for p in args.run_dirs:
        if p.resolve() in seen:
            _fail(f"{p}: given twice (also as {seen[p.resolve()]}): each run directory counts once")
        seen[p.resolve()] = p
        if not p.is_dir() or not any(p.glob(f"*{RUNS_SUFFIX}")):
            _fail(f"{p}: not a run directory (no *{RUNS_SUFFIX} in it)")
    runs = [read_run(p) for p in args.run_dirs]
    out = ["# Contention and pairing: paired verdicts with contended processes included", ""]
    for r in runs:
        out += run_markdown(r)
    out += summary_markdown(runs)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
