"""Accuracy phases of a matrix run: inputs checked before launch, the resume check, the verifier.

What is modelled: the pre-launch check of every accuracy phase's dataset manifest and files
(``check_accuracy_inputs``; formal mode only when every dataset is ``kind: full`` and the phase
has no ``accuracy_limit``), the resume check that completed cases used the same manifest, and the
end-of-run verifier (``analysis.accuracy.verifier``).

What is deliberately not modelled: running an accuracy case (``runners.incase.accuracy``), its
completion line (``runners.outcome.accuracy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from runners.errors import EXIT_CONFIG, EXIT_IDENTITY, RunnerError
from runners.models.accuracy_model import check_accuracy_model
from runners.outcome.accuracy import accuracy_cases_name
from runners.paths import REPO_ROOT, accuracy_manifest_path
from runners.cases import PhaseCase, ScheduledCase
from results_schema.records.accuracy import AccuracyCaseRun
from results_schema.codec.files import file_sha256
from results_schema.codec.io import read_jsonl
from runners.incase.accuracy.datasets import DatasetError, load_manifest, select_entry, verify_file


@dataclass(frozen=True)
class AccuracyPhase:
    """What the pre-launch check learnt about one accuracy phase (used again by the end-of-run verifier).

    Attributes:
        phase: phase name.
        manifest: absolute dataset manifest path.
        entries: manifest entry name per task.
        formal: every dataset is ``kind: full`` and no ``accuracy_limit``: the verifier runs in formal mode.
        verify_limit: ``--limit`` for the verifier (None = formal mode).
        max_accuracy_drop: tolerance of the verifier's drop rule (fraction of accuracy; the phase's config).
    """

    phase: str
    manifest: Path
    entries: tuple[tuple[str, str], ...]
    formal: bool
    verify_limit: int | None
    max_accuracy_drop: float = 0.0


def _check_phase(phase: str, c: PhaseCase) -> AccuracyPhase:
    """Manifest and dataset files of one accuracy phase (first case ``c``; its protocol and tasks were checked
    when it was planned, ``runners.planning.plan``).

    Raises:
        RunnerError: (config) naming the phase, the manifest path and what is wrong.
    """

    manifest = accuracy_manifest_path(str(c.accuracy_manifest))
    where = f"config: accuracy phase {phase!r}: accuracy_manifest={c.accuracy_manifest!r}"
    if not manifest.is_file():
        raise RunnerError(f"{where}: dataset manifest {manifest} does not exist (relative paths are resolved "
                          f"against the repository root {REPO_ROOT}; materialize full datasets with "
                          "`python -m runners.incase.accuracy materialize`)", EXIT_CONFIG)
    try:
        m = load_manifest(manifest)
        entries = []
        for task in c.accuracy_tasks:
            entry = select_entry(m, task)
            verify_file(manifest, entry)
            entries.append(entry)
    except DatasetError as exc:
        raise RunnerError(f"{where}: {exc}", EXIT_CONFIG) from None
    check_accuracy_model(phase, c.accuracy_model)
    formal = c.accuracy_limit is None and all(e.kind == "full" for e in entries)
    if formal:
        limit = None
    else:
        limit = int(c.accuracy_limit) if c.accuracy_limit is not None else max(e.rows for e in entries)
    return AccuracyPhase(phase=phase, manifest=manifest, entries=tuple((e.task, e.name) for e in entries),
                         formal=formal, verify_limit=limit, max_accuracy_drop=float(c.max_accuracy_drop))


def check_accuracy_inputs(items: Sequence[ScheduledCase]) -> list[AccuracyPhase]:
    """Check every accuracy phase's dataset manifest and files before any process starts.

    The manifest must exist and validate, name exactly one entry for each task of the
    phase, and every file must be present with the declared SHA-256 and row count.

    Raises:
        RunnerError: (config) naming the phase, the manifest path and what is wrong.
    """
    seen: dict[str, PhaseCase] = {}
    for sc in items:
        if sc.case.accuracy_tasks and sc.case.phase not in seen:  # its kind gave it tasks: an accuracy case
            seen[sc.case.phase] = sc.case
    return [_check_phase(phase, c) for phase, c in seen.items()]


def check_resumed_manifests(run_dir: Path, phases: Sequence[AccuracyPhase]) -> None:
    """Resume: completed accuracy cases must have used the dataset manifest the run uses now.

    Raises:
        RunnerError: (identity) naming the phase, the case and the manifest hashes.
    """

    for p in phases:
        path = run_dir / accuracy_cases_name(p.phase)
        if not path.is_file():
            continue
        now = file_sha256(p.manifest)
        for line in read_jsonl(path, AccuracyCaseRun):
            if line.dataset_manifest_sha256 != now or Path(line.dataset_manifest_path) != p.manifest:
                raise RunnerError(
                    f"resume: accuracy phase {p.phase!r} case {line.label!r} r{line.repeat} used dataset manifest "
                    f"{line.dataset_manifest_path} (sha256 {line.dataset_manifest_sha256}); the run now has "
                    f"{p.manifest} (sha256 {now})", EXIT_IDENTITY)


def verify_accuracy(run_dir: Path, phases: Sequence[AccuracyPhase], console: Any) -> list[str]:
    """Run the accuracy verifier over each accuracy phase; report in ``summary/``; return failed phases.

    One accuracy phase writes ``summary/accuracy-verification.{json,md,csv}``; several write
    ``summary/accuracy-<phase>/``. The verdict and the mode (formal / LIMITED) are printed.
    """
    try:
        from analysis.accuracy.verifier import render_markdown, verify, write_report
    except ImportError as exc:
        console.print(f"[yellow]accuracy verifier unavailable ({exc}); run `python -m analysis accuracy-verify "
                      f"{run_dir}/records/<phase>` later[/]")
        return [p.phase for p in phases]
    failed = []
    for p in phases:
        report_dir = run_dir / "summary" if len(phases) == 1 else run_dir / "summary" / f"accuracy-{p.phase}"
        try:
            report = verify(run_dir / "records" / p.phase, limit=p.verify_limit, manifest=p.manifest,
                            max_accuracy_drop=p.max_accuracy_drop)
        except (ValueError, OSError) as exc:  # RecordError is a ValueError: an unreadable result file
            console.print(f"accuracy {p.phase}: FAILED (unreadable input: {exc})", markup=False)
            failed.append(p.phase)
            continue
        json_path, _ = write_report(report_dir, report)
        console.print(render_markdown(report), markup=False)
        verdict = "PASSED" if report.passed else "FAILED"
        console.print(f"accuracy {p.phase}: {verdict} ({report.mode_note}); report "
                      f"{json_path.relative_to(run_dir)}", markup=False)
        if not report.passed:
            failed.append(p.phase)
    return failed
