#!/usr/bin/env bash
# Offloader protocols at the copy-engine limit: one prepared GPU check (torch only, no vLLM), <= 270 s on one H200.
#
#   scripts/gpu_protocols.sh [OUT_DIR]          (default: $OUT, else results/gpu_protocols/<UTC time>-<pid>)
#
# From a session with a lent H200, the one call (the script ends within 270 s; 330 s covers it with a
# margin and leaves, in a 15-minute device allowance, time for the machine's start and one rerun):
#
#   run(command='bash scripts/gpu_protocols.sh "$OUT"', carry=[".gpu-wheels"], timeout_s=330)
#
# then copy the three files it returns into docs/measurements/<date>/ and complete the README.md draft.
#
# Runs, one after the other, each under its own time limit (steps 1-4 and the transfer check of 1: 240 s at
# most; step 5 runs only when 25 s are left after them, else the summary says it did not run and why; with
# the set-up and the bundling the script stays within LIMIT_S = 270 s, which the summary checks):
#   1. main (165 s; set-up and points within 150 s): python -m offload_tools.gpu_check_torch --protocols current upstream,
#      the 10 points of the H200 table, eager + CUDA graph, each point: un-offloaded baseline, both protocols
#      (ABBA), baseline again, every step timed on the device's clock (CUDA events); --step-sync stream; 50
#      unsynchronised graph replays per point and protocol checked bitwise. A point whose predicted time does
#      not fit in what is left is listed as not run with the reason (never skipped silently); pinned host
#      blocks are reused from point to point. Exit 0 only when every output is bitwise equal, no stale read,
#      ours >= 0.97 of the event model's bound in graph mode (>= 0.95 in eager for G <= 4), speedup >= 1.6 /
#      1.25 / 1.12 at (28,1) / (28,2) / (14,1), no offloaded step faster than the interleaved un-offloaded
#      one beyond its spread (>= 1 %), and every point ran;
#   2. compile (35 s): torch.compile (Inductor) of a 2-layer stack at full width, both protocols, (1,1): bitwise
#      equal to the compiled un-offloaded stack (must exit 0);
#   3. negative control (20 s): zeroed host copies, both protocols, 8 layers, (4,1) (2,1), eager + graph
#      (must exit 1, all_bitwise_equal false);
#   4. skip-refill control (15 s): ours skips one owed refill after the first replay (must exit 1, stale_reads >= 1);
#   transfer check (5 s): python -m analysis transfer-check on 1 (graph points; --threshold-pct 5);
#   5. device-wide sync per step (20 s) when time is left, both protocols, 14 layers: (14,1) (7,1) (14,2),
#      eager + graph (timing for comparison; its exit status is not judged), and its transfer check (5 s).
# Files left in OUT_DIR (a lent device returns at most 8): gpu_protocols.json (every part's JSON, env, steps,
# summary), logs.tar.gz (each part's log), README.md (a measurement README draft: per point the ratio to the
# physical ceiling max(t_base, M_c b / BW) first, then to the event model's bound). The last line is one
# GPU_PROTOCOLS_SUMMARY {json} line (offload_tools/gpu_check_report.py: pass rule); exit 0 only when it says ok.
#
# Needs: a Python with a CUDA torch (PYTHON, default python3); GPU_PROTOCOLS_EXTRA_ARGS is appended to
# every check. The plumbing run on CPU (every output, ok false as it must be there: no graphs, no crossing
# protocol, nothing for the transfer check to compare; 50-140 s on the shared 2-core host, by its load):
#   GPU_PROTOCOLS_EXTRA_ARGS="--device cpu --layers 4 --width-divisor 32 --steps 1 --tokens 8" \
#   GPU_PROTOCOLS_TIME_SCALE=4 PYTHON=.venv/bin/python bash scripts/gpu_protocols.sh /tmp/gpu_protocols_cpu
# pydantic (offload.selection imports results_schema) is taken from .gpu-wheels/ (cp312 manylinux wheels,
# unpacked into a temporary directory) when missing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${1:-${OUT:-$ROOT/results/gpu_protocols/$(date -u +%Y%m%dT%H%M%SZ)-$$}}"
SCALE="${GPU_PROTOCOLS_TIME_SCALE:-1}"   # multiplies every limit (a CPU plumbing run on a shared host: 4)
if ! [[ "$SCALE" =~ ^[1-9][0-9]?$ ]]; then
  echo "error: GPU_PROTOCOLS_TIME_SCALE ($SCALE) must be an integer from 1 to 99" >&2
  exit 2
fi
LIMIT_S=$((270 * SCALE)) MAIN_LIMIT_S=$((165 * SCALE)) MAIN_BUDGET_S=$((150 * SCALE))   # run() scales its own limits
if [[ -e "$OUT_DIR/gpu_protocols.json" || -e "$OUT_DIR/parts" ]]; then
  echo "error: $OUT_DIR holds an earlier run (gpu_protocols.json or parts/); refusing to reuse a result directory" >&2
  exit 2
fi
PARTS="$OUT_DIR/parts"   # removed once bundled; left behind (with what each part wrote) if the script is killed
mkdir -p "$PARTS"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
  PYLIB="$(mktemp -d)"
  "$PYTHON" - "$ROOT/.gpu-wheels" "$PYLIB" <<'PY' || { echo "error: pydantic missing and .gpu-wheels unusable" >&2; exit 3; }
import pathlib, sys, zipfile
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheels = sorted(src.glob("*.whl"))
if not wheels:
    sys.exit(f"no wheels in {src}")
for w in wheels:
    zipfile.ZipFile(w).extractall(dst)
PY
  export PYTHONPATH="$PYTHONPATH:$PYLIB"
fi
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; "$PYTHON" -c \
  "import sys, importlib.metadata as m; print(sys.version.split()[0], *(m.version(p) for p in ('torch', 'pydantic')))";
  git -C "$ROOT" rev-parse HEAD 2>/dev/null; } > "$PARTS/env.txt" 2>&1
CHECK=("$PYTHON" -m offload_tools.gpu_check_torch)
read -r -a EXTRA <<< "${GPU_PROTOCOLS_EXTRA_ARGS:-}"  # appended to every check (e.g. a CPU plumbing run: --device cpu ...)
MAIN_POINTS=(28,1 14,1 28,2 8,1 7,1 14,2 8,2 4,1 2,1 4,2)
declare -A RC

run() {  # name seconds args...
  local name=$1 limit=$(( $2 * SCALE )); shift 2
  local t=$(date +%s)
  timeout -k 5 "$limit" "${CHECK[@]}" "$@" "${EXTRA[@]}" --out "$PARTS/$name.json" > "$PARTS/$name.log" 2>&1
  RC[$name]=$?
  echo "$name: exit ${RC[$name]} in $(( $(date +%s) - t )) s (limit $limit s)" | tee -a "$PARTS/steps.txt"
}

run gpu_check_torch 165 --protocols current upstream --points "${MAIN_POINTS[@]}" --modes eager graph \
    --compile-points --budget-s "$MAIN_BUDGET_S"
grep -E '^GPU_CHECK_(POINT|NOT_RUN|FASTER)' "$PARTS/gpu_check_torch.log"
run compile 35 --protocols current upstream --layers 2 --points 1,1 --modes compile --compile-points 1,1 \
    --async-replays 0
run negative 20 --protocols current upstream --negative-control --layers 8 --points 4,1 2,1 \
    --modes eager graph --compile-points --async-replays 5
run skip_refill 15 --protocols current --skip-refill-control --layers 8 --points 8,1 4,1 --modes graph \
    --compile-points --async-replays 5
transfer_check() {  # name source [args...]
  local name=$1 src=$2; shift 2
  timeout -k 2 $((5 * SCALE)) "$PYTHON" -m analysis transfer-check "$PARTS/$src.json" "$@" > "$PARTS/$name.json" 2> "$PARTS/$name.log"
  RC[$name]=$?
  echo "$name: exit ${RC[$name]}" | tee -a "$PARTS/steps.txt"
}
transfer_check transfer_check gpu_check_torch --modes graph
SKIPPED=()
LEFT=$(( LIMIT_S - ($(date +%s) - T0) - 5 * SCALE ))   # 5 s kept for the bundle
if (( LEFT >= 25 * SCALE )); then
  run step_sync_device 20 --protocols current upstream --step-sync device --layers 14 --points 14,1 7,1 14,2 \
      --modes eager graph --compile-points --async-replays 0
  transfer_check transfer_check_device step_sync_device
else
  SKIPPED+=("step_sync_device=not run: $LEFT s left of the $LIMIT_S s limit, it needs $(( 25 * SCALE )) s")
  echo "step_sync_device: ${SKIPPED[0]#*=}" | tee -a "$PARTS/steps.txt"
fi

EXITS=()
for name in "${!RC[@]}"; do EXITS+=("$name=${RC[$name]}"); done
"$PYTHON" -m offload_tools.gpu_check_report bundle "$PARTS" "$OUT_DIR" --exit "${EXITS[@]}" \
    --elapsed-s "$(( $(date +%s) - T0 ))" --limit-s "$LIMIT_S" --main-limit-s "$MAIN_LIMIT_S" --points "${MAIN_POINTS[@]}" \
    --skipped "${SKIPPED[@]}"
STATUS=$?
[[ -s "$OUT_DIR/gpu_protocols.json" ]] && rm -rf "$PARTS"
[[ -n "${PYLIB:-}" ]] && rm -rf "$PYLIB"
exit "$STATUS"
