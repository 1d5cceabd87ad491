#!/usr/bin/env bash
# `make test`'s test stage (docs/test-suite.md): lint and the two pytest passes at once, so the two
# cores stay busy. Either pass alone left about a third of them idle (the engine pass waits on
# vLLM start-ups, the engine-free pass on its case processes and the disk).
#
#   1. the `exclusive` tests, alone among the tests (a test that kills a runner and checks what its own
#      later run ends: any other runner's start would end those processes first; a test whose case must
#      finish within a short case timeout; a timing that needs an unloaded machine), while `make lint`
#      (ruff, mypy, import contracts, layout; output to a log printed at the end) starts beside them at
#      `nice` NICE: lint starts no runner and no case process, and the exclusive tests leave about one
#      core idle (measured alone: 37 s wall, 21 CPU-s, most of it waiting on case timeouts);
#   2. at the same time, lint going on:
#      - the engine-free tests on TEST_WORKERS xdist workers, output to a log printed at the end, at
#        `nice` FREE_NICE (default 0: this pass is the longer one; docs/test-suite.md);
#      - the real-engine tests (`slow or engine`) on ENGINE_WORKERS workers at `nice` ENGINE_NICE (default 0),
#        output on the console:
#        at most ENGINE_WORKERS vLLM engines at once, each with one GEMM thread
#        (tests/runners/helpers.py: ONE_GEMM_THREAD).
#
#   3. `python -m results_schema check tests/fixtures`.
#
# Exit status: 0 only when every part passed; the script's last line names each part and its result.
# Environment: PY (the venv's python), TEST_WORKERS (default 3), ENGINE_WORKERS (default 2), NICE (lint's, default
# 10), FREE_NICE (the engine-free pass's, default 0), ENGINE_NICE (the real-engine pass's, default 0).
set -u
PY=${PY:-.venv/bin/python}
TEST_WORKERS=${TEST_WORKERS:-3}
ENGINE_WORKERS=${ENGINE_WORKERS:-2}
NICE=${NICE:-10}
FREE_NICE=${FREE_NICE:-0}
ENGINE_NICE=${ENGINE_NICE:-0}
logs=$(mktemp -d "${TMPDIR:-/tmp}/make-test.XXXXXX")

# The same machine gave nearly the same code's `make test` 1104 CPU-s in one run and 1601 CPU-s in the next
# (2026-12-03, every test about 1.5x: a shared host), so the stage's times say little without the host's speed
# beside them. A fixed pure-Python loop, timed at the start and at the end of the stage, is that reference.
host_speed() {
    "$PY" -c '
import sys, time
t, s = time.process_time(), 0
for i in range(10_000_000):
    s += i
print(f"host speed reference ({sys.argv[1]}): 10M Python loop steps took {time.process_time() - t:.2f} CPU-s")' "$1"
}
host_speed "start of the stage"

echo "== 1/3 tests that must run alone (-m exclusive), lint starting beside them"
lint_pid=""
exclusive_pid=""
free_pid=""
engine_pid=""
# Every job runs in the background and the script waits for it: background jobs of a non-interactive shell
# ignore SIGINT, and `wait` returns on a trapped signal, so on Ctrl-C or SIGTERM the script ends every started
# job (their runners would otherwise go on beside a later run and end its cases as orphans). A foreground
# pytest would catch Ctrl-C, exit 2, and the script would go on to the next step.
stop_jobs() {
    for pid in "$lint_pid" "$exclusive_pid" "$free_pid" "$engine_pid"; do
        [ -n "$pid" ] || continue
        pkill -TERM -P "$pid" 2>/dev/null
        kill -TERM "$pid" 2>/dev/null
    done
}
trap stop_jobs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
nice -n "$NICE" make --no-print-directory lint >"$logs/lint.log" 2>&1 &
lint_pid=$!
"$PY" -m pytest -q -m exclusive &
exclusive_pid=$!
wait "$exclusive_pid"
exclusive=$?
exclusive_pid=""  # reaped: its pid may be reused; stop_jobs must not signal it

echo "== 2/3 the engine-free tests and the real-engine tests at once, lint going on" \
     "(lint and engine-free output: printed when they end; logs in $logs)"
nice -n "$FREE_NICE" "$PY" -m pytest -q -n "$TEST_WORKERS" --dist worksteal -m 'not slow and not engine and not exclusive' \
    --durations=10 >"$logs/engine-free.log" 2>&1 &
free_pid=$!
nice -n "$ENGINE_NICE" "$PY" -m pytest -q -n "$ENGINE_WORKERS" --dist worksteal -m '(slow or engine) and not exclusive' --durations=0 &
engine_pid=$!
wait "$engine_pid"
engine=$?
engine_pid=""
wait "$free_pid"
free=$?
free_pid=""
wait "$lint_pid"
lint=$?
lint_pid=""
trap - EXIT INT TERM

echo "== the engine-free tests (ran beside the real-engine tests above)"
cat "$logs/engine-free.log"
echo "== lint (ran beside the tests)"
cat "$logs/lint.log"
host_speed "end of the tests"
echo "== 3/3 the committed fixtures against the schema"
"$PY" -m results_schema check tests/fixtures
fixtures=$?

verdict() { if [ "$1" = 0 ]; then echo "passed"; else echo "FAILED (exit $1)"; fi; }
summary="exclusive tests $(verdict $exclusive); lint $(verdict $lint); engine-free tests $(verdict $free);"
summary+=" real-engine tests $(verdict $engine); fixture check $(verdict $fixtures)"
if [ $exclusive = 0 ] && [ $lint = 0 ] && [ $free = 0 ] && [ $engine = 0 ] && [ $fixtures = 0 ]; then
    echo "test stage: all passed: $summary"
    exit 0
fi
echo "test stage: FAILED: $summary"
exit 1
