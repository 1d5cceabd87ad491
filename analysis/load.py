"""Load a run directory into validated pandas frames.

What is modelled: the files ``runners.matrix`` writes (docs/CONTRACTS.md):
``<phase>-runs.jsonl`` (``CaseRun`` per line) and ``<phase>-failures.jsonl``
(``CaseFailure`` per line). Every line is parsed strictly and validated; a bad
line does not abort loading, it is kept as a ``LineError`` so that the
validation report can name it (``invalid_record``) while the good lines are
still analysed.

Frames (one row per ...):
    runs:     case process (a ``CaseRun``); flat columns, evidence fields prefixed ``ev_``.
    rounds:   measured round of a case process.
    failures: failed case (a ``CaseFailure``).

What is deliberately not modelled: statistics (``analysis.aggregate``) and
cross-file checks (``analysis.validation.validate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from results_schema.io import LineError, scan_jsonl
from results_schema.case_outcome import CaseFailure
from results_schema.models import CaseRun

RUNS_SUFFIX = "-runs.jsonl"
FAILURES_SUFFIX = "-failures.jsonl"

RUN_COLUMNS = [
    "phase", "label", "implementation", "repeat", "runtime", "model", "group_size", "num_in_group",
    "prefetch_step", "offload_params", "offload_backend", "throughput_tok_s", "output_tokens", "elapsed_s",
    "load_seconds", "peak_rss_bytes", "device_memory_bytes", "token_digest", "temperature", "dtype",
    "measured_rounds", "num_prompts", "max_tokens", "kv_cache_tokens", "kv_cache_gib", "max_concurrency", "process_wall_s", "log_path",
    "evidence_path", "ev_offloader_class", "ev_implementation", "ev_group_size", "ev_num_in_group",
    "ev_prefetch_step", "ev_offload_params", "ev_num_layers", "ev_selected_layers", "ev_wrapped_layers",
    "ev_wrapped_count", "ev_offloaded_bytes", "ev_static_buffer_bytes", "ev_released_bytes", "ev_device",
    "line",
]
ROUND_COLUMNS = ["phase", "label", "implementation", "repeat", "round", "elapsed_s", "output_tokens", "throughput_tok_s"]
FAILURE_COLUMNS = [
    "phase", "label", "implementation", "repeat", "failure_type", "exit_code", "signal", "error_type",
    "error_message", "log_path", "duration_s", "line",
]


@dataclass
class RunData:
    """A loaded run directory.

    Attributes:
        run_dir: the directory.
        runs, rounds, failures: frames (see module docstring).
        case_runs: the validated ``CaseRun`` models, in file order, with their file and line.
        case_failures: the validated ``CaseFailure`` models.
        line_errors: lines that failed strict parsing or validation.
        phases: phase names found (order: file name order).
    """

    run_dir: Path
    runs: pd.DataFrame
    rounds: pd.DataFrame
    failures: pd.DataFrame
    case_runs: list[tuple[Path, int, CaseRun]] = field(default_factory=list)
    case_failures: list[tuple[Path, int, CaseFailure]] = field(default_factory=list)
    line_errors: list[LineError] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)


def _read_lines(path: Path, cls, errors: list[LineError]):
    good, errs = scan_jsonl(path, cls)
    errors.extend(errs)
    return [(path, lineno, item) for lineno, item in good]


def case_runs_frames(items: list[tuple[Path, int, CaseRun]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Flatten validated ``CaseRun`` models into (runs, rounds) frames."""
    rows = []
    rrows = []
    for _path, lineno, cr in items:
        r, e, kv, off, wl = cr.record, cr.evidence, cr.kv_cache, cr.record.offload, cr.record.workload
        rows.append((
            r.phase, r.label, r.implementation, r.repeat, r.runtime, r.model, off.offload_group_size,
            off.offload_num_in_group, off.offload_prefetch_step, off.offload_params, off.offload_backend,
            r.throughput_tok_s, r.output_tokens, r.elapsed_s, r.load_seconds, r.peak_rss_bytes,
            r.device_memory_bytes, r.token_digest, wl.temperature, wl.dtype, wl.measured_rounds, wl.num_prompts,
            wl.max_tokens,
            kv.kv_cache_tokens, kv.kv_cache_gib, kv.max_concurrency, cr.process_wall_s, cr.log_path,
            cr.evidence_path, e.offloader_class, e.implementation, e.offload_group_size, e.offload_num_in_group,
            e.offload_prefetch_step, e.offload_params, e.num_layers, e.selected_layers, e.wrapped_layers,
            e.wrapped_count, e.offloaded_bytes, e.static_buffer_bytes, e.released_bytes, e.device, lineno,
        ))
        for rd in r.rounds:
            rrows.append((r.phase, r.label, r.implementation, r.repeat, rd.index, rd.elapsed_s, rd.output_tokens,
                          rd.throughput_tok_s))
    runs = pd.DataFrame.from_records(rows, columns=RUN_COLUMNS)
    rounds = pd.DataFrame.from_records(rrows, columns=ROUND_COLUMNS)
    for col in ("kv_cache_tokens", "device_memory_bytes"):
        runs[col] = runs[col].astype("Int64")
    for col in ("kv_cache_gib", "max_concurrency"):
        runs[col] = runs[col].astype("Float64")
    return runs, rounds


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
    runs_items: list = []
    fail_items: list = []
    for _phase, kinds in files.items():
        if "runs" in kinds:
            runs_items += _read_lines(kinds["runs"], CaseRun, errors)
        if "failures" in kinds:
            fail_items += _read_lines(kinds["failures"], CaseFailure, errors)
    for path, lineno, item in runs_items + fail_items:
        phase = path.name.rsplit("-", 1)[0]
        got = item.record.phase if isinstance(item, CaseRun) else item.phase
        if got != phase:
            errors.append(LineError(str(path), lineno, "record.phase" if isinstance(item, CaseRun) else "phase",
                                    f"phase {got!r} does not match file name phase {phase!r}"))
    runs, rounds = case_runs_frames(runs_items)
    return RunData(
        run_dir=run_dir, runs=runs, rounds=rounds, failures=_failures_frame(fail_items), case_runs=runs_items,
        case_failures=fail_items, line_errors=errors, phases=list(files),
    )

