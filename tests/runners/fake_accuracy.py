"""A stand-in for ``python -m runners.incase.accuracy`` that costs no vLLM start-up (runner accuracy-phase tests).

Takes the ``run`` subcommand's arguments (``--case PATH``), writes the evidence sidecar the evidence hook
would (when ``OFFLOAD_EVIDENCE_PATH`` is set) and runs the real ``runners.incase.accuracy.case``
pipeline (dataset checks, chat template, scoring, result + examples files) with a
deterministic fake engine whose output depends only on the prompt, and the model's tokenizer loaded
without importing torch (``tests.support.tokenizer.qwen2_tokenizer``: the class ``AutoTokenizer`` returns).

``FAKE_ACCURACY`` (in the case environment, ``label=behaviour,...``) selects a fault:

* ``crash``: exit 1 before writing anything.
* ``differ``: the first example's answer differs from the baseline's (verifier must fail).
* ``count``: append the label to the file named by ``FAKE_ACCURACY_COUNT`` (how many times a case ran).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from offload.selection import select_offload_layers
from results_schema.codec.io import write_json
from results_schema.records.models import RuntimeEvidence
from runners.incase.accuracy.case import run_cases
from runners.incase.accuracy.engine import Generation
from runners.incase.accuracy.cli import build_parser, run_kwargs
from tests.support.tokenizer import qwen2_tokenizer

LAYER_BYTES = 295_936


def main() -> int:
    ns = build_parser().parse_args(sys.argv[1:])
    assert ns.cmd == "run", ns.cmd
    kwargs = run_kwargs(ns)  # --case PATH (the runner) or the hand flags
    behaviours = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_ACCURACY", "").split(",") if "=" in kv)
    mode = behaviours.get(kwargs["label"], "ok")
    if os.environ.get("FAKE_ACCURACY_COUNT"):
        with open(os.environ["FAKE_ACCURACY_COUNT"], "a") as fh:
            fh.write(f"{kwargs['label']}\n")
    if mode == "crash":
        print("RuntimeError: fake accuracy case crashed", flush=True)
        return 1
    offload = kwargs["offload"]
    ev_path = os.environ.get("OFFLOAD_EVIDENCE_PATH")
    if ev_path:
        g, n = offload.offload_group_size, offload.offload_num_in_group
        layers = select_offload_layers(8, g, n) if offload.enabled else ()
        write_json(Path(ev_path), RuntimeEvidence(
            offloader_class="fake.Offloader", implementation=kwargs["implementation"], offload_group_size=g,
            offload_num_in_group=n, offload_prefetch_step=offload.offload_prefetch_step, num_layers=8,
            selected_layers=layers, wrapped_layers=layers, wrapped_count=len(layers),
            offloaded_bytes=LAYER_BYTES * len(layers), static_buffer_bytes=0,
            released_bytes=LAYER_BYTES * len(layers), post_init_called=True, pid=os.getpid(), device="cpu"))

    class Engine:
        name = "fake"

        def __init__(self, *args: object) -> None:
            pass

        def generate(self, prompts, sampling):  # type: ignore[no-untyped-def]
            out = []
            for i, p in enumerate(prompts):
                h = int(hashlib.sha256(str(list(p)).encode()).hexdigest(), 16)
                text = f"so \\boxed{{{h % 100}}}" if sampling.max_tokens > 8 else "ABCD"[h % 4]
                if mode == "differ" and i == 0:
                    text += " (different)"
                out.append(Generation(text=text, token_ids=tuple(text.encode())[: sampling.max_tokens],
                                      finish_reason="stop"))
            return out

    run_cases(**kwargs, engine_factory=Engine, tokenizer_loader=qwen2_tokenizer)  # no torch import: no engine
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
