"""Accuracy-equivalence verifier: do offload cases say exactly what the baseline says?

What is modelled: a directory of accuracy case files
(``*.result.json`` :class:`results_schema.accuracy.AccuracyResult` + the examples
JSONL each names), grouped by task. For every task there must be exactly one
baseline and at least one offload case, and:

* counts -- formal mode: every case ran the full split (GSM8K 1319, GPQA
  Diamond 198) of a ``kind=full`` dataset without ``--limit``; limited mode
  (``--limit N``, smoke only): every case ran ``min(N, rows)`` examples. The mode
  is written into every output (JSON ``mode``/``mode_note``, Markdown banner).
* dataset_hash -- every case used the same dataset entry as the baseline, its
  SHA-256 equals the manifest's, and the file on disk (when present) still hashes
  to it.
* registered -- each case's recorded protocol spec is the spec registered under
  its name (``results_schema.protocols``; differing fields named), so a label
  such as ``qwen-chat-v1`` always means the published protocol and cases cannot
  drift together with their baseline.
* protocol -- a case scored under a different spec (SHA-256) than the baseline
  is refused: it is not compared at all (no identity or drop verdict), and the
  message names both protocols, both hashes and the differing fields.
* engine / model -- identical to the baseline field by field (the failing field is named).
* examples -- the examples file exists, hashes to the recorded SHA-256, holds
  rows 0..n-1 (a missing row is named), and its counts match the result.
* identity -- the examples file SHA-256 equals the baseline's (first differing
  row and field named otherwise).
* drop -- baseline accuracy minus case accuracy is exactly zero or less.
* gold_balance (GPQA) -- each gold letter A-D holds 15%-35% of the questions
  (checked when n >= 100 or in formal mode; skipped with counts otherwise).
* evidence -- an offload case's runtime evidence shows wrapped layers and
  offloaded bytes for its (G, N); required in formal mode.

What is deliberately not modelled: statistical tolerance (greedy decoding must
match exactly; any difference is a failure), launching processes.

CLI: ``python -m analysis.accuracy RUN_DIR [--limit N] [--manifest PATH] [--report-dir DIR] [--no-write]``
(exit 0 = passed, 1 = failed, 2 = unreadable input).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from results_schema.accuracy import (
    FULL_ROW_COUNTS,
    AccuracyExample,
    AccuracyResult,
    AccuracyVerification,
    CaseSummary,
    DatasetManifest,
    VerifyCheck,
)
from results_schema.io import RecordError, iter_jsonl, read_json, write_json
from results_schema.protocols import REGISTRY, registered_names

GOLD_BALANCE_MIN, GOLD_BALANCE_MAX = 0.15, 0.35
"""Allowed share of each gold letter over the GPQA set (ARCHITECTURE cases: 15%-35%)."""
GOLD_BALANCE_MIN_N = 100
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


def _diff(a: BaseModel | object, b: BaseModel | object, prefix: str = "") -> list[tuple[str, object, object]]:
    """Dotted paths where two (nested) pydantic models / values differ."""
    if isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b):
        out: list[tuple[str, object, object]] = []
        for name in type(a).model_fields:
            out += _diff(getattr(a, name), getattr(b, name), f"{prefix}{name}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _Checks:
    def __init__(self) -> None:
        self.items: list[VerifyCheck] = []

    def add(self, name: str, task: str | None, label: str | None, ok: bool | None, message: str) -> bool:
        status = "skipped" if ok is None else ("pass" if ok else "fail")
        self.items.append(VerifyCheck(name=name, task=task, label=label, status=status, message=message))  # type: ignore[arg-type]
        return bool(ok)


def _load_examples(
    checks: _Checks, result: AccuracyResult, result_path: Path
) -> list[AccuracyExample] | None:
    """Load and check one case's examples file; None when unusable (a failure is recorded)."""
    name, task, label = "examples", result.task, result.label
    path = result_path.parent / result.examples_path
    if not path.is_file():
        checks.add(name, task, label, False, f"examples file missing: {path}")
        return None
    actual = _sha256(path)
    if actual != result.examples_sha256:
        checks.add(name, task, label, False,
                   f"examples file {path} sha256 {actual} != {result.examples_sha256} recorded in the result")
        return None
    try:
        rows = [row for _, row in iter_jsonl(path, AccuracyExample)]
    except RecordError as exc:
        checks.add(name, task, label, False, f"invalid examples row: {exc}")
        return None
    indices = [r.index for r in rows]
    expected = list(range(result.num_examples))
    if indices != expected:
        missing = sorted(set(expected) - set(indices))
        extra = sorted(set(indices) - set(expected))
        dup = sorted(i for i, c in Counter(indices).items() if c > 1)
        parts = []
        if missing:
            parts.append(f"missing example row index {', '.join(map(str, missing[:10]))}")
        if extra:
            parts.append(f"unexpected row index {', '.join(map(str, extra[:10]))}")
        if dup:
            parts.append(f"duplicate row index {', '.join(map(str, dup[:10]))}")
        if not parts:
            parts.append("rows out of order")
        checks.add(name, task, label, False,
                   f"examples {path.name}: {'; '.join(parts)} (expected rows 0..{result.num_examples - 1}, "
                   f"found {len(rows)})")
        return None
    correct = sum(r.correct for r in rows)
    unparsable = sum(r.unparsable for r in rows)
    tokens = sum(r.output_tokens for r in rows)
    if (correct, unparsable, tokens) != (result.correct, result.unparsable, result.output_tokens):
        checks.add(name, task, label, False,
                   f"examples {path.name} count correct={correct} unparsable={unparsable} output_tokens={tokens}, "
                   f"result says {result.correct}/{result.unparsable}/{result.output_tokens}")
        return None
    checks.add(name, task, label, True, f"{len(rows)} rows 0..{len(rows) - 1}, sha256 and counts match")
    return rows


def _check_dataset(
    checks: _Checks, result: AccuracyResult, base: AccuracyResult, manifest_override: Path | None
) -> None:
    task, label = result.task, result.label
    diffs = _diff(base.dataset, result.dataset)
    if diffs:
        field, b, c = diffs[0]
        checks.add("dataset_hash", task, label, False,
                   f"dataset differs from baseline in case {label} ({task}): dataset.{field} baseline={b!r} "
                   f"case={c!r}")
        return
    manifest_path = manifest_override or Path(result.dataset_manifest_path)
    if not manifest_path.is_file():
        checks.add("dataset_hash", task, label, False,
                   f"dataset manifest {manifest_path} not found: cannot verify dataset hash of case {label}")
        return
    try:
        manifest = DatasetManifest.model_validate_json(manifest_path.read_bytes())
        entry = manifest.entry(result.dataset.name)
    except (ValueError, KeyError) as exc:
        checks.add("dataset_hash", task, label, False, f"dataset manifest {manifest_path}: {exc}")
        return
    if entry.sha256 != result.dataset.sha256:
        checks.add("dataset_hash", task, label, False,
                   f"dataset hash mismatch in case {label} ({task}): case recorded {result.dataset.sha256}, "
                   f"manifest {manifest_path} declares {entry.sha256} for {entry.name!r}")
        return
    data_file = manifest_path.parent / entry.path
    if data_file.is_file():
        actual = _sha256(data_file)
        if actual != entry.sha256:
            checks.add("dataset_hash", task, label, False,
                       f"dataset hash mismatch: file {data_file} is {actual}, manifest declares {entry.sha256}")
            return
    checks.add("dataset_hash", task, label, True, f"{entry.name} sha256 {entry.sha256[:12]}... matches manifest")


def _check_counts(checks: _Checks, result: AccuracyResult, limit: int | None) -> None:
    task, label = result.task, result.label
    if limit is None:
        full = FULL_ROW_COUNTS[task]
        problems = []
        if result.limit is not None:
            problems.append(f"was run with --limit {result.limit}")
        if result.dataset.kind != "full":
            problems.append(f"used {result.dataset.kind} dataset {result.dataset.name!r}")
        if result.num_examples != full:
            problems.append(f"has {result.num_examples} examples, formal mode needs {full}")
        ok = not problems
        checks.add("counts", task, label, ok,
                   f"{result.num_examples} == {full} full-split examples" if ok
                   else f"case {label} ({task}) " + "; ".join(problems) + " (use --limit for a smoke run)")
    else:
        expected = min(limit, result.dataset.rows)
        ok = result.num_examples == expected
        checks.add("counts", task, label, ok,
                   f"{result.num_examples} examples (limited mode, expected {expected})" if ok
                   else f"case {label} ({task}) has {result.num_examples} examples, limited mode expects "
                        f"min(--limit {limit}, rows {result.dataset.rows}) = {expected}")


def _check_same(checks: _Checks, name: str, result: AccuracyResult, base: AccuracyResult,
                a: object, b: object, what: str) -> None:
    diffs = _diff(a, b)
    if diffs:
        shown = "; ".join(f"{what}.{f} baseline={x!r} case={y!r}" for f, x, y in diffs[:5])
        checks.add(name, result.task, result.label, False,
                   f"{name} differs from baseline in case {result.label} ({result.task}): {shown}")
    else:
        checks.add(name, result.task, result.label, True, f"{what} identical to baseline")


def _check_evidence(checks: _Checks, result: AccuracyResult, limit: int | None) -> None:
    task, label, ev = result.task, result.label, result.evidence
    if ev is None:
        if result.offload.enabled:
            checks.add("evidence", task, label, False if limit is None else None,
                       f"case {label} ({task}) has no runtime offload evidence"
                       + ("" if limit is None else " (limited mode: not required)"))
        return
    if result.offload.enabled:
        ok = (ev.wrapped_count > 0 and ev.offloaded_bytes > 0
              and ev.offload_group_size == result.offload.offload_group_size
              and ev.offload_num_in_group == result.offload.offload_num_in_group)
        checks.add("evidence", task, label, ok,
                   f"evidence: {ev.wrapped_count} layers {list(ev.wrapped_layers)} wrapped, "
                   f"{ev.offloaded_bytes} bytes offloaded by {ev.offloader_class} "
                   f"(G={ev.offload_group_size}, N={ev.offload_num_in_group}; requested "
                   f"G={result.offload.offload_group_size}, N={result.offload.offload_num_in_group})")
    else:
        checks.add("evidence", task, label, ev.wrapped_count == 0 and ev.offloaded_bytes == 0,
                   f"baseline evidence: {ev.wrapped_count} wrapped, {ev.offloaded_bytes} bytes offloaded")


def _first_difference(a: list[AccuracyExample], b: list[AccuracyExample]) -> str:
    for x, y in zip(a, b):
        d = _diff(x, y)
        if d:
            fields = ", ".join(f for f, _, _ in d)
            return f"first difference at row {x.index} ({x.example_id}): {fields}"
    return f"row counts differ ({len(a)} vs {len(b)})"


def _check_gold_balance(checks: _Checks, task: str, rows: list[AccuracyExample], limit: int | None) -> None:
    counts = Counter(r.gold for r in rows)
    n = len(rows)
    shares = {k: counts.get(k, 0) / n for k in "ABCD"}
    text = ", ".join(f"{k}={counts.get(k, 0)} ({shares[k]:.0%})" for k in "ABCD")
    if limit is not None and n < GOLD_BALANCE_MIN_N:
        checks.add("gold_balance", task, None, None,
                   f"gold letters {text}; not checked for n={n} < {GOLD_BALANCE_MIN_N} (limited mode)")
        return
    ok = all(GOLD_BALANCE_MIN <= s <= GOLD_BALANCE_MAX for s in shares.values())
    checks.add("gold_balance", task, None, ok,
               f"gold letters {text}" + ("" if ok else
                                         f": each must be within {GOLD_BALANCE_MIN:.0%}-{GOLD_BALANCE_MAX:.0%}"))


def _check_registered(checks: _Checks, result: AccuracyResult) -> None:
    """The recorded spec must be the one registered under its name (a name means one spec, always)."""
    task, label, spec = result.task, result.label, result.protocol
    if spec.name not in REGISTRY or task not in REGISTRY[spec.name]:
        checks.add("registered", task, label, False,
                   f"case {label} ({task}) was scored under protocol {spec.name!r}, which is not registered "
                   f"(registered: {', '.join(registered_names())})")
        return
    want = REGISTRY[spec.name][task]
    diffs = _diff(want, spec)
    if diffs:
        shown = "; ".join(f"{f} registered={x!r} recorded={y!r}" for f, x, y in diffs[:5])
        checks.add("registered", task, label, False,
                   f"case {label} ({task}) claims protocol {spec.name} but its spec (sha256 "
                   f"{result.protocol_sha256[:12]}...) is not the registered one ({want.sha256()[:12]}...): {shown}")
    else:
        checks.add("registered", task, label, True, f"{spec.name} spec sha256 {want.sha256()[:12]}... as registered")


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refuse_mixed_protocols(checks: _Checks, result: AccuracyResult, base: AccuracyResult) -> bool:
    """Record the refusal and return True when ``result`` was scored under another spec than ``base``."""
    if result.protocol_sha256 == base.protocol_sha256:
        checks.add("protocol", result.task, result.label, True,
                   f"same protocol as baseline: {result.protocol_name} (sha256 {result.protocol_sha256[:12]}...)")
        return False
    diffs = _diff(base.protocol, result.protocol)
    shown = "; ".join(f"{f} baseline={_short(x)} case={_short(y)}" for f, x, y in diffs[:5])
    if len(diffs) > 5:
        shown += f" (+{len(diffs) - 5} more: {', '.join(f for f, _, _ in diffs[5:])})"
    checks.add("protocol", result.task, result.label, False,
               f"refusing to compare case {result.label} ({result.task}) with baseline {base.label}: they were scored "
               f"under different protocol specs (baseline {base.protocol_name} sha256 {base.protocol_sha256[:12]}..., "
               f"case {result.protocol_name} sha256 {result.protocol_sha256[:12]}...); differing: {shown}. "
               "Re-run every case of the comparison under one protocol")
    return True


def verify(run_dir: Path | str, *, limit: int | None = None, manifest: Path | str | None = None) -> AccuracyVerification:
    """Verify an accuracy run directory.

    Args:
        run_dir: directory searched recursively for ``*.result.json``.
        limit: None = formal mode; N = limited (smoke) mode.
        manifest: dataset manifest to check hashes against; default = the path each result recorded.

    Returns:
        The report; ``passed`` is False when any check failed.

    Raises:
        RecordError: a result file is not a valid AccuracyResult.
    """
    run_dir = Path(run_dir)
    manifest_override = Path(manifest) if manifest is not None else None
    checks = _Checks()
    loaded = load_results(run_dir)
    summaries: list[CaseSummary] = []
    if not loaded:
        checks.add("cases", None, None, False, f"no *.result.json under {run_dir}")
    repeats: dict[tuple[str, str], list[tuple[AccuracyResult, Path]]] = {}
    for r, p in loaded:
        repeats.setdefault((r.task, r.label), []).append((r, p))
    for (task, label), group in repeats.items():
        if len(group) > 1:  # repeats of one case (runners.matrix repeats > 1): greedy => identical
            shas = {r.examples_sha256 for r, _ in group}
            checks.add("repeats", task, label, len(shas) == 1,
                       f"case {label} ({task}): {len(group)} repeats, "
                       + ("identical examples" if len(shas) == 1 else
                          f"{len(shas)} different examples hashes across "
                          f"{[str(p.parent.name) for _, p in group]}"))
    for task in sorted({r.task for r, _ in loaded}):
        group = [(r, p) for r, p in loaded if r.task == task]
        bases = [(r, p) for r, p in group if r.implementation == "baseline"]
        others = [(r, p) for r, p in group if r.implementation != "baseline"]
        base_labels = sorted({r.label for r, _ in bases})
        if len(base_labels) != 1:
            checks.add("cases", task, None, False,
                       f"{task}: expected exactly one baseline case, found {len(base_labels)} {base_labels}")
            continue
        if not others:
            checks.add("cases", task, None, False, f"{task}: no offload case to compare with the baseline")
        else:
            checks.add("cases", task, None, True,
                       f"{task}: baseline + {len(others)} offload case(s): {[r.label for r, _ in others]}")
        others = others + bases[1:]  # baseline repeats are compared with the first like any case
        base, base_path = bases[0]
        base_rows = None
        refused: set[int] = set()
        for result, path in [bases[0]] + others:
            _check_counts(checks, result, limit)
            _check_dataset(checks, result, base, manifest_override)
            _check_registered(checks, result)
            if result is not base:
                if _refuse_mixed_protocols(checks, result, base):
                    refused.add(id(result))
                    continue  # not comparable: no identity, drop or evidence verdict for this case
                _check_same(checks, "engine", result, base, base.engine, result.engine, "engine")
                _check_same(checks, "model", result, base, base.model_sha256sums_sha256,
                            result.model_sha256sums_sha256, "model_sha256sums_sha256")
            if result.engine_name != "vllm":
                checks.add("engine", task, result.label, False if limit is None else None,
                           f"case {result.label} ({task}) ran on the {result.engine_name!r} test engine"
                           + (", which is never formal evidence" if limit is None else " (limited mode)"))
            _check_evidence(checks, result, limit)
            rows = _load_examples(checks, result, path)
            if result is base:
                base_rows = rows
                if task == "gpqa" and rows is not None:
                    _check_gold_balance(checks, task, rows, limit)
                continue
            identical = result.examples_sha256 == base.examples_sha256
            if identical:
                checks.add("identity", task, result.label, True,
                           f"examples sha256 {result.examples_sha256[:12]}... identical to baseline")
            else:
                detail = _first_difference(base_rows, rows) if (base_rows is not None and rows is not None) else ""
                checks.add("identity", task, result.label, False,
                           f"examples of case {result.label} ({task}) differ from baseline "
                           f"({result.examples_sha256[:12]}... vs {base.examples_sha256[:12]}...) {detail}".rstrip())
            drop = base.accuracy - result.accuracy
            checks.add("drop", task, result.label, drop <= 0.0,
                       f"accuracy {result.accuracy:.4f} vs baseline {base.accuracy:.4f}: drop {drop:+.4f}"
                       + ("" if drop <= 0.0 else " (any drop fails)"))
        for result, _ in [bases[0]] + others:
            if id(result) in refused:
                continue  # scored under another protocol: no comparative summary
            summaries.append(CaseSummary(
                label=result.label, implementation=result.implementation, task=task,
                protocol_name=result.protocol_name, protocol_sha256=result.protocol_sha256,
                num_examples=result.num_examples, correct=result.correct, unparsable=result.unparsable,
                accuracy=result.accuracy, drop_vs_baseline=base.accuracy - result.accuracy,
                examples_sha256=result.examples_sha256,
                identical_to_baseline=result.examples_sha256 == base.examples_sha256,
            ))
    passed = bool(loaded) and all(c.status != "fail" for c in checks.items)
    return AccuracyVerification(
        mode="formal" if limit is None else "limited",
        mode_note=mode_note(limit),
        limit=limit,
        run_dir=str(run_dir.resolve()),
        passed=passed,
        cases=tuple(summaries),
        checks=tuple(checks.items),
    )


def render_markdown(report: AccuracyVerification) -> str:
    """Markdown report; the mode banner is its first line."""
    lines = [f"# Accuracy verification -- {report.mode_note}", "",
             f"Result: **{'PASSED' if report.passed else 'FAILED'}** ({report.mode} mode)", "",
             "| task | case | impl | protocol | n | correct | unparsable | accuracy | drop | identical |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for c in report.cases:
        lines.append(f"| {c.task} | {c.label} | {c.implementation} | {c.protocol_name} "
                     f"`{c.protocol_sha256[:12]}` | {c.num_examples} | {c.correct} | "
                     f"{c.unparsable} | {c.accuracy:.4f} | {c.drop_vs_baseline:+.4f} | "
                     f"{'yes' if c.identical_to_baseline else 'NO'} |")
    failed = [c for c in report.checks if c.status == "fail"]
    skipped = [c for c in report.checks if c.status == "skipped"]
    lines += ["", f"Checks: {sum(c.status == 'pass' for c in report.checks)} passed, {len(failed)} failed, "
                  f"{len(skipped)} skipped."]
    for c in failed:
        lines.append(f"- FAIL {c.name} [{c.task or '-'} / {c.label or '-'}]: {c.message}")
    for c in skipped:
        lines.append(f"- skipped {c.name} [{c.task or '-'} / {c.label or '-'}]: {c.message}")
    lines += ["", f"_{report.mode_note}_"]
    return "\n".join(lines)


def write_report(run_dir: Path | str, report: AccuracyVerification) -> tuple[Path, Path]:
    """Write ``accuracy-verification.json`` and ``.md`` into ``run_dir`` (atomic; replaces an older report)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = run_dir / REPORT_JSON, run_dir / REPORT_MD
    write_json(json_path, report)
    tmp = md_path.with_name(f".{md_path.name}.tmp")
    tmp.write_text(render_markdown(report) + "\n", encoding="utf-8")
    tmp.replace(md_path)
    return json_path, md_path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.accuracy RUN_DIR [--limit N] [--manifest PATH] [--no-write]``."""
    parser = argparse.ArgumentParser(prog="python -m analysis.accuracy", description="Verify an accuracy matrix.")
    parser.add_argument("run_dir")
    parser.add_argument("--limit", type=int, default=None,
                        help="limited (smoke) mode: cases ran min(N, rows) examples; omit for formal mode")
    parser.add_argument("--manifest", default=None, help="dataset manifest (default: the one each case recorded)")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write the report files")
    parser.add_argument("--report-dir", default=None,
                        help="where accuracy-verification.{json,md} go (default: RUN_DIR)")
    ns = parser.parse_args(argv)
    try:
        report = verify(ns.run_dir, limit=ns.limit, manifest=ns.manifest)
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not ns.no_write:
        write_report(ns.report_dir or ns.run_dir, report)
    print(render_markdown(report))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
