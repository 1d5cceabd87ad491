#!/bin/bash
# run from this folder as root (it writes the THP setting); PY: a Python with torch (a checkout's .venv)
PY=${PY:-../../../.venv/bin/python}
for r in $(seq 1 ${REPS:-10}); do
  for cond in aslr noaslr; do
    if [ $cond = noaslr ]; then out=$(setarch -R taskset -c 0 $PY work.py 4 1); else out=$(taskset -c 0 $PY work.py 4 1); fi
    echo "{\"rep\": $r, \"cond\": \"$cond\", \"res\": $out}"
  done
done
