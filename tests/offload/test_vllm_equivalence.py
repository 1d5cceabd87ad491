"""Real vLLM (CPU) on the 8-layer tiny Qwen2: greedy token ids with our offloader == baseline.

Each test launches ONE driver process (tests/offload/vllm_driver.py) that builds one engine
per grid point in-process (vLLM start-up dominates otherwise). The default run covers a
reduced grid chosen to hit the ring's edge cases (M not divisible by prefetch_step,
prefetch_step > M, every layer wrapped, offload_params) plus the sync reference and a
negative control; ``-m full_grid`` runs G in {1,2,3,4,8} x N in 1..G x prefetch_step
{1,2,3} x offload_params {all, mlp}.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from offload.matching import matches_offload_params
from offload.selection import select_offload_layers

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [20, 30, 40, 50], [100, 7, 99, 5, 3, 200, 11, 12, 13, 14, 15]]
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
               enforce_eager: bool = True) -> dict[str, dict]:
    spec = {"model": str(model_dir), "prompts": PROMPTS, "max_tokens": MAX_TOKENS, "enforce_eager": enforce_eager,
            "points": [{"label": "baseline", "group_size": 0, "num_in_group": 0}, *points]}
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "OFFLOAD_EVIDENCE_PATH"}
    env.update(OFFLOAD_IMPL="current", VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_NO_USAGE_STATS="1", PYTHONPATH=str(REPO), VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, str(HERE / "vllm_driver.py"), str(spec_path)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
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


REDUCED = [
    point(4, 1, 1),  # layers 3, 7: 591,872 bytes
    point(3, 2, 3, ("mlp",)),  # M=5 wrapped modules, not divisible by prefetch_step 3
    point(8, 2, 3),  # prefetch_step 3 > M=2
    point(1, 1, 2, corrupt_host=True),  # every layer wrapped; negative control
    point(4, 2, 1, impl="sync"),
]


@pytest.mark.slow
def test_reduced_grid_greedy_tokens_identical_to_baseline_with_real_offloaded_bytes(tiny_model_dir, tmp_path):
    results = run_driver(tiny_model_dir, REDUCED, tmp_path)
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
