#!/usr/bin/env bash
# two identical processes at the same time, one per vCPU: does the host's speed move on both vCPUs together?
cd "$(dirname "$0")"; PY=${PY:-../../../.venv/bin/python}
W=${1:-120}
taskset -c 0 $PY duet_work.py $W 1 > cpu0.json &
taskset -c 1 $PY duet_work.py $W 1 > cpu1.json &
wait
