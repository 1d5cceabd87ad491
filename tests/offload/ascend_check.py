"""Subprocess script for test_plugin: our plugin on the fake vLLM-Ascend v0.23 runner.

Run with ``tests/offload/fake_ascend`` on PYTHONPATH and OFFLOAD_IMPL=current. Prints one
``ASCEND_CHECK <json>`` line.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import torch


def main() -> int:
    import offload.plugin
    import offload.prefetch
    from offload.backend import StreamBackend

    offload.plugin.register()
    import vllm_ascend  # installs the fake torch.npu, as torch_npu does
    import vllm_ascend.worker.model_runner_v1 as mr
    from vllm.config import OffloadConfig
    from vllm.config.offload import PrefetchOffloadConfig
    from vllm.model_executor.offloader.base import get_offloader

    from tests.offload.fakes import ProbeLayer

    # device boundary: parameters live on the CPU here; route them through the NPU backend
    offload.prefetch.backend_for_device = lambda device: StreamBackend("npu", pin=False)

    result: dict = {}
    cfg = OffloadConfig(prefetch=PrefetchOffloadConfig(offload_group_size=4, offload_num_in_group=1,
                                                       offload_prefetch_step=1))
    runner = mr.NPUModelRunner(SimpleNamespace(offload_config=cfg), "npu:0")
    off = get_offloader()
    result["class_after_init"] = type(off).__name__
    log: list = []
    runner.load_model(build_layer=lambda i: ProbeLayer(i, log))
    result["post_init_called"] = off.post_init_called
    result["backend"] = off.backend.name
    result["backend_ns_is_fake_npu"] = off.backend.ns is torch.npu is vllm_ascend._NS
    result["wrapped_layers"] = list(off.evidence_state()["wrapped_layers"])
    x = torch.zeros(())
    for _ in range(2):
        for layer in runner.layers:
            x = layer(x)
    result["output"] = float(x)
    result["expected"] = float(2 * sum(5 * (i + 1) for i in range(8)))
    result["npu_calls"] = sorted({c[0] for c in vllm_ascend.CALLS})
    result["load_model_patched"] = bool(getattr(mr.NPUModelRunner.load_model, "_offload_plugin_patched", False))

    mr.NPUModelRunner(SimpleNamespace(offload_config=OffloadConfig()), "npu:0")
    result["class_when_disabled"] = type(get_offloader()).__name__
    print("ASCEND_CHECK " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
