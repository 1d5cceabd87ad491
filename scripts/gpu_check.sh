#!/usr/bin/env bash
# GPU check (one command, < 10 min on one H200): same-runtime current vs official offloader.
#
#   scripts/gpu_check.sh [OUT_DIR]
#
# Builds a 28-layer Qwen2-shaped model locally (runners.tiny_model, Qwen2.5-1.5B widths:
# hidden 1536, intermediate 8960, 12 heads, 2 KV heads; random bf16 weights, no hub access),
# then runs, in three processes, the baseline and the 10 same_runtime points
# (28,1) (14,1) (28,2) (8,1) (7,1) (14,2) (8,2) (4,1) (2,1) (4,2), each with this project's
# offloader ("current") and vLLM's PrefetchOffloader ("official") on the same vLLM install,
# and prints throughput current/official per (G,N) (target >= 1.00 everywhere).
#
# Needs: a CUDA build of vLLM importable by $PYTHON (default: .venv/bin/python if present,
# else python3). Nothing is mocked. Env knobs: PYTHON, GPU_CHECK_GRAPHS=1 (compile + CUDA
# graphs instead of eager; slower start-up), GPU_CHECK_TIMEOUT (seconds per chunk, 200).
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
"$PYTHON" -m runners.tiny_model --out "$MODEL" --num-layers 28 --hidden-size 1536 \
  --intermediate-size 8960 --num-heads 12 --num-kv-heads 2
echo "model built in ${SECONDS}s"

GRAPHS=()
[[ "${GPU_CHECK_GRAPHS:-0}" == "1" ]] && GRAPHS=(--graphs)
CHUNK_TIMEOUT="${GPU_CHECK_TIMEOUT:-200}"
RC=0
run_chunk() {
  # one process per chunk bounds what a leaked engine could hold; --baseline only in the first
  set +e
  timeout --signal=TERM --kill-after=20 "$CHUNK_TIMEOUT" "$PYTHON" -m offload.gpu_compare run \
    --model "$MODEL" --out "$OUT/records.jsonl" "${GRAPHS[@]}" "$@" 2>&1 | tee -a "$OUT/run.log" \
    | grep -E "^(GPU_COMPARE|error|Traceback)|Error"
  local statuses=("${PIPESTATUS[@]}")
  set -e
  local rc=${statuses[0]}
  if [[ $rc -ne 0 ]]; then echo "chunk failed (exit $rc): $*  (log: $OUT/run.log)" >&2; RC=1; fi
}
run_chunk --baseline --points 28,1 14,1 28,2
run_chunk --points 8,1 7,1 14,2
run_chunk --points 8,2 4,1 2,1 4,2
echo "total ${SECONDS}s"
"$PYTHON" -m offload.gpu_compare summarize "$OUT/records.jsonl" | tee "$OUT/summary.txt"
exit $RC
