#!/bin/bash
# rotating order of 4 conditions x REPS fresh processes; workload pinned to CPU 0, stressor (if any) to CPU 1
# run from this folder as root (it writes the THP setting); PY: a Python with torch (a checkout's .venv)
PY=${PY:-../../../.venv/bin/python}
REPS=${REPS:-6}
THP=/sys/kernel/mm/transparent_hugepage/enabled
for r in $(seq 1 $REPS); do
  for cond in base thp compute membw; do
    echo madvise > $THP; spid=""
    case $cond in
      thp) echo always > $THP;;
      compute|membw) taskset -c 1 $PY stress.py $cond & spid=$!; sleep 1;;
    esac
    out=$(taskset -c 0 $PY work.py 0 3)
    [ -n "$spid" ] && kill $spid && wait $spid 2>/dev/null
    echo madvise > $THP
    echo "{\"rep\": $r, \"cond\": \"$cond\", \"thp\": \"$( [ $cond = thp ] && echo always || echo madvise)\", \"res\": $out}"
  done
done
