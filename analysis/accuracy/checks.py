"""The checks of the accuracy-equivalence verifier (``analysis.accuracy.verifier``), one function per check.

What is modelled: each function checks one property of one accuracy case (``AccuracyResult``) -- against
the baseline, the dataset manifest, the protocol registry or its examples file -- and records a
``results_schema.records.accuracy.VerifyCheck`` (pass / fail / skipped, with a message naming what differs)
in a ``Checks`` list. The rules are listed in ``analysis.accuracy.verifier``'s docstring.

What is deliberately not modelled: grouping cases by task and choosing the baseline (``analysis.accuracy.verifier.verify``).
"""

from __future__ import annotations

import math

from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from results_schema.records.accuracy import (
    FULL_ROW_COUNTS,
    AccuracyExample,
    AccuracyResult,
    DatasetManifest,
    Task,
    VerifyCheck,
)
from results_schema.codec.files import file_sha256
from results_schema.codec.io import RecordError, iter_jsonl
from results_schema.records.protocols import REGISTRY, registered_names

GOLD_BALANCE_MIN, GOLD_BALANCE_MAX = 0.15, 0.35
"""Allowed share of each gold letter over the GPQA set (ARCHITECTURE cases: 15%-35%)."""
GOLD_BALANCE_MIN_N = 100


def diff_fields(a: BaseModel | object, b: BaseModel | object, prefix: str = "") -> list[tuple[str, object, object]]:
    """Dotted paths where two (nested) pydantic models / values differ."""
    if isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b):
        out: list[tuple[str, object, object]] = []
        for name in type(a).model_fields:
            out += diff_fields(getattr(a, name), getattr(b, name), f"{prefix}{name}.")
        return out
    return [] if a == b else [(prefix.rstrip("."), a, b)]


class Checks:
    def __init__(self) -> None:
        self.items: list[VerifyCheck] = []

    """The checks recorded so far (``results_schema.records.accuracy.VerifyCheck``)."""

    def add(self, name: str, task: Task | None, label: str | None, ok: bool | None, message: str) -> bool:
        """Record one check (``ok`` None: skipped); returns whether it passed."""
        status: Literal["pass", "fail", "skipped"] = "skipped" if ok is None else ("pass" if ok else "fail")
        self.items.append(VerifyCheck(name=name, task=task, label=label, status=status, message=message))
        return bool(ok)


def load_examples(
    checks: Checks, result: AccuracyResult, result_path: Path
) -> list[AccuracyExample] | None:
    """Load and check one case's examples file; None when unusable (a failure is recorded)."""
    name, task, label = "examples", result.task, result.label
    path = result_path.parent / result.examples_path
    if not path.is_file():
        checks.add(name, task, label, False, f"examples file missing: {path}")
        return None
    actual = file_sha256(path)
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


def check_dataset(
    checks: Checks, result: AccuracyResult, base: AccuracyResult, manifest_override: Path | None
) -> None:
    task, label = result.task, result.label
    diffs = diff_fields(base.dataset, result.dataset)
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
        actual = file_sha256(data_file)
        if actual != entry.sha256:
            checks.add("dataset_hash", task, label, False,
                       f"dataset hash mismatch: file {data_file} is {actual}, manifest declares {entry.sha256}")
            return
    checks.add("dataset_hash", task, label, True, f"{entry.name} sha256 {entry.sha256[:12]}... matches manifest")


def check_counts(checks: Checks, result: AccuracyResult, limit: int | None) -> None:
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


def check_same(checks: Checks, name: str, result: AccuracyResult, base: AccuracyResult,
                a: object, b: object, what: str) -> None:
    diffs = diff_fields(a, b)
    if diffs:
        shown = "; ".join(f"{what}.{f} baseline={x!r} case={y!r}" for f, x, y in diffs[:5])
        checks.add(name, result.task, result.label, False,
                   f"{name} differs from baseline in case {result.label} ({result.task}): {shown}")
    else:
        checks.add(name, result.task, result.label, True, f"{what} identical to baseline")


def check_evidence(checks: Checks, result: AccuracyResult, limit: int | None) -> None:
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


def first_difference(a: list[AccuracyExample], b: list[AccuracyExample]) -> str:
    for x, y in zip(a, b, strict=False):  # the shorter list ends the search
        d = diff_fields(x, y)
        if d:
            fields = ", ".join(f for f, _, _ in d)
            return f"first difference at row {x.index} ({x.example_id}): {fields}"
    return f"row counts differ ({len(a)} vs {len(b)})"


def check_gold_balance(checks: Checks, task: Task, rows: list[AccuracyExample], limit: int | None) -> None:
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


def check_registered(checks: Checks, result: AccuracyResult) -> None:
    """The recorded spec must be the one registered under its name (a name means one spec, always)."""
    task, label, spec = result.task, result.label, result.protocol
    if spec.name not in REGISTRY or task not in REGISTRY[spec.name]:
        checks.add("registered", task, label, False,
                   f"case {label} ({task}) was scored under protocol {spec.name!r}, which is not registered "
                   f"(registered: {', '.join(registered_names())})")
        return
    want = REGISTRY[spec.name][task]
    diffs = diff_fields(want, spec)
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


def refuse_mixed_protocols(checks: Checks, result: AccuracyResult, base: AccuracyResult) -> bool:
    """Record the refusal and return True when ``result`` was scored under another spec than ``base``."""
    if result.protocol_sha256 == base.protocol_sha256:
        checks.add("protocol", result.task, result.label, True,
                   f"same protocol as baseline: {result.protocol_name} (sha256 {result.protocol_sha256[:12]}...)")
        return False
    diffs = diff_fields(base.protocol, result.protocol)
    shown = "; ".join(f"{f} baseline={_short(x)} case={_short(y)}" for f, x, y in diffs[:5])
    if len(diffs) > 5:
        shown += f" (+{len(diffs) - 5} more: {', '.join(f for f, _, _ in diffs[5:])})"
    checks.add("protocol", result.task, result.label, False,
               f"refusing to compare case {result.label} ({result.task}) with baseline {base.label}: they were scored "
               f"under different protocol specs (baseline {base.protocol_name} sha256 {base.protocol_sha256[:12]}..., "
               f"case {result.protocol_name} sha256 {result.protocol_sha256[:12]}...); differing: {shown}. "
               "Re-run every case of the comparison under one protocol")
    return True


def planned_backends(records_dir: Path) -> tuple[Path | None, dict[str, str] | None]:
    """The planned ``offload_backend`` of every case of the phase whose records ``records_dir`` holds.

    A ``runners.matrix`` run keeps a phase's accuracy results in ``<run_dir>/records/<phase>/`` and its
    plan in ``<run_dir>/plan.json`` (``results_schema.records.plan.RunPlan``); the phase is the directory name.

    Returns:
        ``(plan path, {label: offload_backend})``; ``(None, None)`` when ``records_dir`` is not such a
        directory or has no ``plan.json`` (a stand-alone directory: backends are then not checked);
        ``(plan path, {})`` when the plan has no phase of that name.

    Raises:
        RecordError: ``plan.json`` exists but does not validate.
    """
    from results_schema.codec.io import read_json
    from results_schema.records.plan import PLAN_FILE, RunPlan

    records_dir = records_dir.resolve()
    if records_dir.parent.name != "records":
        return None, None
    plan_path = records_dir.parent.parent / PLAN_FILE
    if not plan_path.is_file():
        return None, None
    plan = read_json(plan_path, RunPlan)
    phase = next((p for p in plan.phases if p.name == records_dir.name), None)
    return plan_path, ({} if phase is None else {c.label: c.offload_backend for c in phase.cases})


def check_backend(checks: Checks, result: AccuracyResult, planned: dict[str, str] | None,
                  plan_path: Path | None) -> None:
    """The ``offload_backend`` a case recorded equals the one its plan gave it (skipped without a plan)."""
    task, label, got = result.task, result.label, result.offload.offload_backend
    if planned is None:
        checks.add("backend", task, label, None,
                   f"case {label} ({task}) ran with offload_backend={got!r}; not checked: no plan.json "
                   "(stand-alone directory, not <run_dir>/records/<phase>)")
    elif label not in planned:
        checks.add("backend", task, label, False,
                   f"case {label} ({task}) is not in the plan {plan_path} (planned: {sorted(planned)})")
    else:
        want = planned[label]
        checks.add("backend", task, label, got == want,
                   f"case {label} ({task}) ran with offload_backend={got!r}, planned {want!r} ({plan_path})")


def check_drop(checks: Checks, result: AccuracyResult, base: AccuracyResult, max_accuracy_drop: float) -> None:
    """Drop rule: baseline accuracy - case accuracy <= ``max_accuracy_drop`` (fraction; default 0 = no drop).

    A 1e-12 slack absorbs float rounding only: two accuracies differ by at least 1/num_examples.
    """
    drop = base.accuracy - result.accuracy
    ok = drop <= max_accuracy_drop + 1e-12
    rule = "any drop fails" if max_accuracy_drop == 0 else f"max_accuracy_drop {max_accuracy_drop:.4f}"
    checks.add("drop", result.task, result.label, ok,
               f"accuracy {result.accuracy:.4f} vs baseline {base.accuracy:.4f}: drop {drop:+.4f}"
               + (f" <= max_accuracy_drop {max_accuracy_drop:.4f}" if ok and max_accuracy_drop else "")
               + ("" if ok else f" ({rule})"))


def wilson_interval(correct: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``correct / n`` (default 95%: z = 1.959964).

    Source: E. B. Wilson (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22(158): ``(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``.

    Returns:
        ``(low, high)`` in [0, 1]; ``(0.0, 1.0)`` for ``n == 0``.

    Raises:
        ValueError: ``correct`` outside ``[0, n]``.
    """
    if not 0 <= correct <= n:
        raise ValueError(f"correct ({correct}) must be in [0, n={n}]")
    if n == 0:
        return 0.0, 1.0
    p, z2 = correct / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
