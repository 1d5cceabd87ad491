"""Fake ``NPUModelRunner`` following vllm-ascend v0.23 ``vllm_ascend/worker/model_runner_v1.py``.

Real structure (quoted from the source): the parent ``GPUModelRunner.__init__`` runs first and
calls ``set_offloader(create_offloader(self.offload_config))`` through
``vllm.v1.worker.gpu_model_runner``'s namespace; then::

    # Replace the CUDA PrefetchOffloader set by parent __init__ with NPU version.
    offload_cfg = vllm_config.offload_config
    if (offload_cfg is not None
            and getattr(offload_cfg, "prefetch", None) is not None
            and getattr(offload_cfg.prefetch, "offload_group_size", 0) > 0):
        from vllm.model_executor.offloader.base import set_offloader
        from vllm_ascend.model_executor.offloader.prefetch import NPUPrefetchOffloader
        set_offloader(NPUPrefetchOffloader(...))

The parent here is a stand-in (the real GPUModelRunner needs a full VllmConfig); the model is
a stack of probe layers built through ``get_offloader().wrap_modules`` like ``make_layers``.
This fake's ``load_model`` does not call ``post_init``: our plugin must.
"""

import torch


class _ParentRunner:
    """Stand-in for GPUModelRunner.__init__'s offloader line (looked up at call time)."""

    def __init__(self, vllm_config, device):
        import vllm.v1.worker.gpu_model_runner as gmr_namespace
        from vllm.model_executor.offloader.base import set_offloader

        factory = getattr(_ParentRunner, "factory_namespace", None) or gmr_namespace
        self.offload_config = vllm_config.offload_config
        set_offloader(factory.create_offloader(self.offload_config))


class NPUModelRunner(_ParentRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        offload_cfg = vllm_config.offload_config
        if (offload_cfg is not None
                and getattr(offload_cfg, "prefetch", None) is not None
                and getattr(offload_cfg.prefetch, "offload_group_size", 0) > 0):
            from vllm.model_executor.offloader.base import set_offloader

            from vllm_ascend.model_executor.offloader.prefetch import NPUPrefetchOffloader
            set_offloader(NPUPrefetchOffloader(
                group_size=offload_cfg.prefetch.offload_group_size,
                num_in_group=offload_cfg.prefetch.offload_num_in_group,
                prefetch_step=offload_cfg.prefetch.offload_prefetch_step,
                offload_params=offload_cfg.prefetch.offload_params,
            ))

    def load_model(self, build_layer=None, num_layers=8):
        from vllm.model_executor.offloader.base import get_offloader

        self.layers = get_offloader().wrap_modules(build_layer(i) for i in range(num_layers))
