"""Same-runtime GPU check: this project's offloader ("current") vs vLLM's ``PrefetchOffloader``.

``python -m offload_tools.gpu_compare run --model DIR --out FILE.jsonl --points 28,1 14,1 [--baseline]``
builds one vLLM engine per (implementation, G, N) *in this process*
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``; engines are torn down between points), runs warmup and
measured ``generate`` rounds over fixed random prompts, and appends one JSON line per engine:
implementation, offloader class actually installed, offloaded bytes, output tokens,
throughput and a digest of the generated token ids.
``--repeats R`` runs every (implementation, G, N) ``R`` times, alternating which
implementation goes first at each point and repeat (drift hits both sides alike).
``python -m offload_tools.gpu_compare summarize FILE.jsonl`` prints, per (G, N), the median
throughput of each side, the difference of medians with a percentile bootstrap 95% interval of
``median(current) - median(official)`` (the rule ``analysis.comparison.verdict_rule`` used before
issue 53; not the project's verdict rule, which ``offload_tools`` must not import, and which has an
equivalence margin): ``faster``/``slower`` only when the whole interval is above/below zero,
``equivalent`` when it contains zero, ``inconclusive`` with fewer than two engines a side.
A point is ``ok`` when current is ``faster`` or ``equivalent``. Generated tokens are
compared with the baseline's (token digest, greedy): a point where official's tokens differ
is reported as ``official_tokens_differ`` and left out of the verdict (never averaged in:
e.g. vLLM-Ascend 0.23's ring, see :func:`offload.ring.official_ascend_violations`); a
point where current's differ fails.

Compile caches: each engine gets ``VLLM_CACHE_ROOT=<root>/<implementation>`` (vLLM's
cache key covers the offload config but not ``OFFLOAD_IMPL``).

Switching implementation: the process starts with ``OFFLOAD_IMPL=current`` so the plugin is
registered (``offload.plugin.register`` is also called directly, in case the entry point is
not installed); ``OFFLOAD_IMPL`` is then set per engine and our factory reads it when the
runner creates its offloader: ``current`` -> ours, ``official`` -> vLLM's own factory
(``PrefetchOffloader``). The class installed is recorded and checked against the evidence rule's
table (``results_schema.rules.evidence_rule.EXPECTED_OFFLOADER_CLASS``), so a silent fallback is visible.

Nothing is mocked: this needs a CUDA build of vLLM and a GPU. Not modelled: CUDA graphs
(engines run with ``enforce_eager`` by default to fit the time budget; ``--graphs`` turns
compilation and graphs on for both implementations).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import statistics
import sys
from pathlib import Path
import time
from collections.abc import Sequence
from typing import Any

from results_schema.rules.evidence_rule import expected_class


def _parse_point(text: str) -> tuple[int, int]:
    g, n = text.split(",")
    return int(g), int(n)


def _offloader_info() -> dict[str, Any]:
    from vllm.model_executor.offloader.base import get_offloader

    off: Any = get_offloader()  # vLLM's offloader or ours: duck-typed below
    cls = type(off)
    info: dict[str, Any] = {"offloader_class": f"{cls.__module__}.{cls.__qualname__}"}
    if hasattr(off, "evidence_state"):
        st = off.evidence_state()
        info.update(offloaded_bytes=st["offloaded_bytes"], static_buffer_bytes=st["static_buffer_bytes"],
                    wrapped_layers=list(st["wrapped_layers"]), fallback_loads=off.fallback_loads)
    elif hasattr(off, "module_offloaders"):
        pool = getattr(off, "buffer_pool", None)
        info.update(offloaded_bytes=int(getattr(off, "total_offloaded_bytes", 0)),
                    static_buffer_bytes=int(pool.total_bytes) if pool is not None else 0,
                    wrapped_layers=len(off.module_offloaders))
    return info


BOOTSTRAP_SAMPLES = 4000
CONFIDENCE = 0.95
SEED = 20260


def engine_cache_root(root: str, impl: str) -> str:
    """``VLLM_CACHE_ROOT`` of an engine of ``impl``: one compile cache per implementation."""
    return str(Path(root) / impl)


def apply_engine_cache_root(root: str, impl: str) -> str:
    """Point the next in-process engine at ``engine_cache_root(root, impl)``; return what vLLM reads.

    An in-process engine core calls ``vllm.envs.enable_envs_cache()`` after start-up, after
    which ``vllm.envs`` answers from a cache: without ``disable_envs_cache()`` the second
    engine would still see the first engine's ``VLLM_CACHE_ROOT``.
    """
    import vllm.envs as venvs

    os.environ["VLLM_CACHE_ROOT"] = engine_cache_root(root, impl)
    disable = getattr(venvs, "disable_envs_cache", None)
    if disable is not None:
        disable()
    return str(venvs.VLLM_CACHE_ROOT)


def bootstrap_median_delta(a: Sequence[float], b: Sequence[float], *, samples: int = BOOTSTRAP_SAMPLES,
                           seed: int = SEED) -> tuple[float, float | None, float | None]:
    """``median(a) - median(b)`` and its percentile bootstrap interval (None with < 2 per side).

    Percentile bootstrap (Efron & Tibshirani 1993, ch. 13): each side resampled with replacement
    independently, seeded (the module docstring says how this differs from the project's verdict rule).
    """
    delta = statistics.median(a) - statistics.median(b)
    if len(a) < 2 or len(b) < 2:
        return delta, None, None
    rng = random.Random(seed)
    draws = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(samples))
    alpha = (1 - CONFIDENCE) / 2
    lo = draws[int(alpha * (samples - 1))]
    hi = draws[int(round((1 - alpha) * (samples - 1)))]
    return delta, lo, hi


def interval_verdict(lo: float | None, hi: float | None) -> str:
    """``faster`` / ``slower`` only when the interval excludes zero; ``inconclusive`` without one."""
    if lo is None or hi is None:
        return "inconclusive"
    if lo > 0:
        return "faster"
    if hi < 0:
        return "slower"
    return "equivalent"


def run_engine(args: argparse.Namespace, impl: str, g: int, n: int) -> dict[str, Any]:
    """Build one engine, run warmup + measured rounds, return the measured record."""
    import torch
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    os.environ["OFFLOAD_IMPL"] = impl if impl != "baseline" else "official"
    seen_root = apply_engine_cache_root(args.cache_root, impl)
    kwargs: dict[str, Any] = {}
    if g > 0:
        kwargs = dict(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=args.prefetch_step)
    t0 = time.perf_counter()
    llm = LLM(model=args.model, dtype="bfloat16", seed=0, max_model_len=args.input_len + args.max_tokens + 8,
              gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=not args.graphs,
              enable_prefix_caching=False, **kwargs)
    load_s = time.perf_counter() - t0
    info = _offloader_info()
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    rounds = []
    digest = hashlib.sha256()
    for r in range(args.warmup + args.rounds):
        rng = random.Random(1000 + r)  # same prompts per round index for every engine
        prompts = [TokensPrompt(prompt_token_ids=[rng.randrange(10, 250) for _ in range(args.input_len)])
                   for _ in range(args.num_prompts)]
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        toks = sum(len(o.outputs[0].token_ids) for o in outs)
        if r >= args.warmup:
            rounds.append({"elapsed_s": dt, "output_tokens": toks, "throughput_tok_s": toks / dt})
            for o in outs:
                digest.update(json.dumps(list(o.outputs[0].token_ids)).encode())
    rec = {
        "implementation": impl, "group_size": g, "num_in_group": n, "prefetch_step": args.prefetch_step,
        "load_s": load_s, "rounds": rounds,
        "throughput_tok_s": sum(x["output_tokens"] for x in rounds) / sum(x["elapsed_s"] for x in rounds),
        "token_digest": digest.hexdigest(), "graphs": bool(args.graphs),
        "repeat": getattr(args, "current_repeat", 0), "vllm_cache_root": seen_root,
        "vllm_version": __import__("vllm").__version__, "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(0), **info,
    }
    del llm, outs
    gc.collect()
    from vllm.distributed import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()
    torch.cuda.empty_cache()
    return rec


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["OFFLOAD_IMPL"] = "current"
    import offload.plugin

    offload.plugin.register()
    args.cache_root = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    for impl, g, n, r in build_plan(args.points, args.repeats, args.baseline):
        args.current_repeat = r
        rec = run_engine(args, impl, g, n)
        expected = expected_class(impl, None)  # the evidence rule's class table
        assert expected is not None  # every implementation run here has an entry
        rec["installed_expected_class"] = bool(expected.match(rec["offloader_class"]))
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        print(f"GPU_COMPARE {impl:8s} G={g:<2d} N={n:<2d} {rec['throughput_tok_s']:10.1f} tok/s "
              f"class={rec['offloader_class']} offloaded={rec.get('offloaded_bytes', 0):,}", flush=True)
        if not rec["installed_expected_class"]:
            print(f"error: {impl} ran {rec['offloader_class']}, expected one matching {expected.pattern!r}",
                  file=sys.stderr)
            return 2
    return 0


def build_plan(points: Sequence[tuple[int, int]], repeats: int, baseline: bool) -> list[tuple[str, int, int, int]]:
    """(implementation, G, N, repeat) in run order: per repeat, every point's pair, the pair's
    order alternating with point index + repeat; the baseline (if asked) opens every repeat."""
    plan: list[tuple[str, int, int, int]] = []
    for r in range(repeats):
        if baseline:
            plan.append(("baseline", 0, 0, r))
        for k, (g, n) in enumerate(points):
            pair = [("current", g, n, r), ("official", g, n, r)]
            plan += pair if (k + r) % 2 == 0 else pair[::-1]
    return plan


def summarize(recs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (G, N): medians, interval, verdict, token status, ``ok`` (see module docstring)."""
    base_digests = {r["token_digest"] for r in recs if r["implementation"] == "baseline"}
    by: dict[tuple[int, int], dict[str, list[dict]]] = {}
    for r in recs:
        if r["implementation"] in ("current", "official"):
            by.setdefault((r["group_size"], r["num_in_group"]), {}).setdefault(r["implementation"], []).append(r)
    rows = []
    for (g, n), d in sorted(by.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        row: dict[str, Any] = {"group_size": g, "num_in_group": n,
                               "engines": {k: len(v) for k, v in sorted(d.items())}}
        if "current" not in d or "official" not in d:
            row.update(verdict="incomplete", ok=False)
            rows.append(row)
            continue
        cur = [r["throughput_tok_s"] for r in d["current"]]
        off = [r["throughput_tok_s"] for r in d["official"]]
        delta, lo, hi = bootstrap_median_delta(cur, off)
        tokens = {}
        for k in ("current", "official"):
            if len(base_digests) != 1:
                tokens[k] = "no_baseline" if not base_digests else "baseline_unstable"
            else:
                tokens[k] = "identical" if all(r["token_digest"] in base_digests for r in d[k]) else "differs"
        row.update(current_tok_s=statistics.median(cur), official_tok_s=statistics.median(off),
                   ratio=statistics.median(cur) / statistics.median(off), delta_tok_s=delta,
                   ci_low=lo, ci_high=hi, tokens=tokens)
        if tokens["current"] == "differs":
            row.update(verdict="current_tokens_differ", ok=False)
        elif tokens["official"] == "differs":
            row.update(verdict="official_tokens_differ", ok=False)  # not averaged in
        else:
            v = interval_verdict(lo, hi)
            row.update(verdict=v, ok=v in ("faster", "equivalent") and tokens["current"] == "identical")
        rows.append(row)
    return rows


def cmd_summarize(args: argparse.Namespace) -> int:
    recs = [json.loads(line) for line in open(args.file, encoding="utf-8") if line.strip()]
    base = next((r for r in recs if r["implementation"] == "baseline"), None)
    if base:
        print(f"baseline: {base['throughput_tok_s']:.1f} tok/s on {base['device_name']} "
              f"(vLLM {base['vllm_version']}, graphs={base['graphs']})")
    print(f"{'G':>3} {'N':>3} {'current tok/s':>14} {'official tok/s':>15} {'ratio':>7} "
          f"{'95% interval of delta tok/s':>28} {'verdict':>22} {'tokens cur/off':>22}")
    rows = summarize(recs)
    for row in rows:
        g, n = row["group_size"], row["num_in_group"]
        if row["verdict"] == "incomplete":
            print(f"{g:>3} {n:>3}  incomplete: {row['engines']}")
            continue
        ci = "-" if row["ci_low"] is None else f"[{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"
        print(f"{g:>3} {n:>3} {row['current_tok_s']:>14.1f} {row['official_tok_s']:>15.1f} {row['ratio']:>7.3f} "
              f"{ci:>28} {row['verdict']:>22} {row['tokens']['current'] + '/' + row['tokens']['official']:>22}")
    ok = bool(rows) and all(r["ok"] for r in rows)
    print("GPU_COMPARE_SUMMARY " + json.dumps({"ok": ok, "points": rows}, sort_keys=True))
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m offload_tools.gpu_compare", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run engines and append records")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--points", nargs="+", type=_parse_point, default=[(28, 1)], help="G,N pairs")
    r.add_argument("--baseline", action="store_true", help="also run the no-offload baseline first")
    r.add_argument("--prefetch-step", type=int, default=1)
    r.add_argument("--num-prompts", type=int, default=32)
    r.add_argument("--input-len", type=int, default=128)
    r.add_argument("--max-tokens", type=int, default=64)
    r.add_argument("--warmup", type=int, default=1)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--repeats", type=int, default=3, help="engines per (implementation, G, N), alternating order")
    r.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    r.add_argument("--graphs", action="store_true", help="torch.compile + CUDA graphs instead of eager")
    s = sub.add_parser("summarize", help="print current/official throughput ratios")
    s.add_argument("file")
    a = ap.parse_args(argv)
    return cmd_run(a) if a.cmd == "run" else cmd_summarize(a)


if __name__ == "__main__":
    sys.exit(main())
