#!/usr/bin/env bash
# Offloader protocols at the copy-engine limit: one prepared GPU check (torch only, no vLLM), <= 6 min on one H200.
#
#   scripts/gpu_protocols.sh [OUT_DIR]          (default: $OUT, else results/gpu_protocols/<UTC time>-<pid>)
#
# Runs, one after the other, each under its own time limit (sum 360 s):
#   1. main (235 s; starts no point after 190 s): python -m offload_tools.gpu_check_torch --protocols current upstream
#      (ABBA per point), the 10 points of the H200 table, eager + CUDA graph + torch.compile at (4,1),
#      --step-sync stream, 50 unsynchronised graph replays per point and protocol checked bitwise
#      -> gpu_check_torch.json (exit 0 only when every output is bitwise equal, no stale read, ours >= 0.97
#      of the bound in graph mode, >= 0.95 in eager for G <= 4, speedup >= 1.6 / 1.25 / 1.12 at (28,1) / (28,2) / (14,1));
#   2. negative control (45 s): zeroed host copies, both protocols, 8 layers, (4,1) (2,1), eager + graph
#      -> negative.json (must exit 1, all_bitwise_equal false);
#   3. skip-refill control (35 s): ours skips one owed refill after the first replay
#      -> skip_refill.json (must exit 1, stale_reads >= 1);
#   4. device-wide sync per step (45 s), both protocols, 14 layers: (14,1) (7,1) (14,2) (M = 1, 2, 2), eager + graph
#      -> step_sync_device.json (today's timing, for comparison; its exit status is not judged);
#   5. python -m analysis transfer-check on 1 (graph points; --threshold-pct 5) and 4 -> transfer_check*.json.
# The last line is one GPU_PROTOCOLS_SUMMARY {json} line; exit 0 only when 1 exits 0, 2 and 3 fail as they
# must, and the transfer check of 1 is within 5 %.
#
# Needs: a Python with a CUDA torch (PYTHON, default python3); GPU_PROTOCOLS_EXTRA_ARGS is appended to
# every check (plumbing smoke test on CPU: "--device cpu --layers 4 --width-divisor 32 --steps 1"). pydantic (offload.selection imports
# results_schema) is taken from .gpu-wheels/ (cp312 manylinux wheels, unpacked into OUT) when missing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${1:-${OUT:-$ROOT/results/gpu_protocols/$(date -u +%Y%m%dT%H%M%SZ)-$$}}"
if [[ -e "$OUT_DIR/gpu_check_torch.json" ]]; then
  echo "error: $OUT_DIR/gpu_check_torch.json exists; refusing to reuse a result directory" >&2
  exit 2
fi
mkdir -p "$OUT_DIR"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
  "$PYTHON" - "$ROOT/.gpu-wheels" "$OUT_DIR/pylib" <<'PY' || { echo "error: pydantic missing and .gpu-wheels unusable" >&2; exit 3; }
import pathlib, sys, zipfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheels = sorted(src.glob("*.whl"))
if not wheels:
    sys.exit(f"no wheels in {src}")
for w in wheels:
    zipfile.ZipFile(w).extractall(dst)
PY
  export PYTHONPATH="$PYTHONPATH:$OUT_DIR/pylib"
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; "$PYTHON" -c \
  "import sys, torch, pydantic; print(sys.version.split()[0], torch.__version__, torch.version.cuda, pydantic.VERSION)";
  git -C "$ROOT" rev-parse HEAD 2>/dev/null; } > "$OUT_DIR/env.txt" 2>&1
CHECK=("$PYTHON" -m offload_tools.gpu_check_torch)
read -r -a EXTRA <<< "${GPU_PROTOCOLS_EXTRA_ARGS:-}"  # appended to every check (e.g. a CPU smoke run: --device cpu ...)
T0=$(date +%s)

run() {  # name seconds args...
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  timeout "$limit" "${CHECK[@]}" "$@" "${EXTRA[@]}" --out "$OUT_DIR/$name.json" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t )) s" | tee -a "$OUT_DIR/steps.txt"
  return $rc
}

run gpu_check_torch 235 --protocols current upstream --budget-s 190; RC_MAIN=$?
run negative 45 --protocols current upstream --negative-control --layers 8 --points 4,1 2,1 \
    --modes eager graph --compile-points --async-replays 5; RC_NEG=$?
run skip_refill 35 --protocols current --skip-refill-control --layers 8 --points 8,1 4,1 --modes graph \
    --compile-points --async-replays 5; RC_SKIP=$?
run step_sync_device 45 --protocols current upstream --step-sync device --layers 14 --points 14,1 7,1 14,2 \
    --modes eager graph --compile-points --async-replays 0; RC_DEV=$?
"$PYTHON" -m analysis transfer-check "$OUT_DIR/gpu_check_torch.json" --modes graph > "$OUT_DIR/transfer_check.json"; RC_TC=$?
"$PYTHON" -m analysis transfer-check "$OUT_DIR/step_sync_device.json" > "$OUT_DIR/transfer_check_device.json"

"$PYTHON" - "$OUT_DIR" "$RC_MAIN" "$RC_NEG" "$RC_SKIP" "$RC_DEV" "$RC_TC" "$(( $(date +%s) - T0 ))" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rc_main, rc_neg, rc_skip, rc_dev, rc_tc, elapsed = (int(v) for v in sys.argv[2:])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return {}
neg, skip = load("negative.json"), load("skip_refill.json")
summary = {"elapsed_s": elapsed, "main_exit": rc_main, "main_ok": load("gpu_check_torch.json").get("ok"),
           "negative_failed_as_it_must": rc_neg == 1 and neg.get("all_bitwise_equal") is False,
           "skip_refill_detected": rc_skip == 1 and (skip.get("stale_reads") or 0) >= 1,
           "step_sync_device_exit": rc_dev, "transfer_check_exit": rc_tc,
           "transfer_check_max_abs_error_pct": load("transfer_check.json").get("max_abs_error_pct")}
summary["ok"] = bool(rc_main == 0 and summary["negative_failed_as_it_must"] and summary["skip_refill_detected"]
                     and rc_tc == 0)
print("GPU_PROTOCOLS_SUMMARY " + json.dumps(summary, sort_keys=True))
sys.exit(0 if summary["ok"] else 1)
PY
