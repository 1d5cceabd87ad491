"""Load a run directory into validated pandas frames.

What is modelled: the files ``runners.matrix`` writes (docs/CONTRACTS.md):
``<phase>-runs.jsonl`` (``CaseRun`` per line) and ``<phase>-failures.jsonl``
(``CaseFailure`` per line). Every line is parsed strictly and validated; a bad
line does not abort loading, it is kept as a ``LineError`` so that the
validation report can name it (``invalid_record``) while the good lines are
still analysed. Runs files are read by ``results_schema.reading.table_scan.scan_table`` (the
decisions of ``scan_jsonl``, every check included) and the frames are built a column at
a time from the decoded lines; the ``CaseRun`` models (``RunData.case_runs``) are built
only when first asked for.

Frames (one row per ...):
    runs:     case process (a ``CaseRun``); flat columns, evidence fields prefixed ``ev_``.
    rounds:   measured round of a case process.
    failures: failed case (a ``CaseFailure``).

What is deliberately not modelled: statistics (``analysis.aggregate``) and
cross-file checks (``analysis.validation.validate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from results_schema.records.case_outcome import CaseFailure
from results_schema.reading.columns import RecordTable
from results_schema.codec.io import LineError, scan_jsonl
from results_schema.records.models import CaseRun
from results_schema.reading.table_scan import scan_table

RUNS_SUFFIX = "-runs.jsonl"
FAILURES_SUFFIX = "-failures.jsonl"

OFFLOAD_COLUMNS = {"offload_group_size": "group_size", "offload_num_in_group": "num_in_group",
                   "offload_prefetch_step": "prefetch_step"}
"""Offload field (``OffloadSetting``, ``RuntimeEvidence``) -> its column name, the one table of these renames:
the runs frame below (``ev_`` + it for the evidence's) and every catalog table (``analysis.catalog.columns``)."""

PROCESS_STATE_FIELDS = ("anon_huge_pages_bytes", "anon_bytes", "minor_faults", "major_faults", "cpus_allowed")
"""``BenchRecord.process_state`` fields of the runs frame, as ``proc_<field>`` (null where the record has none; the
first four nullable integers)."""

HOST_LOAD_FIELDS = ("foreign_cores", "foreign_cpu_s", "case_cpu_s", "runner_cpu_s", "steal_fraction", "contended")
"""``BenchRecord.host_load`` fields of the runs frame, as ``host_<field>`` (null where the record has none)."""

ROUND_RENAME = {"index": "round"}
"""``RoundResult`` field -> its column name (rounds frame below, catalog ``rounds`` table)."""

RUN_FIELDS: dict[str, str] = {
    "phase": "record.phase", "label": "record.label", "implementation": "record.implementation",
    "repeat": "record.repeat", "runtime": "record.runtime", "model": "record.model",
    **{col: f"record.offload.{name}" for name, col in OFFLOAD_COLUMNS.items()},
    "offload_params": "record.offload.offload_params",
    "offload_backend": "record.offload.offload_backend", "throughput_tok_s": "record.throughput_tok_s",
    "output_tokens": "record.output_tokens", "elapsed_s": "record.elapsed_s", "load_seconds": "record.load_seconds",
    "peak_rss_bytes": "record.peak_rss_bytes", "device_memory_bytes": "record.device_memory_bytes",
    "token_digest": "record.token_digest", "temperature": "record.workload.temperature",
    "dtype": "record.workload.dtype", "measured_rounds": "record.workload.measured_rounds",
    "num_prompts": "record.workload.num_prompts", "max_tokens": "record.workload.max_tokens",
    "kv_cache_tokens": "kv_cache.kv_cache_tokens", "kv_cache_gib": "kv_cache.kv_cache_gib",
    "max_concurrency": "kv_cache.max_concurrency", "process_wall_s": "process_wall_s", "log_path": "log_path",
    "evidence_path": "evidence_path", "ev_offloader_class": "evidence.offloader_class",
    "ev_implementation": "evidence.implementation",
    **{f"ev_{col}": f"evidence.{name}" for name, col in OFFLOAD_COLUMNS.items()},
    "ev_offload_params": "evidence.offload_params", "ev_num_layers": "evidence.num_layers",
    "ev_selected_layers": "evidence.selected_layers", "ev_wrapped_layers": "evidence.wrapped_layers",
    "ev_wrapped_count": "evidence.wrapped_count", "ev_offloaded_bytes": "evidence.offloaded_bytes",
    "ev_static_buffer_bytes": "evidence.static_buffer_bytes", "ev_released_bytes": "evidence.released_bytes",
    "ev_device": "evidence.device", "warmup_rounds": "record.workload.warmup_rounds",
    **{f"host_{name}": f"record.host_load.{name}" for name in HOST_LOAD_FIELDS},
    "step_delay_ms": "record.step_delay_ms", "in_process": "record.in_process.design",
    **{f"proc_{name}": f"record.process_state.{name}" for name in PROCESS_STATE_FIELDS},
}
"""Runs-frame column -> dotted ``CaseRun`` field it holds (offload fields named by ``OFFLOAD_COLUMNS``)."""
RUN_COLUMNS = [*RUN_FIELDS, "rounds_drift_pct", "line"]
ROUND_FIELDS = {**{col: name for name, col in ROUND_RENAME.items()}, "elapsed_s": "elapsed_s",
                "output_tokens": "output_tokens", "throughput_tok_s": "throughput_tok_s"}
"""Rounds-frame column -> ``RoundResult`` field it holds (the first four columns repeat the record's)."""
ROUND_COLUMNS = ["phase", "label", "implementation", "repeat", *ROUND_FIELDS]
FAILURE_COLUMNS = [
    "phase", "label", "implementation", "repeat", "failure_type", "exit_code", "signal", "error_type",
    "error_message", "log_path", "duration_s", "line",
]


def _empty_table() -> RecordTable[CaseRun]:
    return RecordTable(CaseRun, [], [])


@dataclass
class RunData:
    """A loaded run directory.

    Attributes:
        run_dir: the directory.
        runs, rounds, failures: frames (see module docstring).
        run_table: the validated ``CaseRun`` lines of every runs file, in file order, as read
            (``results_schema.reading.columns.RecordTable``: a column per field without building models).
        run_paths: the runs file of each row of ``run_table``.
        case_failures: the validated ``CaseFailure`` models.
        line_errors: lines that failed strict parsing or validation.
        phases: phase names found (order: file name order).
    """

    run_dir: Path
    runs: pd.DataFrame
    rounds: pd.DataFrame
    failures: pd.DataFrame
    run_table: RecordTable[CaseRun] = field(default_factory=_empty_table)
    run_paths: list[Path] = field(default_factory=list)
    case_failures: list[tuple[Path, int, CaseFailure]] = field(default_factory=list)
    line_errors: list[LineError] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)

    @cached_property
    def case_runs(self) -> list[tuple[Path, int, CaseRun]]:
        """The validated ``CaseRun`` models, in file order, with their file and line (built on first use;
        every check ran when the line was read, none runs again)."""
        return list(zip(self.run_paths, self.run_table.lines, self.run_table.models(), strict=True))

    @property
    def record_views(self) -> list[Any]:
        """The ``BenchRecord`` of every row of ``run_table`` as read: a model, or its derived struct (same field
        names; an optional field the line left out reads ``msgspec.UNSET``, so read required fields only, as
        ``results_schema.rules.token_rule`` does, or use ``run_table.column``)."""
        return self.run_table.column("record")


def case_runs_frames(table: RecordTable[CaseRun]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Flatten validated ``CaseRun`` rows into (runs, rounds) frames, one column at a time.

    Returns:
        ``(runs, rounds)`` with ``RUN_COLUMNS`` / ``ROUND_COLUMNS``; ``kv_cache_tokens`` and
        ``device_memory_bytes`` are ``Int64``, ``kv_cache_gib`` and ``max_concurrency`` ``Float64`` (nullable).
    """
    sub, counts = table.explode("record.rounds")
    elapsed, tokens = sub.column("elapsed_s"), sub.column("output_tokens")
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    drift = [window_drift_pct(elapsed[a:b], tokens[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    runs = pd.DataFrame({name: table.column(path) for name, path in RUN_FIELDS.items()}
                        | {"rounds_drift_pct": drift, "line": table.lines}, columns=RUN_COLUMNS)
    rounds = pd.DataFrame({name: np.repeat(np.array(table.column(RUN_FIELDS[name]), dtype=object), counts)
                           for name in ROUND_COLUMNS[:4]} | {name: sub.column(path) for name, path in ROUND_FIELDS.items()},
                          columns=ROUND_COLUMNS)
    rounds["repeat"] = rounds["repeat"].astype(runs["repeat"].dtype)
    for col in ("kv_cache_tokens", "device_memory_bytes", *(f"proc_{n}" for n in PROCESS_STATE_FIELDS[:4])):
        runs[col] = runs[col].astype("Int64")
    for col in ("kv_cache_gib", "max_concurrency", "rounds_drift_pct",
                *(f"host_{n}" for n in HOST_LOAD_FIELDS if n != "contended")):
        runs[col] = runs[col].astype("Float64")
    runs["host_contended"] = runs["host_contended"].astype("boolean")
    return runs, rounds


def window_drift_pct(elapsed_s: list[float], output_tokens: list[int]) -> float | None:
    """How far one process's throughput moved within its measured window, in percent of a whole window.

    The measured rounds, in order, are split into a first and a second half (the middle round of an odd
    count goes to the second); each half's throughput is its tokens over its seconds, and
    ``|first - second| / mean(first, second) * 100`` is scaled by ``sqrt(2 / n) / sqrt(1 / h1 + 1 / h2)``
    (``n`` rounds, ``h1`` and ``h2`` in the halves): under round-to-round noise alone that is the size of the
    difference between two whole windows of ``n`` rounds, i.e. between two processes of one setting, so it
    compares like with like with the noise floor (``analysis.comparison.noise_floor``: the baseline processes'
    ``(max - min) / median``). Why halves rather than the range of the rounds: the range grows with the number
    of rounds and counts jitter that averages out within a window; a window that has not settled (a cold first
    round, work that started or stopped beside it) moves one half against the other.

    Returns:
        Percent, or None with fewer than 2 rounds or no tokens.
    """
    n = len(elapsed_s)
    if n < 2:
        return None
    h = n // 2
    first = sum(output_tokens[:h]) / sum(elapsed_s[:h])
    second = sum(output_tokens[h:]) / sum(elapsed_s[h:])
    if first + second <= 0:
        return None
    scale = math.sqrt(2.0 / n) / math.sqrt(1.0 / h + 1.0 / (n - h))
    return abs(first - second) / ((first + second) / 2.0) * 100.0 * scale


def _failures_frame(items: list[tuple[Path, int, CaseFailure]]) -> pd.DataFrame:
    rows = [
        (f.phase, f.label, f.implementation, f.repeat, f.failure_type, f.exit_code, f.signal, f.error_type,
         f.error_message, f.log_path, f.duration_s, lineno)
        for _p, lineno, f in items
    ]
    return pd.DataFrame.from_records(rows, columns=FAILURE_COLUMNS)


def phase_files(run_dir: Path | str) -> dict[str, dict[str, Path]]:
    """``{phase: {"runs": path, "failures": path}}`` for every phase file present."""
    run_dir = Path(run_dir)
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(run_dir.glob("*.jsonl")):
        for kind, suffix in (("runs", RUNS_SUFFIX), ("failures", FAILURES_SUFFIX)):
            if p.name.endswith(suffix):
                out.setdefault(p.name[: -len(suffix)], {})[kind] = p
    return out


def load_run(run_dir: Path | str) -> RunData:
    """Load and validate every runs/failures JSONL file of a run directory.

    Args:
        run_dir: ``results/<experiment>/<run_id>``.

    Returns:
        A ``RunData``; bad lines are in ``line_errors`` (not raised).

    Raises:
        FileNotFoundError: ``run_dir`` does not exist, or holds neither a ``*-runs.jsonl`` /
            ``*-failures.jsonl`` file nor a ``config.yaml`` (a run whose plan has only accuracy
            phases, or whose cases all vanished, loads as empty frames; validation then reports
            the expected counts).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    files = phase_files(run_dir)
    if not files and not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir}: no *-runs.jsonl or *-failures.jsonl file and no config.yaml")
    errors: list[LineError] = []
    tables: list[tuple[Path, RecordTable[CaseRun]]] = []
    run_paths: list[Path] = []
    fail_items: list[tuple[Path, int, CaseFailure]] = []
    for _phase, kinds in files.items():
        if "runs" in kinds:
            table, errs = scan_table(kinds["runs"], CaseRun)
            errors += errs
            tables.append((kinds["runs"], table))
            run_paths += [kinds["runs"]] * len(table)
        if "failures" in kinds:
            good, errs = scan_jsonl(kinds["failures"], CaseFailure)
            errors += errs
            fail_items += [(kinds["failures"], lineno, f) for lineno, f in good]
    errors += _phase_mismatches(tables, fail_items)
    run_table = RecordTable.concat(CaseRun, [t for _p, t in tables]) if tables else _empty_table()
    runs, rounds = case_runs_frames(run_table)
    return RunData(
        run_dir=run_dir, runs=runs, rounds=rounds, failures=_failures_frame(fail_items), run_table=run_table,
        run_paths=run_paths, case_failures=fail_items, line_errors=errors, phases=list(files),
    )


def _file_phase(path: Path) -> str:
    return path.name.rsplit("-", 1)[0]


def _phase_mismatches(tables: list[tuple[Path, RecordTable[CaseRun]]],
                      fail_items: list[tuple[Path, int, CaseFailure]]) -> list[LineError]:
    """A ``LineError`` per row whose phase is not its file name's (runs rows first, then failures)."""
    out = []
    for path, table in tables:
        phase = _file_phase(path)
        out += [LineError(str(path), lineno, "record.phase", f"phase {got!r} does not match file name phase {phase!r}")
                for lineno, got in zip(table.lines, table.column("record.phase"), strict=True) if got != phase]
    for path, lineno, f in fail_items:
        phase = _file_phase(path)
        if f.phase != phase:
            out.append(LineError(str(path), lineno, "phase", f"phase {f.phase!r} does not match file name phase {phase!r}"))
    return out
