"""Fake ``NPUPrefetchOffloader`` (vllm-ascend v0.23 name and constructor signature)."""

from vllm.model_executor.offloader.base import BaseOffloader


class NPUPrefetchOffloader(BaseOffloader):
    def __init__(self, group_size, num_in_group, prefetch_step, offload_params=None, mode="cpu"):
        self.group_size = group_size
        self.num_in_group = num_in_group
        self.prefetch_step = prefetch_step
        self.offload_params = offload_params or set()
        self.module_offloaders = []

    def wrap_modules(self, modules_generator, prefix=""):
        return list(modules_generator)
