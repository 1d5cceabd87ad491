"""Accuracy-equivalence verifier: do offload cases say exactly what the baseline says?

What is modelled: a directory of accuracy case files
(``*.result.json`` :class:`results_schema.records.accuracy.AccuracyResult` + the examples
JSONL each names), grouped by task. Every task needs a baseline and an offload case, and:

* counts -- formal mode: every case ran the full split (GSM8K 1319, GPQA
  Diamond 198) of a ``kind=full`` dataset without ``--limit``; limited mode
  (``--limit N``, smoke only): every case ran ``min(N, rows)`` examples. The mode
  is written into every output (JSON ``mode``/``mode_note``, Markdown banner).
* dataset_hash -- every case used the same dataset entry as the baseline, its SHA-256 equals
  the manifest's, and the file on disk (when present) still hashes to it.
* registered -- each case's recorded protocol spec is the spec registered under
  its name (``results_schema.records.protocols``; differing fields named), so a label
  such as ``qwen-chat-v1`` always means the published protocol and cases cannot
  drift together with their baseline.
* protocol -- a case scored under a different spec (SHA-256) than the baseline
  is refused: it is not compared at all (no identity or drop verdict), and the
  message names both protocols, both hashes and the differing fields.
* engine / model -- identical to the baseline field by field (the failing field is named).
* examples -- the examples file exists, hashes to the recorded SHA-256, holds
  rows 0..n-1 (a missing row is named), and its counts match the result.
* baseline_agreement -- the baseline runs of a task (an accuracy phase runs the
  baseline at least twice, rotated) are compared with each other
  (``analysis.accuracy.baselines``). When they agree nothing else changes. When they
  differ the baseline is not deterministic on this runtime: every output says so and
  lists the disagreeing examples, and offload cases are judged by ``noise_floor`` (a
  paired per-example comparison against the baseline-vs-baseline floor) instead of
  ``identity`` and ``drop``.
* identity -- the examples file SHA-256 equals the baseline's (first differing
  row and field named otherwise).
* drop -- baseline accuracy minus case accuracy is at most ``max_accuracy_drop`` (per task; a fraction of
  accuracy, 0.01 = 1 percentage point; default 0: exactly zero or less). The tolerance relaxes this rule
  only: identity is still required. It is written into the JSON, Markdown and CSV. Where the baselines
  disagree, ``noise_floor`` replaces identity and drop: a paired exact McNemar test on the items
  (``analysis.accuracy.baselines.paired_drop``; its counts and p in every output).
* backend -- the ``offload_backend`` each case recorded equals the one the run's ``plan.json`` gave it
  (``<run_dir>/records/<phase>`` with ``<run_dir>/plan.json``); a stand-alone directory has no plan:
  the check is then skipped, saying so.
* gold_balance (GPQA) -- each gold letter A-D holds 15%-35% of the questions
  (checked when n >= 100 or in formal mode; skipped with counts otherwise).
* evidence -- an offload case's runtime evidence shows wrapped layers and
  offloaded bytes for its (G, N); required in formal mode.

What is deliberately not modelled: statistical tolerance beyond the baselines' own
disagreement (where the baselines agree, greedy decoding must match exactly), launching processes.

Outputs: ``accuracy-verification.json`` (``AccuracyVerification``), ``.md`` and ``.csv`` (one row per
case x task, ``analysis.accuracy.table``). The JSON and Markdown also show the first examples of each task as
text: question, gold, the baseline's reply beside each offload case's (``analysis.accuracy.samples``).

CLI: ``python -m analysis.accuracy.verifier RUN_DIR [--limit N] [--manifest PATH] [--max-accuracy-drop F]
[--report-dir DIR] [--no-write]`` (exit 0 = passed, 1 = failed, 2 = unreadable input or a bad option).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.accuracy.checks import (
    Checks,
    check_backend,
    check_counts,
    check_dataset,
    check_drop,
    check_evidence,
    check_gold_balance,
    check_registered,
    check_same,
    first_difference,
    load_examples,
    planned_backends,
    refuse_mixed_protocols,
    wilson_interval,
)
from analysis.accuracy.baselines import NOISE_NOTE, PairedDrop, add_agreement_check, agreement, check_vs_floor
from analysis.accuracy.samples import sample_lines, task_samples
from analysis.accuracy.table import REPORT_CSV, paired_cell, write_csv
from results_schema.records.accuracy import (
    AccuracyExample,
    AccuracyResult,
    AccuracyVerification,
    BaselineAgreement,
    CaseSummary,
    SampleExample,
    Task,
)
from results_schema.codec.files import write_text_atomic
from results_schema.rules.number_rule import NumberRange
from results_schema.rules.accuracy_rule import MAX_ACCURACY_DROP
from results_schema.codec.io import RecordError, read_json, write_json

REPORT_JSON = "accuracy-verification.json"
REPORT_MD = "accuracy-verification.md"


def mode_note(limit: int | None) -> str:
    """The label printed with every verifier output."""
    if limit is None:
        return "FORMAL: full GSM8K (1319) / GPQA Diamond (198) counts required"
    return f"LIMITED (--limit {limit}): smoke run only, NOT formal accuracy evidence"


def load_results(run_dir: Path | str) -> list[tuple[AccuracyResult, Path]]:
    """Every ``*.result.json`` under ``run_dir`` (recursive), strictly validated, sorted by path.

    Raises:
        RecordError: a result file fails validation (names the file and field).
    """
    paths = sorted(Path(run_dir).rglob("*.result.json"))
    return [(read_json(p, AccuracyResult), p) for p in paths]


Case = tuple[AccuracyResult, Path]


ROW_LIMIT_RANGE = NumberRange(low=1, unit="rows per task")
"""Where ``--limit`` has a meaning: a whole number of rows >= 1 per task."""


def check_max_accuracy_drop(value: float) -> float:
    """``max_accuracy_drop`` as a float in [0, 1] (a fraction of accuracy: 0.01 = 1 percentage point; the one range,
    ``results_schema.rules.accuracy_rule.MAX_ACCURACY_DROP``, that the config's field has too).

    Raises:
        ValueError: naming the value and what is allowed (negative, above 1, NaN or not a number).
    """
    try:
        drop = float(value)
    except (TypeError, ValueError):
        drop = float("nan")
    if isinstance(value, bool) or not MAX_ACCURACY_DROP.contains(drop):
        raise ValueError(f"max_accuracy_drop = {value!r} is invalid: must be {MAX_ACCURACY_DROP.allowed()}")
    return drop


@dataclass(frozen=True)
class _Rules:
    """What every case of one verification is held to."""

    limit: int | None
    manifest: Path | None
    max_accuracy_drop: float
    planned: dict[str, str] | None
    plan_path: Path | None


def verify(run_dir: Path | str, *, limit: int | None = None, manifest: Path | str | None = None,
           max_accuracy_drop: float = 0.0) -> AccuracyVerification:
    """Verify an accuracy run directory.

    Args:
        run_dir: directory searched recursively for ``*.result.json``; when it is
            ``<run_dir>/records/<phase>`` next to a ``plan.json``, each case's backend is checked against it.
        limit: None = formal mode; N = limited (smoke) mode.
        manifest: dataset manifest to check hashes against; default = the path each result recorded.
        max_accuracy_drop: tolerance of the drop rule, a fraction of accuracy in [0, 1] (0 = no drop).

    Returns:
        The report; ``passed`` is False when any check failed.

    Raises:
        RecordError: a result file (or ``plan.json``) is not valid.
        ValueError: ``max_accuracy_drop`` outside [0, 1].
    """
    run_dir = Path(run_dir)
    plan_path, planned = planned_backends(run_dir)
    rules = _Rules(limit=limit, manifest=Path(manifest) if manifest is not None else None,
                   max_accuracy_drop=check_max_accuracy_drop(max_accuracy_drop), planned=planned, plan_path=plan_path)
    checks = Checks()
    loaded = load_results(run_dir)
    summaries: list[CaseSummary] = []
    if not loaded:
        checks.add("cases", None, None, False, f"no *.result.json under {run_dir}")
    agreements: list[BaselineAgreement] = []
    samples: list[SampleExample] = []
    for task in sorted({r.task for r, _ in loaded}):
        verified = _verify_task(checks, task, [(r, p) for r, p in loaded if r.task == task], rules)
        summaries += verified.summaries
        agreements += [verified.agreement] if verified.agreement is not None else []
        samples += verified.samples
    _check_repeats(checks, loaded, {a.task for a in agreements if a.judged_by == "noise_floor"})
    failed = {(c.task, c.label) for c in checks.items if c.status == "fail"}
    summaries = [s.model_copy(update={"verdict": "fail" if (s.task, s.label) in failed else "pass"})
                 for s in summaries]
    passed = bool(loaded) and all(c.status != "fail" for c in checks.items)
    return AccuracyVerification(
        mode="formal" if limit is None else "limited",
        mode_note=mode_note(limit),
        limit=limit,
        run_dir=str(run_dir.resolve()),
        passed=passed,
        cases=tuple(summaries),
        checks=tuple(checks.items),
        max_accuracy_drop=rules.max_accuracy_drop,
        plan_path=str(plan_path) if plan_path is not None else None,
        baselines=tuple(agreements),
        samples=tuple(samples),
    )


def _check_repeats(checks: Checks, loaded: list[Case], noisy: set[Task]) -> None:
    """Repeats of one offload case must have identical examples (greedy decoding) where the task's baselines agree.

    Baseline repeats are compared with each other by ``analysis.accuracy.baselines.agreement``; where they
    disagree (``noisy`` tasks) an offload case's repeats may differ too, and the check is skipped, saying why.
    """
    repeats: dict[tuple[Task, str], list[Case]] = {}
    for r, p in loaded:
        if r.implementation != "baseline":
            repeats.setdefault((r.task, r.label), []).append((r, p))
    for (task, label), group in repeats.items():
        if len(group) > 1:
            shas = {r.examples_sha256 for r, _ in group}
            msg = (f"case {label} ({task}): {len(group)} repeats, "
                   + ("identical examples" if len(shas) == 1 else
                      f"{len(shas)} different examples hashes across {[str(p.parent.name) for _, p in group]}"))
            if task in noisy and len(shas) > 1:
                checks.add("repeats", task, label, None, f"{msg} (not required: {NOISE_NOTE})")
            else:
                checks.add("repeats", task, label, len(shas) == 1, msg)


def _common_checks(checks: Checks, result: AccuracyResult, base: AccuracyResult, rules: _Rules) -> bool:
    """Counts, dataset, registry and backend checks; False when the case is refused (another protocol)."""
    check_counts(checks, result, rules.limit)
    check_dataset(checks, result, base, rules.manifest)
    check_registered(checks, result)
    check_backend(checks, result, rules.planned, rules.plan_path)
    return result is base or not refuse_mixed_protocols(checks, result, base)


@dataclass(frozen=True)
class _TaskVerified:
    """What one task adds to the report."""

    summaries: list[CaseSummary]
    agreement: BaselineAgreement | None
    samples: tuple[SampleExample, ...] = ()


def _verify_task(checks: Checks, task: Task, group: list[Case], rules: _Rules) -> _TaskVerified:
    """Check every case of one task against its baseline runs: the comparable cases' summaries, the agreement and
    the first examples as text (``analysis.accuracy.samples``)."""
    bases = [(r, p) for r, p in group if r.implementation == "baseline"]
    others = [(r, p) for r, p in group if r.implementation != "baseline"]
    base_labels = sorted({r.label for r, _ in bases})
    if len(base_labels) != 1:
        checks.add("cases", task, None, False,
                   f"{task}: expected exactly one baseline case, found {len(base_labels)} {base_labels}")
        return _TaskVerified([], None)
    if not others:
        checks.add("cases", task, None, False, f"{task}: no offload case to compare with the baseline")
    else:
        checks.add("cases", task, None, True,
                   f"{task}: baseline ({len(bases)} run(s)) + {len(others)} offload case(s): {[r.label for r, _ in others]}")
    base = bases[0][0]
    refused: set[int] = set()
    base_runs = []
    for result, path in bases:
        if not _common_checks(checks, result, base, rules):
            refused.add(id(result))
            continue
        base_runs.append((result, path, _check_case(checks, result, path, base, rules.limit)))
    base_rows = base_runs[0][2]
    if task == "gpqa" and base_rows is not None:
        check_gold_balance(checks, task, base_rows, rules.limit)
    agree = agreement(task, base_runs)
    add_agreement_check(checks, agree)
    paired: dict[int, PairedDrop | None] = {}
    compared: list[tuple[AccuracyResult, list[AccuracyExample] | None]] = []
    for result, path in others:
        if not _common_checks(checks, result, base, rules):
            refused.add(id(result))
            continue  # not comparable: no identity, drop or evidence verdict for this case
        rows = _check_case(checks, result, path, base, rules.limit)
        compared.append((result, rows))
        if agree.judged_by == "noise_floor":
            paired[id(result)] = check_vs_floor(checks, result, rows, agree, [r for _r, _p, r in base_runs],
                                                rules.max_accuracy_drop)
        else:
            _check_vs_baseline(checks, result, rows, base, base_rows)
            check_drop(checks, result, base, rules.max_accuracy_drop)
    return _TaskVerified([_case_summary(result, base, paired.get(id(result))) for result, _ in bases + others
                          if id(result) not in refused], agree, task_samples(task, (base, base_rows), compared))


def _check_case(checks: Checks, result: AccuracyResult, path: Path, base: AccuracyResult,
                limit: int | None) -> list[AccuracyExample] | None:
    """Engine, model and evidence checks of one comparable case; its examples (None when unusable)."""
    task = result.task
    if result is not base:
        check_same(checks, "engine", result, base, base.engine, result.engine, "engine")
        check_same(checks, "model", result, base, base.model_sha256sums_sha256,
                   result.model_sha256sums_sha256, "model_sha256sums_sha256")
    if result.engine_name != "vllm":
        checks.add("engine", task, result.label, False if limit is None else None,
                   f"case {result.label} ({task}) ran on the {result.engine_name!r} test engine"
                   + (", which is never formal evidence" if limit is None else " (limited mode)"))
    check_evidence(checks, result, limit)
    return load_examples(checks, result, path)


def _check_vs_baseline(checks: Checks, result: AccuracyResult, rows: list[AccuracyExample] | None,
                       base: AccuracyResult, base_rows: list[AccuracyExample] | None) -> None:
    """Identity of the examples with the baseline's (the drop rule is ``check_drop``)."""
    task = result.task
    if result.examples_sha256 == base.examples_sha256:
        checks.add("identity", task, result.label, True,
                   f"examples sha256 {result.examples_sha256[:12]}... identical to baseline")
    else:
        detail = first_difference(base_rows, rows) if (base_rows is not None and rows is not None) else ""
        checks.add("identity", task, result.label, False,
                   f"examples of case {result.label} ({task}) differ from baseline "
                   f"({result.examples_sha256[:12]}... vs {base.examples_sha256[:12]}...) {detail}".rstrip())


def _case_summary(result: AccuracyResult, base: AccuracyResult, paired: PairedDrop | None) -> CaseSummary:
    return CaseSummary(
        paired_lost=paired.lost if paired else None, paired_gained=paired.gained if paired else None,
        paired_floor=paired.floor if paired else None, mcnemar_p=paired.p if paired else None,
        label=result.label, implementation=result.implementation, task=result.task,
        protocol_name=result.protocol_name, protocol_sha256=result.protocol_sha256,
        num_examples=result.num_examples, correct=result.correct, unparsable=result.unparsable,
        accuracy=result.accuracy, drop_vs_baseline=base.accuracy - result.accuracy,
        examples_sha256=result.examples_sha256,
        identical_to_baseline=result.examples_sha256 == base.examples_sha256,
        offload_group_size=result.offload.offload_group_size, offload_num_in_group=result.offload.offload_num_in_group,
        offload_prefetch_step=result.offload.offload_prefetch_step, offload_backend=result.offload.offload_backend,
    )


def render_markdown(report: AccuracyVerification) -> str:
    """Markdown report; the mode banner is its first line."""
    lines = [f"# Accuracy verification -- {report.mode_note}", "",
             f"Result: **{'PASSED' if report.passed else 'FAILED'}** ({report.mode} mode)", "",
             f"Tolerance: max_accuracy_drop = {report.max_accuracy_drop:.4f} (fraction of accuracy; a case passes "
             "the drop rule iff baseline - case accuracy <= it, per task; identity still required)", "",
             "Backends: " + (f"checked against {report.plan_path}" if report.plan_path else
                             "not checked (no plan.json: stand-alone directory)"), "",
             *baseline_lines(report),
             "| task | case | impl | backend | protocol | n | correct | unparsable | accuracy | 95% interval (Wilson) "
             "| drop | identical | paired lost / gained (McNemar p) | verdict |",
             "|---|---|---|---|---|---:|---:|---:|---:|---|---:|---|---|---|"]
    for c in report.cases:
        low, high = wilson_interval(c.correct, c.num_examples)
        lines.append(f"| {c.task} | {c.label} | {c.implementation} | {c.offload_backend} | {c.protocol_name} "
                     f"`{c.protocol_sha256[:12]}` | {c.num_examples} | {c.correct} | "
                     f"{c.unparsable} | {c.accuracy:.4f} | [{low:.4f}, {high:.4f}] | {c.drop_vs_baseline:+.4f} | "
                     f"{'yes' if c.identical_to_baseline else 'NO'} | {paired_cell(c)} | {c.verdict.upper()} |")
    failed = [c for c in report.checks if c.status == "fail"]
    skipped = [c for c in report.checks if c.status == "skipped"]
    lines += ["", *sample_lines(report.samples),
              f"Checks: {sum(c.status == 'pass' for c in report.checks)} passed, {len(failed)} failed, "
              f"{len(skipped)} skipped."]
    for check in failed:
        lines.append(f"- FAIL {check.name} [{check.task or '-'} / {check.label or '-'}]: {check.message}")
    for check in skipped:
        lines.append(f"- skipped {check.name} [{check.task or '-'} / {check.label or '-'}]: {check.message}")
    lines += ["", f"_{report.mode_note}_"]
    return "\n".join(lines)


def baseline_lines(report: AccuracyVerification) -> list[str]:
    """Markdown lines saying, per task, whether the baseline runs agreed and how offload cases were judged."""
    out = []
    for a in report.baselines:
        if a.judged_by == "noise_floor":
            out.append(f"Baselines ({a.task}): **{NOISE_NOTE}**: {a.runs} runs differ on "
                       f"{len(a.differing_examples)} example(s) {list(a.differing_examples[:20])}; accuracies "
                       + ", ".join(f"{x:.4f}" for x in a.accuracies) + ".")
        elif a.judged_by == "identity":
            out.append(f"Baselines ({a.task}): {a.runs} runs agree (identical examples): offload cases judged by "
                       "identity.")
        else:
            out.append(f"Baselines ({a.task}): one run (determinism not checked): offload cases judged by identity.")
    return out + [""] if out else out


def write_report(run_dir: Path | str, report: AccuracyVerification) -> tuple[Path, Path]:
    """Write ``accuracy-verification.json``, ``.md`` and ``.csv`` into ``run_dir`` (atomic; replaces older ones).

    Returns:
        ``(json path, markdown path)``; the CSV is ``run_dir / REPORT_CSV``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = run_dir / REPORT_JSON, run_dir / REPORT_MD
    write_json(json_path, report)
    write_text_atomic(md_path, render_markdown(report) + "\n")
    write_csv(run_dir / REPORT_CSV, report)
    return json_path, md_path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.accuracy.verifier RUN_DIR [--limit N] [--manifest PATH] [--no-write]``."""
    parser = argparse.ArgumentParser(prog="python -m analysis.accuracy.verifier", description="Verify an accuracy matrix.")
    parser.add_argument("run_dir")
    parser.add_argument("--limit", type=ROW_LIMIT_RANGE.arg_type(integer=True), default=None,
                        help="limited (smoke) mode: cases ran min(N, rows) examples; omit for formal mode")
    parser.add_argument("--manifest", default=None, help="dataset manifest (default: the one each case recorded)")
    parser.add_argument("--max-accuracy-drop", default="0", metavar="F",
                        help="drop rule tolerance: a fraction of accuracy in [0, 1] (0.01 = 1 percentage point); "
                             "default 0 (no drop allowed)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write the report files")
    parser.add_argument("--report-dir", default=None,
                        help="where accuracy-verification.{json,md,csv} go (default: RUN_DIR)")
    ns = parser.parse_args(argv)
    try:
        drop = check_max_accuracy_drop(ns.max_accuracy_drop)
    except ValueError as exc:
        print(f"error: --max-accuracy-drop: {exc}", file=sys.stderr)
        return 2
    try:
        report = verify(ns.run_dir, limit=ns.limit, manifest=ns.manifest, max_accuracy_drop=drop)
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not ns.no_write:
        write_report(ns.report_dir or ns.run_dir, report)
    print(render_markdown(report))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
