"""``python -m runners.accuracy``: run one case, launch a matrix, materialize datasets, verify.

Subcommands:

* ``render``: what a protocol makes of one data row (system, user, gold, GPQA order); no model.
* ``parse``: what a protocol extracts from one reply; no model.
* ``run``: one accuracy case in this process (meant to be a fresh process).
* ``matrix``: baseline + offload cases for each dataset, each in a fresh
  subprocess (same environment contract as bench cases), then the verifier.
* ``materialize``: write a dataset JSONL + manifest entry from a local file or,
  on a machine with hub access and the optional ``datasets`` package, the hub.
* ``verify``: same as ``python -m analysis.accuracy``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from results_schema.accuracy import EngineSettings
from results_schema.protocols import DEFAULT_PROTOCOL, registered_names
from results_schema.models import OffloadSetting

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = REPO_ROOT / "eval_datasets" / "fixtures" / "manifest.json"


_ENGINE_HELP = " (default: the protocol's value, else vLLM's; a value contradicting the protocol is an error)"


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-model-len", type=int, default=None, help="vLLM max_model_len (tokens)" + _ENGINE_HELP)
    p.add_argument("--dtype", default=None, help="model dtype given to vLLM" + _ENGINE_HELP)
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM enforce_eager" + _ENGINE_HELP)
    p.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="vLLM gpu_memory_utilization" + _ENGINE_HELP)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM prefix caching" + _ENGINE_HELP)
    p.add_argument("--max-num-seqs", type=int, default=None, help="vLLM max_num_seqs" + _ENGINE_HELP)


def _add_protocol_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", default=DEFAULT_PROTOCOL,
                   help=f"registered accuracy protocol ({', '.join(registered_names())}; default {DEFAULT_PROTOCOL})")


def engine_settings_from(ns: argparse.Namespace) -> EngineSettings:
    """Engine run options given on the command line (unset = null: the protocol's or vLLM's value)."""
    return EngineSettings(
        max_model_len=ns.max_model_len,
        dtype=ns.dtype,
        enforce_eager=ns.enforce_eager,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        enable_prefix_caching=ns.enable_prefix_caching,
        max_num_seqs=ns.max_num_seqs,
    )


def _task(task: str) -> str:
    from results_schema.protocols import TASKS

    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task


def _cmd_render(ns: argparse.Namespace) -> int:
    from results_schema.protocols import protocol_spec
    from runners.accuracy.datasets import normalize_row
    from runners.accuracy.protocol import render_row

    spec = protocol_spec(ns.protocol, _task(ns.task))
    try:
        raw = json.loads(ns.row, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ValueError(f"--row is not valid JSON: {exc}") from None
    row = normalize_row(spec.task, 0, raw, "--row")
    print(json.dumps(render_row(spec, row).to_json(), ensure_ascii=False))
    return 0


def _reject_constant(name: str) -> object:
    raise ValueError(f"non-finite constant {name!r} is not allowed")


def _cmd_parse(ns: argparse.Namespace) -> int:
    from results_schema.protocols import protocol_spec
    from runners.accuracy.protocol import parse_reply

    spec = protocol_spec(ns.protocol, _task(ns.task))
    print(json.dumps({"parsed": parse_reply(spec, ns.text)}))
    return 0


def parse_offload(text: str) -> OffloadSetting:
    """``"0"``/``"none"`` -> disabled; ``"G,N"`` or ``"G,N,P"`` -> group size, num in group, prefetch step.

    Raises:
        ValueError: malformed text or invalid combination (names the values).
    """
    from offload.selection import validate_offload_params

    text = text.strip().lower()
    if text in ("0", "none", ""):
        return OffloadSetting(offload_group_size=0, offload_num_in_group=0)
    parts = [p.strip() for p in text.replace(":", ",").split(",")]
    if len(parts) not in (2, 3) or not all(p.lstrip("-").isdigit() for p in parts):
        raise ValueError(f"--offload {text!r}: expected G,N or G,N,P (integers), or 0 for none")
    g, n = int(parts[0]), int(parts[1])
    p = int(parts[2]) if len(parts) == 3 else 1
    validate_offload_params(g, n, p)
    return OffloadSetting(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=p)


def _cmd_run(ns: argparse.Namespace) -> int:
    from runners.accuracy.case import run_cases, summary_line

    results = run_cases(
        model=ns.model,
        manifest=ns.manifest,
        datasets=[d.strip() for d in ns.dataset.split(",") if d.strip()],
        implementation=ns.implementation,
        offload=parse_offload(ns.offload),
        out_dir=ns.out,
        engine_settings=engine_settings_from(ns),
        limit=ns.limit,
        label=ns.label,
        protocol=ns.protocol,
    )
    for result in results:
        print(summary_line(result), file=sys.stderr)
    return 0


def _cmd_materialize(ns: argparse.Namespace) -> int:
    from runners.accuracy.datasets import materialize

    entry = materialize(
        ns.task, ns.out_dir, from_file=ns.from_file, revision=ns.revision, name=ns.name, kind=ns.kind
    )
    print(entry.model_dump_json())
    return 0


def _cmd_matrix(ns: argparse.Namespace) -> int:
    from runners.accuracy.matrix import run_matrix

    return run_matrix(
        model=ns.model,
        tiny_model_cache=ns.tiny_model_cache,
        manifest=ns.manifest,
        datasets=ns.datasets,
        cases=ns.cases,
        out=ns.out,
        limit=ns.limit,
        engine_args=ns.engine_args,
        timeout_s=ns.timeout_s,
        per_process=ns.process_per,
        protocol=ns.protocol,
    )


def _cmd_verify(ns: argparse.Namespace) -> int:
    from analysis.accuracy import main as verify_main

    argv = [ns.run_dir]
    if ns.limit is not None:
        argv += ["--limit", str(ns.limit)]
    if ns.manifest is not None:
        argv += ["--manifest", ns.manifest]
    return verify_main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners.accuracy", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    ren = sub.add_parser("render", help="print {system, user, gold[, order]} of one data row under a protocol")
    _add_protocol_arg(ren)
    ren.add_argument("--task", required=True, help="gsm8k | gpqa")
    ren.add_argument("--row", required=True,
                     help="one data row as a JSON object (GSM8K question/answer; GPQA Question, Correct Answer, "
                          "Incorrect Answer 1..3, title or snake case)")
    ren.set_defaults(func=_cmd_render)

    par = sub.add_parser("parse", help='print {"parsed": ...} for one reply under a protocol (null = unparsable)')
    _add_protocol_arg(par)
    par.add_argument("--task", required=True, help="gsm8k | gpqa")
    par.add_argument("--text", required=True, help="the model's reply")
    par.set_defaults(func=_cmd_parse)

    run = sub.add_parser("run", help="one accuracy case in this process")
    run.add_argument("--model", required=True, help="local model directory (must have a chat template)")
    run.add_argument("--dataset", required=True,
                     help="gsm8k | gpqa | a manifest entry name; comma-separated = several datasets, one engine")
    run.add_argument("--manifest", default=str(DEFAULT_MANIFEST), help="dataset manifest.json")
    run.add_argument("--implementation", required=True, choices=["baseline", "current", "official", "sync"])
    run.add_argument("--offload", default="0", help="G,N[,P] (group size, num in group, prefetch step); 0 = none")
    run.add_argument("--limit", type=int, default=None, help="first N rows only (smoke; result is 'limited')")
    run.add_argument("--label", default=None, help="case label (default baseline / <impl>-G-N)")
    run.add_argument("--out", required=True, help="output directory")
    _add_protocol_arg(run)
    _add_engine_args(run)
    run.set_defaults(func=_cmd_run)

    mat = sub.add_parser("matrix", help="baseline + offload cases, each in a fresh process, then verify")
    src = mat.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local model directory")
    src.add_argument("--tiny-model-cache", help="build/verify the tiny model in this cache dir and use it")
    mat.add_argument("--manifest", default=str(DEFAULT_MANIFEST), help="dataset manifest.json")
    mat.add_argument("--datasets", default="gsm8k,gpqa", help="comma-separated tasks or entry names")
    mat.add_argument(
        "--cases",
        default="baseline,current:4:1,current:2:1",
        help="comma-separated baseline | <impl>:G:N[:P]; the first must be baseline",
    )
    mat.add_argument("--limit", type=int, default=None, help="first N rows (smoke; verifier runs in limited mode)")
    mat.add_argument("--out", required=True, help="run directory (must not exist)")
    mat.add_argument("--timeout-s", type=float, default=1800.0, help="per-case timeout (TERM, then KILL)")
    mat.add_argument("--process-per", default="case-dataset", choices=["case-dataset", "case"],
                     help="one process per case and dataset (default), or per case running all datasets")
    _add_protocol_arg(mat)
    mat.add_argument("--engine-args", default="", help="extra engine flags for each case, e.g. '--max-model-len 4096'")
    mat.set_defaults(func=_cmd_matrix)

    mz = sub.add_parser("materialize", help="write dataset JSONL + manifest entry (hub only where reachable)")
    mz.add_argument("--task", required=True, choices=["gsm8k", "gpqa"])
    mz.add_argument("--out-dir", required=True, help="directory of manifest.json and the JSONL")
    mz.add_argument("--from-file", default=None, help="local .jsonl/.csv/.parquet copy; omit to fetch from the hub")
    mz.add_argument("--revision", default=None, help="hub commit of the source (resolved automatically from the hub)")
    mz.add_argument("--name", default=None, help="entry name (default gsm8k / gpqa_diamond)")
    mz.add_argument("--kind", default="full", choices=["full", "fixture"])
    mz.set_defaults(func=_cmd_materialize)

    ver = sub.add_parser("verify", help="verify an accuracy run directory (= python -m analysis.accuracy)")
    ver.add_argument("run_dir")
    ver.add_argument("--limit", type=int, default=None)
    ver.add_argument("--manifest", default=None)
    ver.set_defaults(func=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except (ValueError, RuntimeError, KeyError, FileExistsError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
