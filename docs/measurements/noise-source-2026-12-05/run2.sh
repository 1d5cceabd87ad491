#!/bin/bash
PY=/work/fresh-aa1/.venv/bin/python
for r in $(seq 1 ${REPS:-10}); do
  for cond in aslr noaslr; do
    if [ $cond = noaslr ]; then out=$(setarch -R taskset -c 0 $PY work2.py); else out=$(taskset -c 0 $PY work2.py); fi
    echo "{\"rep\": $r, \"cond\": \"$cond\", \"res\": $out}"
  done
done
