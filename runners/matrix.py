"""``python -m runners.matrix``: run a matrix of offload cases, one fresh process per case.

This module is the thin entry: Hydra composes the config (``conf/``), ``+pins=FILE`` is
expanded, signals are recorded, and ``run_matrix`` runs the stages of ``runners.stages``:

    plan (``runners.plan``; invalid parameters stop here, before any process; dry run: print, exit)
    -> identity gate (``runners.gates``: declared pins, model, offload tree; fail closed)
    -> open or resume the run directory (``runners.rundir``: config, overrides, environment
       manifest, reproduction copy, ``plan.json``; resume skips recorded cases, quarantines leftovers)
    -> execute phases (``runners.execute``: identity re-check + health gate per phase, each case
       in a fresh process group via the executor, local or Ray; finalize; one JSONL line per case)
    -> close (``runners.close``: identity at the end, analysis, accuracy verifier, ``SHA256SUMS``,
       the verdict line).

It also holds the case command line and environment (``case_argv``, ``case_env``,
``published_workload_argv``), which ``runners.execute`` calls.

Exit codes (``runners.errors``): 0 all cases as expected; 1 some case failed unexpectedly
(records kept); 2 config error; 3 identity gate; 4 all cases ran but the accuracy verifier
failed; 5 formal run stopped at its first failure; 6 validation (``analysis``) or serving
validation failed; 42 health gate; 130 interrupted (resume to continue).

What is deliberately not modelled: statistics of any kind (``analysis``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from runners.accuracy_phase import AccuracyPhase, accuracy_cases_name, check_accuracy_inputs  # noqa: F401
from runners.errors import (EXIT_ACCURACY, EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_FORMAL_STOP,  # noqa: F401
                            EXIT_HEALTH, EXIT_IDENTITY, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, RunnerError)
from runners.config import runtimes_used, to_plain  # noqa: F401
from runners.gates import (Identity, gather_identity, health_gate, required_scalar_pins,  # noqa: F401
                           resolve_model_dir)
from runners.paths import CONTROLLED_ENV as _CONTROLLED_ENV
from runners.paths import EVIDENCE_HOOK_DIR, REPO_ROOT, CasePaths, accuracy_manifest_path  # noqa: F401
from runners.progress import make_console as _console
from runners.progress import print_schedule, schedule_settings  # noqa: F401
from runners.rundir import write_sha256sums  # noqa: F401


# ----------------------------------------------------------------------------- the run


def run_matrix(cfg: Mapping[str, Any], overrides: Sequence[str] = ()) -> int:
    """Run a resolved config (plain dict). Returns the exit code; prints one-line errors.

    Args:
        cfg: resolved config (``Config`` schema as a plain dict).
        overrides: the command-line overrides (saved with the run).
    """
    console = _console()
    try:
        return _run(cfg, list(overrides), console)
    except RunnerError as exc:
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(str(exc))}")  # messages hold [brackets]: not markup
        return exc.exit_code


def _run(cfg: Mapping[str, Any], overrides: list[str], console: Any) -> int:
    """The stages (``runners.stages.run_stages``); ``RunnerError`` propagates."""
    from runners.stages import run_stages

    return run_stages(cfg, overrides, console)


# ----------------------------------------------------------------------------- case commands


def case_argv(sc: Any, *, model_dir: Path, paths: CasePaths, bench_command: Sequence[str] | None,
              python: str, accuracy_command: Sequence[str] | None = None,
              bench_module: str = "runners.bench_one") -> tuple[str, ...]:
    """argv of one case process (``python`` = the case runtime's interpreter)."""
    c = sc.case
    w = c.workload
    if c.kind == "accuracy":
        offload = "0" if c.implementation == "baseline" else f"{c.group_size},{c.num_in_group},{c.prefetch_step}"
        prefix = list(accuracy_command) if accuracy_command else [python, "-m", "runners.accuracy"]
        argv = prefix + ["run", "--model", str(model_dir),
                "--dataset", ",".join(c.accuracy_tasks), "--implementation", c.implementation, "--offload", offload,
                "--label", c.label, "--out", str(paths.record.parent / paths.record.stem),
                "--manifest", str(accuracy_manifest_path(c.accuracy_manifest)),
                "--protocol", str(c.accuracy_protocol or "qwen-chat-v1")]
        if c.accuracy_limit is not None:
            argv += ["--limit", str(c.accuracy_limit)]
        return tuple(argv)
    prefix = list(bench_command) if bench_command else [python, "-m", bench_module]
    argv = prefix + [
        "--phase", c.phase, "--label", c.label, "--implementation", c.implementation, "--repeat", str(sc.repeat),
        "--runtime", c.runtime_name, "--device", str(c.runtime.get("device", "cpu")), "--model", str(model_dir),
        "--offload-group-size", str(c.group_size), "--offload-num-in-group", str(c.num_in_group),
        "--offload-prefetch-step", str(c.prefetch_step), "--offload-params", ",".join(c.params),
        "--offload-backend", c.backend,
        "--num-prompts", str(w["num_prompts"]), "--input-len", str(w["input_len"]),
        "--max-tokens", str(w["max_tokens"]), "--max-model-len", str(w["max_model_len"]), "--seed", str(w["seed"]),
        "--dtype", str(w["dtype"]), "--enforce-eager" if w["enforce_eager"] else "--no-enforce-eager",
        "--gpu-memory-utilization", str(w["gpu_memory_utilization"]),
        "--warmup-rounds", str(w["warmup_rounds"]), "--measured-rounds", str(w["measured_rounds"]),
        "--min-measured-s", str(w.get("min_measured_s", 0.0)),
        "--temperature", str(w.get("temperature", 0.0)), "--record", str(paths.record),
    ]
    if not w.get("prompts_vary_per_round", True):
        argv.append("--same-prompts-every-round")
    argv += published_workload_argv(w)
    return tuple(argv)


def published_workload_argv(w: Mapping[str, Any]) -> list[str]:
    """bench_one flags of the optional / published workload fields (issue 15); null = not passed."""
    argv: list[str] = []
    if w.get("enable_prefix_caching") is not None:
        argv.append("--enable-prefix-caching" if w["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if w.get("prompt_mode", "random_ids") != "random_ids":
        argv += ["--prompt-mode", str(w["prompt_mode"])]
    if w.get("prompt_seed_text") is not None:
        argv += ["--prompt-seed-text", str(w["prompt_seed_text"])]
    if not w.get("ignore_eos", True):
        argv.append("--no-ignore-eos")
    if w.get("trust_remote_code", False):
        argv.append("--trust-remote-code")
    for key in ("max_num_seqs", "max_num_batched_tokens_factor"):
        if w.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), str(w[key])]
    return argv


def case_env(sc: Any, *, run_dir: Path, paths: CasePaths, base_env: Mapping[str, str]) -> dict[str, str]:
    """Explicit environment of one case process (see docs/CONTRACTS.md)."""
    env = {k: v for k, v in base_env.items() if k not in _CONTROLLED_ENV}
    cache = run_dir / "cache"
    env.update({str(k): str(v) for k, v in (sc.case.runtime.get("env") or {}).items()})
    pythonpath = f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}"
    if sc.case.runtime.get("inherit_pythonpath") and base_env.get("PYTHONPATH"):
        pythonpath += ":" + base_env["PYTHONPATH"]  # e.g. CANN's set_env.sh entries, after ours (issue 15)
    env.update({
        "PYTHONPATH": pythonpath,
        "OFFLOAD_IMPL": sc.case.implementation,
        "OFFLOAD_EVIDENCE_PATH": str(paths.evidence),
        "OFFLOAD_CPU_KERNEL_PATH": str(sc.case.runtime.get("cpu_kernel_path") or ""),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "XDG_CACHE_HOME": str(cache / "xdg"),
        # one compile cache per implementation: vLLM's cache key covers the offload config,
        # not OFFLOAD_IMPL, so cases sharing a root could load another offloader's graph
        "VLLM_CACHE_ROOT": str(cache / "vllm" / sc.case.implementation),
        "HF_HOME": str(cache / "hf"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "PYTHONUNBUFFERED": "1",
    })
    return env


# ----------------------------------------------------------------------------- Hydra entry point

_EXIT_CODE = EXIT_OK


def _install_signal_handlers() -> None:
    from runners.launch import install_interrupt_handlers

    install_interrupt_handlers((signal.SIGINT, signal.SIGTERM))  # recorded: never lost inside a fork callback


try:
    import hydra
    from omegaconf import DictConfig

    import conf  # noqa: F401  (registers the structured-config schemas)

    @hydra.main(version_base="1.3", config_path="../conf", config_name="config")
    def hydra_main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig

        from conf.schema import ConfigError, checked_plain_config

        global _EXIT_CODE
        overrides = list(HydraConfig.get().overrides.task)
        try:
            plain = checked_plain_config(cfg, overrides)
        except ConfigError as exc:
            _console().print(f"[bold red]error:[/] config: {exc}")
            _EXIT_CODE = EXIT_CONFIG
            return
        try:
            _EXIT_CODE = run_matrix(plain, overrides)
        except Exception:  # a bug, not a config error: show it, and keep exit 2 for Hydra's own errors
            import traceback

            traceback.print_exc()
            _EXIT_CODE = EXIT_CASE_FAILURES
except ImportError:  # pragma: no cover - hydra is a core dependency
    hydra_main = None


def main() -> int:
    """Console entry point: ``+pins=FILE`` expansion, then Hydra; compose errors exit 2 (not Hydra's 1)."""
    _install_signal_handlers()
    from runners.pins import PinsError, expand_pins_args

    try:
        sys.argv[1:] = expand_pins_args(sys.argv[1:])
    except PinsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        hydra_main()
    except SystemExit as exc:  # Hydra reports a config / override error (already printed) with exit 1
        if exc.code not in (0, None):
            return EXIT_CONFIG
        raise
    return _EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
