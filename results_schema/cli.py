"""``python -m results_schema``: export JSON Schemas and check result files.

Subcommands:
    export DIR        write ``<Model>.schema.json`` for every result model into DIR.
    check PATH...     validate files (or every known file under a directory),
                      line by line; print ``file:line: field: message`` per error;
                      exit 1 on any error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from results_schema.records import case_outcome, models, summary, validation
from results_schema.records.dispatch import FileKind, file_kinds, kind_for
from results_schema.codec.io import RecordError, check_jsonl, read_json

EXPORTED_MODELS = (
    models.BenchRecord,
    models.RuntimeEvidence,
    models.CaseRun,
    case_outcome.CaseFailure,
    validation.ValidationReport,
    summary.ComparisonSummary,
)


def export_schemas(out_dir: Path) -> list[Path]:
    """Write one JSON Schema file per model (built-ins plus every importable dispatch model).

    Returns:
        The written paths.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    classes: dict[str, type] = {cls.__name__: cls for cls in EXPORTED_MODELS}
    for kind in file_kinds():
        try:
            cls = kind.load_model()
        except LookupError:
            continue
        classes.setdefault(cls.__name__, cls)
    written = []
    for name, cls in sorted(classes.items()):
        path = out_dir / f"{name}.schema.json"
        path.write_text(json.dumps(cls.model_json_schema(), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def _candidates(path: Path) -> list[tuple[Path, FileKind | None]]:
    if path.is_dir():
        out: list[tuple[Path, FileKind | None]] = []
        for p in sorted(path.rglob("*")):
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts):
                kind = kind_for(p)
                if kind is not None:
                    out.append((p, kind))
        return out
    return [(path, kind_for(path))]


def check_paths(paths: Sequence[Path], out=None) -> int:
    """Check files; return the number of errors (0 = all good)."""
    out = sys.stdout if out is None else out
    n_errors = 0
    for root in paths:
        if not root.exists():
            print(f"{root}: no such file or directory", file=out)
            n_errors += 1
            continue
        items = _candidates(root)
        if not items:
            print(f"{root}: no result files found", file=out)
            n_errors += 1
        for path, kind in items:
            if kind is None:
                print(f"{path}: unknown result file kind (no dispatch entry matches its name)", file=out)
                n_errors += 1
                continue
            try:
                cls = kind.load_model()
            except LookupError as exc:
                print(f"{path}: {exc}", file=out)
                n_errors += 1
                continue
            if kind.jsonl:
                ok, errors = check_jsonl(path, cls)
                for err in errors:
                    print(str(err), file=out)
                n_errors += len(errors)
                status = "OK" if not errors else f"{len(errors)} bad"
                print(f"{path}: {ok} {cls.__name__} line(s) valid, {status}", file=out)
            else:
                try:
                    read_json(path, cls)
                    print(f"{path}: {cls.__name__} OK", file=out)
                except RecordError as exc:
                    print(str(exc), file=out)
                    n_errors += 1
    return n_errors


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m results_schema", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_export = sub.add_parser("export", help="write JSON Schema files")
    p_export.add_argument("dir", type=Path)
    p_check = sub.add_parser("check", help="validate result files line by line")
    p_check.add_argument("paths", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "export":
        for path in export_schemas(args.dir):
            print(path)
        return 0
    n = check_paths(args.paths)
    if n:
        print(f"{n} error(s)")
        return 1
    return 0
