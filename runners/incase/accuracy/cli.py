"""``python -m runners.incase.accuracy``: run one case, materialize datasets; render/parse a protocol.

Subcommands:

* ``render``: what a protocol makes of one data row (system, user, gold, GPQA order); no model.
* ``parse``: what a protocol extracts from one reply; no model.
* ``run``: one accuracy case in this process (meant to be a fresh process): ``--case PATH``
  (the ``case.json`` ``runners.matrix`` writes) or the case by hand. The accuracy matrix
  is ``python -m runners.matrix +experiment=accuracy`` (phases of the one matrix runner).
* ``materialize``: write a dataset JSONL + manifest entry from a local file or,
  on a machine with hub access and the optional ``datasets`` package, the hub.
* ``synthesize``: generate the held-out GSM8K / GPQA-format sets of ``runners.incase.accuracy.synthetic``
  (answerable by ``runners.models.answering_model``) and materialize them (JSONL + manifest entries).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from typing import Any

from offload.selection import validate_offload_params
from results_schema.records.accuracy import DEFAULT_ACCURACY_MANIFEST, EngineSettings
from results_schema.records.base import IMPLEMENTATIONS
from results_schema.records.identity import OffloadSetting
from results_schema.records.protocols import DEFAULT_PROTOCOL, TASKS, registered_names
from runners.incase import REPO_ROOT
from runners.incase.case_input import checked_offload, read_case

DEFAULT_MANIFEST = REPO_ROOT / DEFAULT_ACCURACY_MANIFEST


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
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task


def _cmd_render(ns: argparse.Namespace) -> int:
    from results_schema.records.protocols import protocol_spec
    from runners.incase.accuracy.datasets import normalize_row
    from runners.incase.accuracy.protocol import render_row

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
    from results_schema.records.protocols import protocol_spec
    from runners.incase.accuracy.protocol import parse_reply

    spec = protocol_spec(ns.protocol, _task(ns.task))
    print(json.dumps({"parsed": parse_reply(spec, ns.text)}))
    return 0


def parse_offload(text: str) -> OffloadSetting:
    """``"0"``/``"none"`` -> disabled; ``"G,N"`` or ``"G,N,P"`` -> group size, num in group, prefetch step.

    Raises:
        ValueError: malformed text or invalid combination (names the values).
    """
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


_HAND_FLAGS = ("model", "dataset", "implementation", "out")


def run_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :func:`runners.incase.accuracy.case.run_cases` from ``run``'s arguments.

    ``--case PATH`` (what the runner writes) or the hand flags (``--model --dataset
    --implementation --out`` and the optional ones); not both.

    Raises:
        ValueError: both or neither given, a bad case file or ``--offload`` text.
    """
    given = [f"--{f}" for f in _HAND_FLAGS if getattr(ns, f) is not None]
    if ns.case is not None:
        if given:
            raise ValueError(f"--case gives the whole case; drop {' '.join(given)}")
        case = read_case(ns.case, "accuracy")
        acc = case.accuracy
        assert acc is not None  # CaseSpec: kind accuracy has accuracy settings
        return dict(model=case.model, manifest=acc.manifest, datasets=list(acc.tasks),
                    implementation=case.implementation, offload=checked_offload(case), out_dir=acc.out_dir,
                    engine_settings=None, limit=acc.limit, label=case.label, protocol=acc.protocol)
    missing = [f"--{f}" for f in _HAND_FLAGS if getattr(ns, f) is None]
    if missing:
        raise ValueError(f"run needs --case PATH, or {' '.join(missing)}")
    return dict(model=ns.model, manifest=ns.manifest,
                datasets=[d.strip() for d in ns.dataset.split(",") if d.strip()],
                implementation=ns.implementation, offload=parse_offload(ns.offload), out_dir=ns.out,
                engine_settings=engine_settings_from(ns), limit=ns.limit, label=ns.label,
                protocol=ns.protocol)


def _cmd_run(ns: argparse.Namespace) -> int:
    from runners.incase.accuracy.case import run_cases, summary_line

    for result in run_cases(**run_kwargs(ns)):
        print(summary_line(result), file=sys.stderr)
    return 0


def _cmd_materialize(ns: argparse.Namespace) -> int:
    from runners.incase.accuracy.materialize import materialize

    entry = materialize(
        ns.task, ns.out_dir, from_file=ns.from_file, revision=ns.revision, name=ns.name, kind=ns.kind,
        source=ns.source,
    )
    print(entry.model_dump_json())
    return 0


def _cmd_synthesize(ns: argparse.Namespace) -> int:
    from runners.incase.accuracy.synthetic import write_eval_sets

    for entry in write_eval_sets(ns.out_dir, seed=ns.seed, rows=ns.rows):
        print(entry.model_dump_json())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runners.incase.accuracy", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_protocol_parsers(sub)
    _add_run_parser(sub)
    _add_dataset_parsers(sub)
    return parser


def _add_protocol_parsers(sub: Any) -> None:
    ren = sub.add_parser("render", help="print {system, user, gold[, order]} of one data row under a protocol")
    _add_protocol_arg(ren)
    ren.add_argument("--task", required=True, help=" | ".join(TASKS))
    ren.add_argument("--row", required=True,
                     help="one data row as a JSON object (GSM8K question/answer; GPQA Question, Correct Answer, "
                          "Incorrect Answer 1..3, title or snake case)")
    ren.set_defaults(func=_cmd_render)

    par = sub.add_parser("parse", help='print {"parsed": ...} for one reply under a protocol (null = unparsable)')
    _add_protocol_arg(par)
    par.add_argument("--task", required=True, help=" | ".join(TASKS))
    par.add_argument("--text", required=True, help="the model's reply")
    par.set_defaults(func=_cmd_parse)


def _add_run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="one accuracy case in this process (--case PATH, or the case by hand)")
    run.add_argument("--case", default=None, help="case.json (results_schema.records.case.CaseSpec) written by runners.matrix")
    run.add_argument("--model", default=None, help="local model directory (must have a chat template)")
    run.add_argument("--dataset", default=None,
                     help=" | ".join(TASKS) + " | a manifest entry name; comma-separated = several datasets, one engine")
    run.add_argument("--manifest", default=str(DEFAULT_MANIFEST), help="dataset manifest.json")
    run.add_argument("--implementation", default=None, choices=IMPLEMENTATIONS)
    run.add_argument("--offload", default="0", help="G,N[,P] (group size, num in group, prefetch step); 0 = none")
    run.add_argument("--limit", type=int, default=None, help="first N rows only (smoke; result is 'limited')")
    run.add_argument("--label", default=None, help="case label (default baseline / <impl>_g<G>_n<N>)")
    run.add_argument("--out", default=None, help="output directory")
    _add_protocol_arg(run)
    _add_engine_args(run)
    run.set_defaults(func=_cmd_run)


def _add_dataset_parsers(sub: Any) -> None:
    mz = sub.add_parser("materialize", help="write dataset JSONL + manifest entry (hub only where reachable)")
    mz.add_argument("--task", required=True, choices=list(TASKS),
                    help="gsm8k, gpqa: hub splits; addition: generated (--from-file, --kind fixture)")
    mz.add_argument("--out-dir", required=True, help="directory of manifest.json and the JSONL")
    mz.add_argument("--from-file", default=None, help="local .jsonl/.csv/.parquet copy; omit to fetch from the hub")
    mz.add_argument("--revision", default=None, help="hub commit of the source (resolved automatically from the hub)")
    mz.add_argument("--name", default=None, help="entry name (default gsm8k / gpqa_diamond / single-digit-addition)")
    mz.add_argument("--kind", default="full", choices=["full", "fixture"])
    mz.add_argument("--source", default=None, help="kind fixture: the entry's source (default 'fixture')")
    mz.set_defaults(func=_cmd_materialize)

    from runners.incase.accuracy.synthetic import EVAL_ROWS, EVAL_SEED

    sy = sub.add_parser("synthesize", help="generate + materialize the held-out sets the trained tiny model answers")
    sy.add_argument("--out-dir", required=True, help="directory of manifest.json and the JSONL files")
    sy.add_argument("--seed", type=int, default=EVAL_SEED, help="generator seed (training uses other seeds)")
    sy.add_argument("--rows", type=int, default=EVAL_ROWS, help="rows per task")
    sy.set_defaults(func=_cmd_synthesize)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except (ValueError, RuntimeError, KeyError, FileExistsError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
