#!/usr/bin/env bash
# GPU check (one command, about 15 min on one H200): same-runtime current vs official offloader.
# On a GPU host without vLLM, run the torch-only check instead: python -m offload_tools.gpu_check_torch
#
#   scripts/gpu_check.sh [OUT_DIR]
#
# Builds a 28-layer Qwen2-shaped model locally (runners.models.tiny_model, Qwen2.5-1.5B widths:
# hidden 1536, intermediate 8960, 12 heads, 2 KV heads; random bf16 weights, no hub access),
# then runs, in three processes, eager engines for the points (28,1) (8,1) (4,1) (4,2) and one
# graph point (4,1) (torch.compile + CUDA graphs, model runner's production path), each with
# this project's offloader ("current") and vLLM's PrefetchOffloader ("official") on the same
# vLLM install, GPU_CHECK_REPEATS (2) alternating repeats each plus a baseline per repeat,
# and prints per (G,N) the difference of median tok/s with its 95% bootstrap interval and
# the verdict (ok = current faster or equivalent, and greedy tokens equal to the baseline's).
# Every engine gets its own compile cache per implementation (VLLM_CACHE_ROOT=<root>/<impl>).
#
# Needs: a CUDA build of vLLM importable by $PYTHON (default: .venv/bin/python if present,
# else python3). Nothing is mocked. Env knobs: PYTHON, GPU_CHECK_GRAPHS=0 (skip the graph
# point), GPU_CHECK_REPEATS (2), GPU_CHECK_TIMEOUT (seconds per chunk, 420).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${1:-${OUT:-$ROOT/results/gpu_check/$(date -u +%Y%m%dT%H%M%SZ)-$$}}"
if [[ -e "$OUT/records.jsonl" ]]; then
  echo "error: $OUT/records.jsonl exists; refusing to reuse a result directory" >&2
  exit 2
fi
mkdir -p "$OUT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_NO_USAGE_STATS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 OFFLOAD_IMPL=current
export VLLM_CACHE_ROOT="$OUT/vllm-cache" XDG_CACHE_HOME="$OUT/xdg-cache" HF_HOME="$OUT/hf-home"
export TRITON_CACHE_DIR="$OUT/triton-cache"
unset OFFLOAD_EVIDENCE_PATH

# One line per problem, no traceback (the reason goes to stderr, then the error line).
"$PYTHON" - <<'PY' || { echo "error: needs a CUDA build of vLLM and a visible GPU (PYTHON=$PYTHON)" >&2; exit 3; }
import sys
try:
    import torch
    import vllm
except Exception as exc:  # ImportError, or a broken install raising anything at import
    sys.exit(f"cannot import torch/vllm: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__}: torch.cuda.is_available() is False")
print(f"vLLM {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/nvidia-smi.txt" || true

MODEL="$OUT/model-qwen2-l28-h1536"
SECONDS=0
"$PYTHON" -m runners.models.tiny_model --out "$MODEL" --num-layers 28 --hidden-size 1536 \
  --intermediate-size 8960 --num-heads 12 --num-kv-heads 2
echo "model built in ${SECONDS}s"

CHUNK_TIMEOUT="${GPU_CHECK_TIMEOUT:-420}"
REPEATS="${GPU_CHECK_REPEATS:-2}"
RC=0
run_chunk() {
  # one process per chunk bounds what a leaked engine could hold; first arg: records file
  local records="$1"; shift
  set +e
  timeout --signal=TERM --kill-after=20 "$CHUNK_TIMEOUT" "$PYTHON" -m offload_tools.gpu_compare run \
    --model "$MODEL" --out "$records" --repeats "$REPEATS" "$@" 2>&1 | tee -a "$OUT/run.log" \
    | grep -E "^(GPU_COMPARE|error|Traceback)|Error"
  local statuses=("${PIPESTATUS[@]}")
  set -e
  local rc=${statuses[0]}
  if [[ $rc -ne 0 ]]; then echo "chunk failed (exit $rc): $*  (log: $OUT/run.log)" >&2; RC=1; fi
}
run_chunk "$OUT/records.jsonl" --baseline --points 28,1 8,1
run_chunk "$OUT/records.jsonl" --points 4,1 4,2
if [[ "${GPU_CHECK_GRAPHS:-1}" == "1" ]]; then
  run_chunk "$OUT/records_graphs.jsonl" --graphs --baseline --points 4,1
fi
echo "total ${SECONDS}s"
set +e
"$PYTHON" -m offload_tools.gpu_compare summarize "$OUT/records.jsonl" | tee "$OUT/summary.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || RC=1
if [[ -e "$OUT/records_graphs.jsonl" ]]; then
  echo "graph point (torch.compile + CUDA graphs):"
  "$PYTHON" -m offload_tools.gpu_compare summarize "$OUT/records_graphs.jsonl" | tee "$OUT/summary_graphs.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || RC=1
elif [[ "${GPU_CHECK_GRAPHS:-1}" == "1" ]]; then
  echo "graph point produced no records" >&2; RC=1
fi
exit $RC
