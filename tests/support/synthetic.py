"""Synthetic, schema-valid run directories and records (tests, fixtures, benchmark).

What is modelled: everything ``runners.matrix`` leaves in a run directory that
analysis reads -- ``config.yaml`` (phases in ``conf.schema.Config`` shape),
``<phase>-runs.jsonl``, ``<phase>-failures.jsonl``, ``logs/``, ``evidence/``,
``records/`` and a small random-free model directory (``model/config.json`` +
``model/model.safetensors`` with zero data) so the layer-byte cross-checks run.
Throughput is drawn from a seeded normal distribution per case, scaled by a
caller-given function, so tests can place current vs official anywhere
relative to the process spread.

What is deliberately not modelled: real timing, real token ids (digests are a
hash of the workload, identical for every case unless overridden).
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import yaml

from offload_tools.layer_bytes import layer_param_shapes
from offload.selection import select_offload_layers
from results_schema.codec.io import append_jsonl, dumps_model, write_json
from results_schema.records.load_metrics import percentile_linear
from results_schema.records.base import Implementation
from results_schema.records.case_outcome import CaseFailure, KVCacheCapacity
from results_schema.records.host_load import CONTENDED_CORES, CONTENDED_STEAL, HostLoad, is_contended
from results_schema.records.models import BenchRecord, CaseRun, RoundResult, RuntimeEvidence, WorkloadSpec
from results_schema.records.identity import OffloadSetting
from results_schema.records.plan import PLAN_FILE, PlannedCase, PlannedPhase, RunPlan

TINY_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "num_hidden_layers": 8,
    "vocab_size": 256,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}
"""A small Qwen2-shaped config used by synthetic runs."""

OFFLOADER_CLASS = {
    "baseline": "vllm.model_executor.offloader.base.NoopOffloader",
    "current": "offload.prefetch.CurrentPrefetchOffloader",
    "official": "vllm.model_executor.offloader.prefetch.PrefetchOffloader",
    "sync": "offload.prefetch.SyncOffloader",
}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_model_dir(model_dir: Path, config: dict = TINY_CONFIG) -> Path:
    """Write ``config.json`` and a zero-filled bf16 ``model.safetensors`` (layers only)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    unfuse = {
        "self_attn.qkv_proj.weight": None, "self_attn.qkv_proj.bias": None, "mlp.gate_up_proj.weight": None,
    }
    h, inter = config["hidden_size"], config["intermediate_size"]
    hd = config.get("head_dim") or h // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    header: dict[str, dict] = {}
    offset = 0
    for layer in range(config["num_hidden_layers"]):
        shapes = dict(layer_param_shapes(config))
        for k in unfuse:
            shapes.pop(k, None)
        shapes.update({
            "self_attn.q_proj.weight": (q, h), "self_attn.k_proj.weight": (kv, h), "self_attn.v_proj.weight": (kv, h),
            "self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
            "mlp.gate_proj.weight": (inter, h), "mlp.up_proj.weight": (inter, h),
        })
        for name, shape in sorted(shapes.items()):
            n = 2
            for d in shape:
                n *= d
            header[f"model.layers.{layer}.{name}"] = {"dtype": "BF16", "shape": list(shape),
                                                      "data_offsets": [offset, offset + n]}
            offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(model_dir / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.write(b"\0" * offset)
    return model_dir


@dataclass
class SynthCase:
    """One case of a synthetic phase."""

    label: str
    implementation: str
    group_size: int = 0
    num_in_group: int = 0
    prefetch_step: int = 1
    mean_tok_s: float = 100.0
    sd_tok_s: float = 1.0
    kv_cache_tokens: int | None = 10_000
    fail: bool = False
    foreign_cores: tuple[float, ...] = ()
    """Per repeat: foreign cores the host load over its window shows (``host_load``); no entry: none recorded."""
    warmup_rounds: int = 1


@dataclass
class SynthPhase:
    name: str
    cases: list[SynthCase]
    repeats: int = 3
    measured_rounds: int = 3
    runtime: str = "cpu"


def default_cases(mean: float = 100.0, sd: float = 1.0, official_delta: float = 0.0,
                  points: Sequence[tuple[int, int]] = ((8, 1), (4, 1), (4, 2), (2, 1)),
                  implementations: Sequence[str] = ("current",), slowdown_per_layer: float = 0.02) -> list[SynthCase]:
    """Baseline + every point x implementation; official shifted by ``official_delta`` tok/s."""
    cases = [SynthCase("baseline", "baseline", mean_tok_s=mean, sd_tok_s=sd)]
    for g, n in points:
        layers = len(select_offload_layers(TINY_CONFIG["num_hidden_layers"], g, n))
        for impl in implementations:
            m = mean * (1 - slowdown_per_layer * layers) + (official_delta if impl == "official" else 0.0)
            cases.append(SynthCase(f"{impl}_g{g}_n{n}", impl, g, n, mean_tok_s=m, sd_tok_s=sd,
                                   kv_cache_tokens=10_000 + 100 * layers))
    return cases


def host_load(foreign_cores: float, *, wall_s: float = 10.0, steal_fraction: float = 0.0) -> HostLoad:
    """A ``BenchRecord.host_load`` with ``foreign_cores`` of other work over a ``wall_s`` window on 2 cores."""
    foreign = foreign_cores * wall_s
    case, runner = 0.9 * wall_s, 0.05 * wall_s
    host_total = 2 * wall_s
    return HostLoad(wall_s=wall_s, host_busy_cpu_s=case + runner + foreign, case_cpu_s=case, runner_cpu_s=runner,
                    foreign_cpu_s=foreign, foreign_cores=foreign_cores, steal_cpu_s=steal_fraction * host_total,
                    steal_fraction=steal_fraction, host_cores=2, contended_cores_limit=CONTENDED_CORES,
                    contended_steal_limit=CONTENDED_STEAL, contended=is_contended(foreign_cores, steal_fraction))


def layer_bytes(config: dict = TINY_CONFIG) -> int:
    from offload_tools.layer_bytes import layer_bytes_from_config

    return layer_bytes_from_config(config)


def load_metrics(rounds: Sequence[RoundResult], num_prompts: int, repeat: int) -> dict:
    """The per-process request, round-latency and load-RSS fields of a CPU record (no random draw)."""
    el = sorted(r.elapsed_s for r in rounds)
    before = 900_000_000 + 1000 * repeat
    return dict(requests=num_prompts * len(rounds), requests_per_s=num_prompts * len(rounds) / sum(el),
                round_latency_p50_s=percentile_linear(el, 50), round_latency_p95_s=percentile_linear(el, 95),
                rss_before_load_bytes=before, rss_peak_load_bytes=before + 60_000_000,
                rss_after_load_bytes=before + 50_000_000)


def make_case_run(phase: str, case: SynthCase, repeat: int, rng: random.Random, *, measured_rounds: int = 3,
                  model: str = "model", runtime: str = "cpu", config: dict = TINY_CONFIG,
                  token_digest: str | None = None, log_path: str | None = None) -> CaseRun:
    """Build one schema-valid ``CaseRun`` with evidence that follows the selection rule."""
    num_layers = config["num_hidden_layers"]
    sel = select_offload_layers(num_layers, case.group_size, case.num_in_group)
    per_layer = layer_bytes(config)
    wl = WorkloadSpec(num_prompts=4, input_len=32, max_tokens=16, max_model_len=256, seed=0, dtype="bfloat16",
                      enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=case.warmup_rounds,
                      measured_rounds=measured_rounds, enable_prefix_caching=False, prompts_vary_per_round=True)
    rounds = []
    dig = token_digest or digest(f"{phase}-tokens")
    for i in range(measured_rounds):
        thr = max(1.0, rng.gauss(case.mean_tok_s, case.sd_tok_s))
        toks = 64
        el = toks / thr
        rounds.append(RoundResult(index=i, elapsed_s=el, prompt_tokens=128, output_tokens=toks,
                                  throughput_tok_s=toks / el, token_digest=dig))
    out = sum(r.output_tokens for r in rounds)
    el = sum(r.elapsed_s for r in rounds)
    static = 4096 * case.prefetch_step if sel else 0
    offload = OffloadSetting(offload_group_size=case.group_size, offload_num_in_group=case.num_in_group,
                             offload_prefetch_step=case.prefetch_step)
    record = BenchRecord(
        phase=phase, label=case.label, implementation=case.implementation, repeat=repeat, runtime=runtime,
        model=model, offload=offload, workload=wl, load_seconds=5.0 + rng.random(), rounds=tuple(rounds),
        output_tokens=out, elapsed_s=el, throughput_tok_s=out / el, token_digest=digest("".join([dig] * measured_rounds)),
        peak_rss_bytes=1_000_000_000 + rng.randrange(1000), device_memory_bytes=None, vllm_version="0.32.0",
        torch_version="2.13.0+cpu", pid=1000 + repeat, **load_metrics(rounds, wl.num_prompts, repeat),
        host_load=host_load(case.foreign_cores[repeat]) if repeat < len(case.foreign_cores) else None,
    )
    evidence = RuntimeEvidence(
        offloader_class=OFFLOADER_CLASS[case.implementation], implementation=case.implementation,
        offload_group_size=case.group_size, offload_num_in_group=case.num_in_group,
        offload_prefetch_step=case.prefetch_step if sel else 0, num_layers=num_layers, selected_layers=sel,
        wrapped_layers=sel, wrapped_count=len(sel), offloaded_bytes=per_layer * len(sel), static_buffer_bytes=static,
        released_bytes=per_layer * len(sel) - static, post_init_called=True, pid=2000 + repeat, device="cpu",
    )
    stem = f"{case.label}-r{repeat}"
    return CaseRun(
        record=record, evidence=evidence, kv_cache=KVCacheCapacity(kv_cache_tokens=case.kv_cache_tokens),
        process_wall_s=el + 10.0, log_path=log_path or f"logs/{phase}/{stem}.log",
        evidence_path=f"evidence/{phase}/{stem}.json", command=("python", "-m", "runners.incase.bench_one", stem),
    )


def log_text(cr: CaseRun) -> str:
    """A case log as the runner keeps it (vLLM noise + the two structured lines)."""
    kv = cr.kv_cache
    lines = ["INFO 11-30 07:00:00 [config.py:1] Synthetic log for analysis tests"]
    if kv.kv_cache_tokens is not None:
        lines.append(f"INFO 11-30 07:00:01 [kv_cache_utils.py:1] CPU KV cache size: {kv.kv_cache_tokens:,} tokens")
    lines.append("OFFLOAD_EVIDENCE " + dumps_model(cr.evidence))
    lines.append("BENCH_RESULT " + dumps_model(cr.record))
    return "\n".join(lines) + "\n"


def config_dict(phases: Sequence[SynthPhase], config: dict = TINY_CONFIG) -> dict:
    """A resolved config in ``conf.schema.Config`` shape, phases as explicit cases."""
    wl = dict(num_prompts=4, input_len=32, max_tokens=16, max_model_len=256, seed=0, dtype="bfloat16",
              enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=1, measured_rounds=3,
              enable_prefix_caching=False, prompts_vary_per_round=True, temperature=0.0)
    return {
        "experiment_name": "synthetic",
        "runtime": {"name": "cpu", "device": "cpu", "env": {}},
        "model": {"name": "synthetic-qwen2", "source": "path", "path": "model",
                  "num_layers": config["num_hidden_layers"]},
        "workload": wl,
        "phases": {
            ph.name: {
                "name": ph.name, "kind": "throughput", "order": i, "baseline": False, "implementations": [],
                "points": [], "repeats": ph.repeats, "repeats_by_label": {}, "measured_rounds": ph.measured_rounds,
                "runtime": None if ph.runtime == "cpu" else {"name": ph.runtime, "device": "cpu", "env": {}},
                "cases": [{"label": c.label, "implementation": c.implementation, "group_size": c.group_size,
                           "num_in_group": c.num_in_group, "prefetch_step": c.prefetch_step, "params": [],
                           "backend": "auto",
                           "expect_error": "AssertionError" if c.fail and c.implementation == "official" else None}
                          for c in ph.cases],
            }
            for i, ph in enumerate(phases)
        },
    }


def run_plan(phases: Sequence[SynthPhase]) -> RunPlan:
    """``plan.json`` of ``config_dict(phases)`` as the runner writes it (``results_schema.records.plan``)."""
    out = []
    for ph in phases:
        cases = []
        for c in ph.cases:
            err = "AssertionError" if c.fail and c.implementation == "official" else None
            cases.append(PlannedCase(
                label=c.label, implementation=cast(Implementation, c.implementation), offload_group_size=c.group_size,
                offload_num_in_group=c.num_in_group, offload_prefetch_step=c.prefetch_step, offload_params=(),
                offload_backend="auto", repeats=ph.repeats, expect_error=err, runtime=ph.runtime, device="cpu",
                expected_runs=0 if err else ph.repeats, expected_failures=ph.repeats if err else 0))
        out.append(PlannedPhase(name=ph.name, kind="throughput", cases=tuple(cases),
                                processes=ph.repeats * len(cases)))
    return RunPlan(experiment="synthetic", run_id="synthetic", phases=tuple(out),
                   processes=sum(p.processes for p in out))


def config_yaml(phases: Sequence[SynthPhase], config: dict = TINY_CONFIG) -> str:
    """``config.yaml`` text of ``config_dict``."""
    return yaml.safe_dump(config_dict(phases, config), sort_keys=False)


def write_run_dir(run_dir: Path, phases: Sequence[SynthPhase], *, seed: int = 0, config: dict = TINY_CONFIG,
                  mutate: Callable[[str, SynthCase, int, CaseRun], CaseRun] | None = None) -> Path:
    """Write a complete synthetic run directory.

    Args:
        run_dir: new directory (must not exist).
        phases: what to generate.
        seed: RNG seed (same seed -> same files).
        config: model ``config.json`` (written to ``run_dir/model``).
        mutate: optional hook returning a modified ``CaseRun`` before it is written.

    Returns:
        ``run_dir``.
    """
    run_dir.mkdir(parents=True)
    rng = random.Random(seed)
    write_model_dir(run_dir / "model", config)
    (run_dir / "config.yaml").write_text(config_yaml(phases, config))
    write_json(run_dir / PLAN_FILE, run_plan(phases))
    for ph in phases:
        for r in range(ph.repeats):
            n = len(ph.cases)
            order = [ph.cases[(r + i) % n] for i in range(n)]
            for case in order:
                stem = f"{case.label}-r{r}"
                if case.fail:
                    fail = CaseFailure(
                        phase=ph.name, label=case.label, implementation=case.implementation, repeat=r,
                        failure_type="nonzero_exit", exit_code=1, error_type="AssertionError",
                        error_message=f"{ph.name}/{stem}: AssertionError: Module parameters should not already be on CPU",
                        log_tail=("AssertionError: Module parameters should not already be on CPU",),
                        log_path=f"logs/{ph.name}/{stem}.log", duration_s=3.0)
                    (run_dir / "logs" / ph.name).mkdir(parents=True, exist_ok=True)
                    (run_dir / fail.log_path).write_text("Traceback (most recent call last):\n" + fail.log_tail[0] + "\n")
                    append_jsonl(run_dir / f"{ph.name}-failures.jsonl", fail)
                    continue
                cr = make_case_run(ph.name, case, r, rng, measured_rounds=ph.measured_rounds,
                                   model="model", runtime=ph.runtime, config=config)
                if mutate is not None:
                    cr = mutate(ph.name, case, r, cr)
                for sub in ("logs", "evidence", "records"):
                    (run_dir / sub / ph.name).mkdir(parents=True, exist_ok=True)
                (run_dir / cr.log_path).write_text(log_text(cr))
                write_json(run_dir / cr.evidence_path, cr.evidence)
                write_json(run_dir / "records" / ph.name / f"{stem}.json", cr.record)
                append_jsonl(run_dir / f"{ph.name}-runs.jsonl", cr)
    return run_dir
