"""What a resume may be told, and when a run has nothing left to resume.

What is modelled: ``override_differences`` compares the overrides a resume was given with the
ones the run saved (``overrides.json``): a resume continues the run it names, so every given
override must equal the saved one of the same key (``+key``, ``++key`` and ``key`` are one key;
values compare as Hydra parses them, so ``[{g: 4, n: 1}]`` equals ``[{g:4,n:1}]``). Giving none,
or some of the saved ones, is accepted. The resume's own switches (``RESUME_SWITCHES``: the
run directory, the progress display, whether the analysis runs at the end) may differ.
``complete_run`` says whether a run is finished: every planned case has its line and a
close that completed wrote ``SHA256SUMS`` (a close that fails writes none); read only (nothing is quarantined or rewritten).

What is deliberately not modelled: re-analysis (``python -m analysis report RUN --out DIR``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from runners.cases import ScheduledCase
from runners.kinds.registry import kind_of
from results_schema.records.case_outcome import CaseFailure
from results_schema.codec.io import read_jsonl

RESUME_SWITCHES = ("resume", "progress", "analyze")
"""Keys a resume may give with any value: which run, the live progress bar, the analysis at the end."""

_DELETED = object()


def _parsed(overrides: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """``{key: (value, text)}`` of Hydra overrides (``+`` / ``++`` prefixes dropped, ``~key`` = deleted)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out: dict[str, tuple[Any, str]] = {}
    for ov in OverridesParser.create().parse_overrides(list(overrides)):
        out[ov.get_key_element().lstrip("+~")] = (_DELETED if ov.is_delete() else ov.value(), str(ov.input_line))
    return out


def override_differences(saved: Sequence[str], given: Sequence[str]) -> list[str]:
    """Each given override that is not one of the run's saved overrides (resume switches excepted).

    Args:
        saved: the run's ``overrides.json``.
        given: the resume's command-line overrides.

    Returns:
        One text per difference, e.g. ``"+experiment=smoke (the run has no experiment override)"``,
        ``"phases.same_runtime.repeats=3 (the run has phases.same_runtime.repeats=1)"``; empty when
        the resume is accepted.

    Raises:
        hydra.errors.OverrideParseException: an override does not parse (checked at compose time first).
    """
    before = _parsed(saved)
    diffs = []
    for key, (value, text) in _parsed(given).items():
        if key.split("@")[0] in RESUME_SWITCHES:
            continue
        if key not in before:
            diffs.append(f"{text} (the run has no {key} override)")
        elif before[key][0] != value:
            diffs.append(f"{text} (the run has {before[key][1]})")
    return diffs


def complete_run(run_dir: Path, items: Sequence[ScheduledCase]) -> tuple[bool, int]:
    """Whether ``run_dir`` is finished: every planned case recorded and ``SHA256SUMS`` written (by a completed close). Read only.

    Args:
        run_dir: the run directory.
        items: its planned cases (``runners.cases.ScheduledCase``, ``.key`` = ``(phase, label, repeat)``).

    Returns:
        ``(complete, recorded)``: recorded = planned cases that have a success line (in the files their kind
        names, ``CaseKind.line_files``) or a failure line (a file with a torn or invalid line is not counted, and
        makes the run incomplete).
    """

    done: set[tuple[str, str, int]] = set()
    intact = True
    kinds = {sc.case.phase: kind_of(sc.case) for sc in items}
    for ph, kind in kinds.items():
        files: list[tuple[str, Any, Any]] = [(name, model, kind.line_key) for name, model in kind.line_files(ph)]
        files.append((f"{ph}-failures.jsonl", CaseFailure, lambda r: (r.label, r.repeat)))
        for name, model, key in files:
            path = run_dir / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):  # a torn last line: the run was interrupted mid-append
                intact = False
                continue
            try:
                done |= {(ph, *key(r)) for r in read_jsonl(path, model)}
            except ValueError:  # a line that does not validate: not complete; the resume itself reports it
                intact = False
    recorded = sum(1 for sc in items if sc.key in done)
    return intact and recorded == len(items) and (run_dir / "SHA256SUMS").is_file(), recorded
