"""Test driver: run several offload settings through real vLLM in ONE process.

Usage: ``python tests/offload/vllm_driver.py SPEC.json`` where SPEC is
``{"model": DIR, "prompts": [[ids...], ...], "max_tokens": int, "enforce_eager": bool,
"points": [{"label": str, "group_size": G, "num_in_group": N, "prefetch_step": S,
"offload_params": [..], "corrupt_host": bool}, ...]}``. ``corrupt_host`` zeroes the host
storage after the first generation and generates again (negative control).

The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so consecutive ``LLM``
objects reuse the interpreter (vLLM start-up dominates a test otherwise) and the installed
offloader can be inspected directly. ``OFFLOAD_IMPL`` must be ``current`` or ``sync`` in the
environment when the process starts (the plugin reads it when vLLM loads plugins); each
point then sets it to its ``impl`` (default ``current``), which our factory reads per
engine. G=0 points run the baseline (our factory keeps the runner's no-op offloader). Prints one ``DRIVER_RESULT <json>`` line
per point: generated token ids per prompt and the offloader's evidence state. A point's
``kernel_path`` sets ``OFFLOAD_CPU_KERNEL_PATH`` for that engine (plain / packed); spec
``bench_rounds`` ``[[seed, round, num_prompts, input_len], ...]`` (in the spec: every point; in a point:
that point) replaces ``prompts`` by ``runners.incase.bench_one``'s prompts, one generate call per round.
"""

from __future__ import annotations

import gc
import os
import json
import sys


def main() -> int:
    spec = json.loads(open(sys.argv[1]).read())
    from runners.incase.import_heap import engine_in_process, frozen_import

    assert engine_in_process(), "the driver builds its engines in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)"
    with frozen_import("vllm", freeze=True):  # as a case process with its engine core in it does
        from vllm import LLM, SamplingParams
        from vllm.distributed import cleanup_dist_env_and_memory
        from vllm.inputs import TokensPrompt
        from vllm.model_executor.offloader import get_offloader, set_offloader

    params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in spec["prompts"]]
    for point in spec["points"]:
        os.environ["OFFLOAD_IMPL"] = point.get("impl", "current")  # read by our factory per engine
        if point.get("kernel_path"):  # read by offload.cpu_kernels per processed layer
            os.environ["OFFLOAD_CPU_KERNEL_PATH"] = point["kernel_path"]
        kwargs = {}
        if point["group_size"] > 0:
            kwargs = dict(
                offload_group_size=point["group_size"],
                offload_num_in_group=point["num_in_group"],
                offload_prefetch_step=point.get("prefetch_step", 1),
                offload_params=set(point.get("offload_params", ())),
            )
        llm = LLM(
            model=spec["model"],
            dtype="bfloat16",
            max_model_len=256,
            seed=0,
            enforce_eager=spec.get("enforce_eager", True),
            enable_prefix_caching=False,
            **kwargs,
        )
        bench_rounds = point.get("bench_rounds", spec.get("bench_rounds"))
        if bench_rounds:
            # bench_one's prompts, one generate call per round (batch shape as in a real case)
            from runners.incase.bench_one import _vocab, make_prompt_ids

            vocab = _vocab(llm)
            outs = []
            for seed, rnd, num_prompts, input_len in bench_rounds:
                ids = make_prompt_ids(seed, rnd, num_prompts, input_len, vocab)
                outs += llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
        else:
            outs = llm.generate(prompts, params, use_tqdm=False)
        off = get_offloader()
        state = off.evidence_state() if hasattr(off, "evidence_state") else None
        extra = {}
        if state is not None:
            extra = {"fallback_loads": off.fallback_loads, "copies_issued": off.copies_issued,
                     "custom_ops": off._use_ops}
        result = {
            "label": point["label"],
            "offloader_class": f"{type(off).__module__}.{type(off).__qualname__}",
            "token_ids": [list(o.outputs[0].token_ids) for o in outs],
            "evidence": state,
            **extra,
        }
        if point.get("corrupt_host") and state is not None and off.wrapped:
            # Negative control: zero the host copies; outputs must change if the wrapped
            # layers really read the buffers this offloader fills from host storage.
            for w in off.wrapped:
                w.host_flat.zero_()
            again = llm.generate(prompts, params, use_tqdm=False)
            result["corrupted_token_ids"] = [list(o.outputs[0].token_ids) for o in again]
        print("DRIVER_RESULT " + json.dumps(result), flush=True)
        llm.llm_engine.engine_core.shutdown() if hasattr(llm.llm_engine, "engine_core") else None
        del llm, outs, off
        set_offloader(None)  # vLLM's global still held this engine's offloader (a cycle through its wrapped layers)
        cleanup_dist_env_and_memory()  # unfreezes the heap and collects: the engine's cycles go
        gc.freeze()  # the next engine's collections skip the import's objects again (a case process's first state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
